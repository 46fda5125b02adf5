//! What the client sees of recall, beyond the answer: a Responses answer
//! echoes the request's `tools` without `foldgate_recall`; the texts of
//! two streamed rounds are set apart; and the model's recall input is
//! bounded and checked (a 1 MB query is cut, arguments that are not
//! `{"query": "…"}` or hold a lone surrogate escape get a one-line error
//! result, and the call never reaches the client). Through the real
//! server, against a scripted model that writes its answers as raw JSON.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly; the no-panic rule is for the request path"
)]

mod common;

use common::convo::Convo;
use common::llm::LOSSY_SUMMARY;
use common::mock::{Mock, Recorded};
use common::{Foldgate, Reply, post_json};
use foldgate::summarize::prompt::SYSTEM_PROMPT;
use http::Response;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

const FACT: &str = "the favourite colour of the customer is teal";
const LOOKING: &str = "Let me look that up.";
const ANSWER: &str = "The favourite colour is teal.";
const BLIND: &str = "I cannot see that.";

/// The recall call's arguments as the model writes them, raw: `literal`
/// is the JSON string literal of `arguments` (chat, Responses, Anthropic's
/// streamed `partial_json`), `object` Anthropic's whole `input`. Raw, so
/// a lone surrogate escape reaches foldgate as the model sent it.
#[derive(Clone)]
struct Args {
    literal: String,
    object: String,
}

impl Args {
    fn query(query: &str) -> Self {
        let object = json!({ "query": query }).to_string();
        Self {
            literal: serde_json::to_string(&object).unwrap(),
            object,
        }
    }

    /// `{"query": "\ud800 vault"}`, the surrogate escaped in the answer's
    /// own JSON (as issue 25 sent it).
    fn lone_surrogate() -> Self {
        Self {
            literal: r#""{\"query\": \"\ud800 vault\"}""#.into(),
            object: r#"{"query": "\ud800 vault"}"#.into(),
        }
    }

    /// Serialises `value` with the arguments in place of `"@ARGS@"` and
    /// `"@INPUT@"`.
    fn fill(&self, value: &Value) -> String {
        value
            .to_string()
            .replace("\"@ARGS@\"", &self.literal)
            .replace("\"@INPUT@\"", &self.object)
    }
}

/// The scripted model: calls the recall tool once when it has it and no
/// result yet (writing `LOOKING` first), then answers from what it sees.
struct Model {
    mock: Mock,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl Model {
    async fn start(args: Args) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let mock = Mock::start(move |r: Recorded| {
            let (args, log) = (args.clone(), log.clone());
            async move { answer(&r, &args, &log) }
        })
        .await;
        Self { mock, seen }
    }

    /// The requests the model answered (summarizer calls left out).
    fn seen(&self) -> Vec<Value> {
        self.seen.lock().unwrap().clone()
    }

    fn config(&self) -> String {
        format!(
            "[providers.mock]\nbase_url = \"{}/v1\"\n\
             [models.\"tiny-*\"]\ncontext_window = 4000\n\
             [policy]\nreset_ratio = 0.45\nmode = \"inline\"\n\
             [summarizer]\nmax_summary_tokens = 400\nretries = 0\ntimeout = \"5s\"\n",
            self.mock.url
        )
    }
}

fn raw(content_type: &str, body: String) -> Response<foldgate::body::Body> {
    Response::builder()
        .header("content-type", content_type)
        .body(foldgate::body::full(body))
        .unwrap()
}

/// An event stream of `events` (named by their `type` where they have
/// one), ending with `[DONE]` when `done`.
fn sse(events: &[Value], args: &Args, done: bool) -> Response<foldgate::body::Body> {
    let mut body: String = events
        .iter()
        .map(|e| match e["type"].as_str() {
            Some(kind) => format!("event: {kind}\ndata: {}\n\n", args.fill(e)),
            None => format!("data: {}\n\n", args.fill(e)),
        })
        .collect();
    if done {
        body.push_str("data: [DONE]\n\n");
    }
    raw("text/event-stream", body)
}

fn answer(r: &Recorded, args: &Args, log: &Mutex<Vec<Value>>) -> Response<foldgate::body::Body> {
    let body = r.json();
    if body.pointer("/messages/0/content").and_then(Value::as_str) == Some(SYSTEM_PROMPT) {
        let summary = json!({"choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": LOSSY_SUMMARY}}]});
        return raw("application/json", summary.to_string());
    }
    log.lock().unwrap().push(body.clone());
    let text = body.to_string();
    let offered = text.contains("\"name\":\"foldgate_recall\"");
    let answered = ["\"role\":\"tool\"", "tool_result", "function_call_output"]
        .iter()
        .any(|k| text.contains(k));
    let recall = offered && !answered;
    let said = if recall {
        LOOKING
    } else if text.contains("teal") {
        ANSWER
    } else {
        BLIND
    };
    let stream = body["stream"] == json!(true);
    if r.uri.ends_with("/messages") {
        anthropic(said, recall, stream, args)
    } else if r.uri.ends_with("/responses") {
        responses(&body, said, recall, stream, args)
    } else {
        chat(said, recall, stream, args)
    }
}

fn chat(said: &str, recall: bool, stream: bool, args: &Args) -> Response<foldgate::body::Body> {
    let call = json!({"id": "call_r", "type": "function",
        "function": {"name": "foldgate_recall", "arguments": "@ARGS@"}});
    let finish = if recall { "tool_calls" } else { "stop" };
    if !stream {
        let mut message = json!({"role": "assistant", "content": said});
        if recall {
            message["tool_calls"] = json!([call]);
        }
        let answer = json!({"id": "c", "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}]});
        return raw("application/json", args.fill(&answer));
    }
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "c", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut events: Vec<Value> = said
        .split_inclusive(' ')
        .map(|w| chunk(json!({"content": w}), Value::Null))
        .collect();
    if recall {
        let start = json!({"index": 0, "id": "call_r", "type": "function",
            "function": {"name": "foldgate_recall", "arguments": ""}});
        events.push(chunk(json!({"tool_calls": [start]}), Value::Null));
        let piece = json!({"index": 0, "function": {"arguments": "@ARGS@"}});
        events.push(chunk(json!({"tool_calls": [piece]}), Value::Null));
    }
    events.push(chunk(json!({}), json!(finish)));
    sse(&events, args, true)
}

fn anthropic(
    said: &str,
    recall: bool,
    stream: bool,
    args: &Args,
) -> Response<foldgate::body::Body> {
    let stop = if recall { "tool_use" } else { "end_turn" };
    let usage = json!({"input_tokens": 10, "output_tokens": 5});
    if !stream {
        let mut content = vec![json!({"type": "text", "text": said})];
        if recall {
            content.push(json!({"type": "tool_use", "id": "toolu_r", "name": "foldgate_recall", "input": "@INPUT@"}));
        }
        let answer = json!({"id": "msg_r", "type": "message", "role": "assistant", "model": "m",
            "content": content, "stop_reason": stop, "usage": usage});
        return raw("application/json", args.fill(&answer));
    }
    let mut events = vec![
        json!({"type": "message_start", "message": {"id": "msg_s", "type": "message", "role": "assistant",
            "content": [], "model": "m", "stop_reason": null, "usage": usage}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ];
    for word in said.split_inclusive(' ') {
        events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word}}));
    }
    events.push(json!({"type": "content_block_stop", "index": 0}));
    if recall {
        events.push(
            json!({"type": "content_block_start", "index": 1, "content_block":
            {"type": "tool_use", "id": "toolu_r", "name": "foldgate_recall", "input": {}}}),
        );
        events.push(json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "@ARGS@"}}));
        events.push(json!({"type": "content_block_stop", "index": 1}));
    }
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 5}}));
    events.push(json!({"type": "message_stop"}));
    sse(&events, args, false)
}

/// A Responses answer; its response object echoes the request's `tools`
/// and `tool_choice`, as the API does.
fn responses(
    request: &Value,
    said: &str,
    recall: bool,
    stream: bool,
    args: &Args,
) -> Response<foldgate::body::Body> {
    let message = json!({"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": said, "annotations": []}]});
    let mut items = vec![message.clone()];
    if recall {
        items.push(
            json!({"type": "function_call", "id": "fc_1", "call_id": "call_r",
            "name": "foldgate_recall", "arguments": "@ARGS@", "status": "completed"}),
        );
    }
    let response = |output: Value, status: &str| {
        json!({"id": "resp_1", "object": "response", "status": status, "output": output,
            "tools": request.get("tools").cloned().unwrap_or(json!([])),
            "tool_choice": request.get("tool_choice").cloned().unwrap_or(json!("auto")),
            "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}})
    };
    if !stream {
        return raw(
            "application/json",
            args.fill(&response(json!(items), "completed")),
        );
    }
    let created = response(json!([]), "in_progress");
    let mut events = vec![
        json!({"type": "response.created", "response": created}),
        json!({"type": "response.in_progress", "response": created}),
        json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "message", "id": "msg_1", "status": "in_progress", "role": "assistant", "content": []}}),
        json!({"type": "response.content_part.added", "output_index": 0, "item_id": "msg_1", "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []}}),
    ];
    for word in said.split_inclusive(' ') {
        events.push(
            json!({"type": "response.output_text.delta", "output_index": 0, "item_id": "msg_1",
            "content_index": 0, "delta": word}),
        );
    }
    events.push(
        json!({"type": "response.output_text.done", "output_index": 0, "item_id": "msg_1",
        "content_index": 0, "text": said}),
    );
    events.push(
        json!({"type": "response.content_part.done", "output_index": 0, "item_id": "msg_1",
        "content_index": 0, "part": message["content"][0]}),
    );
    events.push(json!({"type": "response.output_item.done", "output_index": 0, "item": message}));
    if recall {
        events.push(json!({"type": "response.output_item.added", "output_index": 1, "item":
            {"type": "function_call", "id": "fc_1", "call_id": "call_r", "name": "foldgate_recall", "arguments": ""}}));
        events.push(
            json!({"type": "response.function_call_arguments.delta", "output_index": 1,
            "item_id": "fc_1", "delta": "@ARGS@"}),
        );
        events.push(
            json!({"type": "response.output_item.done", "output_index": 1, "item": items[1]}),
        );
    }
    events.push(
        json!({"type": "response.completed", "response": response(json!(items), "completed")}),
    );
    for (n, e) in events.iter_mut().enumerate() {
        e["sequence_number"] = json!(n);
    }
    sse(&events, args, false)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Api {
    Chat,
    Anthropic,
    Responses,
}

const APIS: [Api; 3] = [Api::Chat, Api::Anthropic, Api::Responses];

/// A conversation that folds on its first request: the fact in its first,
/// folded, user message, the question last.
fn conversation() -> Vec<Value> {
    let mut convo = Convo::with_turns(0);
    convo.user(&format!("note that {FACT}")).assistant("noted");
    for i in 0..54 {
        convo
            .user(&format!("question {i}"))
            .assistant(&format!("answer {i}"));
    }
    convo.user("what is the favourite colour of the customer?");
    convo.messages
}

/// Asks the conversation's question on `api`, with the client's `tools`.
async fn ask(fg: &Foldgate, api: Api, stream: bool, tools: Option<Value>) -> Reply {
    let messages = conversation();
    let system = messages[0]["content"].clone();
    let rest = &messages[1..];
    let (path, mut body) = match api {
        Api::Chat => (
            "/v1/chat/completions",
            json!({"model": "tiny-model", "messages": messages}),
        ),
        Api::Anthropic => (
            "/v1/messages",
            json!({"model": "tiny-model", "system": system, "messages": rest}),
        ),
        Api::Responses => (
            "/v1/responses",
            json!({"model": "tiny-model", "instructions": system, "input": rest, "store": false}),
        ),
    };
    body["max_tokens"] = json!(100);
    body["stream"] = json!(stream);
    if let Some(tools) = tools {
        body["tools"] = tools;
    }
    let headers = [
        ("x-conversation-id", "echo"),
        ("authorization", "Bearer sk-tenant-a"),
    ];
    post_json(&format!("{}{path}", fg.url), &headers, &body).await
}

/// The JSON data of every event of a stream (`[DONE]` left out).
fn events(reply: &Reply) -> Vec<Value> {
    String::from_utf8_lossy(&reply.body)
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// The text the client is shown: its stream's text deltas, or the whole
/// answer's text.
fn shown_text(api: Api, stream: bool, reply: &Reply) -> String {
    if stream {
        let pointer = match api {
            Api::Chat => "/choices/0/delta/content",
            Api::Anthropic => "/delta/text",
            Api::Responses => "/delta",
        };
        let texts = events(reply);
        return texts
            .iter()
            .filter(|e| api != Api::Responses || e["type"] == "response.output_text.delta")
            .filter_map(|e| e.pointer(pointer).and_then(Value::as_str))
            .collect();
    }
    let answer = reply.json();
    match api {
        Api::Chat => answer["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        Api::Anthropic => answer["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect(),
        Api::Responses => output_texts(&answer).concat(),
    }
}

/// The texts of a response object's output items.
fn output_texts(response: &Value) -> Vec<String> {
    response["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["content"][0]["text"].as_str().map(str::to_string))
        .collect()
}

/// The recall result foldgate sent the model in its second round.
fn recall_result(api: Api, second: &Value) -> String {
    let last = match api {
        Api::Responses => second["input"].as_array().unwrap().last().unwrap().clone(),
        Api::Chat | Api::Anthropic => second["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone(),
    };
    let text = match api {
        Api::Chat => &last["content"],
        Api::Anthropic => &last["content"][0]["content"],
        Api::Responses => &last["output"],
    };
    text.as_str()
        .unwrap_or_else(|| panic!("no recall result: {last}"))
        .to_string()
}

fn mentions_recall(reply: &Reply) -> bool {
    reply.body.windows(15).any(|w| w == b"foldgate_recall")
}

#[tokio::test]
async fn responses_answers_echo_only_the_clients_tools() {
    let read_file = json!({"type": "function", "name": "read_file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}});
    for stream in [false, true] {
        for tools in [None, Some(json!([read_file]))] {
            let model = Model::start(Args::query("favourite colour")).await;
            let fg = Foldgate::start(&model.config()).await;
            let reply = ask(&fg, Api::Responses, stream, tools.clone()).await;
            reply.assert_ok();
            let seen = model.seen();
            assert_eq!(seen.len(), 2, "one recall round");
            assert!(seen[0]["tools"].to_string().contains("foldgate_recall"));
            assert!(!mentions_recall(&reply), "stream {stream}, tools {tools:?}");
            let responses: Vec<Value> = if stream {
                events(&reply)
                    .into_iter()
                    .filter_map(|e| e.get("response").cloned())
                    .collect()
            } else {
                vec![reply.json()]
            };
            assert_eq!(responses.len(), if stream { 3 } else { 1 });
            for response in &responses {
                assert_eq!(response["tools"], tools.clone().unwrap_or(json!([])));
                assert_eq!(response["tool_choice"], "auto");
            }
            assert_eq!(
                shown_text(Api::Responses, false, &reply_of(&responses)),
                if stream {
                    format!("{LOOKING}\n\n{ANSWER}")
                } else {
                    ANSWER.to_string()
                }
            );
        }
    }
}

/// The last response object as a whole reply, to read its text.
fn reply_of(responses: &[Value]) -> Reply {
    Reply {
        status: http::StatusCode::OK,
        headers: http::HeaderMap::new(),
        body: responses.last().unwrap().to_string().into(),
    }
}

#[tokio::test]
async fn two_rounds_texts_are_set_apart_in_every_apis_stream() {
    for api in APIS {
        for stream in [false, true] {
            let model = Model::start(Args::query("favourite colour")).await;
            let fg = Foldgate::start(&model.config()).await;
            let reply = ask(&fg, api, stream, None).await;
            reply.assert_ok();
            assert_eq!(model.seen().len(), 2, "{api:?}: one recall round");
            assert!(!mentions_recall(&reply), "{api:?}");
            // A whole answer is the last round's alone: nothing to set apart.
            let expected = if stream {
                format!("{LOOKING}\n\n{ANSWER}")
            } else {
                ANSWER.to_string()
            };
            assert_eq!(
                shown_text(api, stream, &reply),
                expected,
                "{api:?} stream {stream}"
            );
        }
    }
    // On Responses the events that repeat a part's whole text agree with
    // its deltas.
    let model = Model::start(Args::query("favourite colour")).await;
    let fg = Foldgate::start(&model.config()).await;
    let events = events(&ask(&fg, Api::Responses, true, None).await);
    let text_of = |kind: &str, pointer: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["type"] == kind)
            .filter_map(|e| {
                e.pointer(pointer)
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .collect()
    };
    let separated = [LOOKING.to_string(), format!("\n\n{ANSWER}")];
    assert_eq!(text_of("response.output_text.done", "/text"), separated);
    assert_eq!(
        text_of("response.content_part.done", "/part/text"),
        separated
    );
    assert_eq!(
        text_of("response.output_item.done", "/item/content/0/text"),
        separated
    );
    let completed = events.last().unwrap();
    assert_eq!(output_texts(&completed["response"]), separated);
}

/// The first line of a recall result: what it says about the query.
fn echoed(result: &str) -> &str {
    result.lines().next().unwrap_or_default()
}

#[tokio::test]
async fn a_huge_recall_query_is_cut_before_it_is_searched_and_echoed() {
    // 1 MB: the result echoes a few hundred characters of it, not all.
    let huge = "favourite colour ".repeat(64 << 10);
    assert!(huge.len() > 1 << 20);
    let model = Model::start(Args::query(&huge)).await;
    let fg = Foldgate::start(&model.config()).await;
    let reply = ask(&fg, Api::Chat, false, None).await;
    reply.assert_ok();
    let seen = model.seen();
    assert_eq!(seen.len(), 2);
    let result = recall_result(Api::Chat, &seen[1]);
    assert!(
        echoed(&result).contains("\"favourite colour favourite"),
        "{result}"
    );
    assert!(
        result.chars().count() < 500,
        "{} chars",
        result.chars().count()
    );

    // 3 KB, small enough to leave room for excerpts: the cut query is
    // the one searched, and it finds the fact.
    let long = "favourite colour ".repeat(200);
    let model = Model::start(Args::query(&long)).await;
    let fg = Foldgate::start(&model.config()).await;
    let reply = ask(&fg, Api::Chat, false, None).await;
    reply.assert_ok();
    assert_eq!(shown_text(Api::Chat, false, &reply), ANSWER);
    let result = recall_result(Api::Chat, &model.seen()[1]);
    assert!(result.contains(FACT), "{result}");
    let quoted = echoed(&result).split('"').nth(1).unwrap_or_default();
    assert!(
        long.starts_with(quoted) && quoted.len() <= 300,
        "{quoted:?}"
    );
}

#[tokio::test]
async fn recall_arguments_foldgate_cannot_use_get_one_line_and_never_reach_the_client() {
    let cases = [
        ("a lone surrogate", Args::lone_surrogate()),
        (
            "not JSON",
            Args {
                literal: "\"not json\"".into(),
                object: "{\"q\": 1}".into(),
            },
        ),
        (
            "not a string",
            Args {
                literal: serde_json::to_string("{\"query\": 5}").unwrap(),
                object: "{\"query\": 5}".into(),
            },
        ),
    ];
    for (case, args) in cases {
        for api in APIS {
            for stream in [false, true] {
                let what = format!("{case}, {api:?}, stream {stream}");
                let model = Model::start(args.clone()).await;
                let fg = Foldgate::start(&model.config()).await;
                let reply = ask(&fg, api, stream, None).await;
                reply.assert_ok();
                assert!(
                    !mentions_recall(&reply),
                    "{what}: {}",
                    String::from_utf8_lossy(&reply.body)
                );
                let seen = model.seen();
                assert_eq!(seen.len(), 2, "{what}: the call is answered by foldgate");
                let result = recall_result(api, &seen[1]);
                assert!(!result.contains('\n'), "{what}: {result}");
                assert!(result.contains("{\"query\""), "{what}: {result}");
                if case == "a lone surrogate" {
                    assert!(result.contains("surrogate"), "{what}: {result}");
                }
                let expected = if stream {
                    format!("{LOOKING}\n\n{BLIND}")
                } else {
                    BLIND.to_string()
                };
                assert_eq!(shown_text(api, stream, &reply), expected, "{what}");
            }
        }
    }
}
