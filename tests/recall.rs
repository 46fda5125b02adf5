//! The recall tool: a folded conversation is offered `foldgate_recall`,
//! foldgate answers the model's recall calls from the archive and asks
//! again, and the client gets only the final answer. Against a scripted
//! model that calls the tool when asked about a fact it cannot see, and a
//! lossy summarizer that keeps no fact, through the real server.

use crate::common;

use bytes::Bytes;
use common::convo::Convo;
use common::llm::{LOSSY_SUMMARY, content_text};
use common::mock::{self, Mock, Recorded};
use common::{Foldgate, Reply, metric, post_json};
use foldgate::summarize::prompt::SYSTEM_PROMPT;
use http::{Response, StatusCode};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

const FACT: &str = "the favourite colour of the customer is teal";
const QUESTION: &str = "what is the favourite colour of the customer?";

/// How the scripted model behaves.
#[derive(Clone, Copy, PartialEq)]
enum Model {
    /// Calls the recall tool when asked about the colour and the answer is
    /// not in its messages; answers from what it sees.
    Recalling,
    /// Calls the recall tool whenever it has it.
    Stubborn,
    /// Calls the recall tool and the client's `read_file` in one answer.
    Mixed,
}

struct Upstream {
    mock: Mock,
    chats: Arc<Mutex<Vec<Value>>>,
}

impl Upstream {
    async fn start(model: Model) -> Self {
        let chats = Arc::new(Mutex::new(Vec::new()));
        let seen = chats.clone();
        let mock = Mock::start(move |r: Recorded| {
            let seen = seen.clone();
            async move {
                let body = r.json();
                if r.uri.ends_with("/messages") {
                    return anthropic(model, &seen, &body);
                }
                if r.uri.ends_with("/responses") {
                    return responses(model, &seen, &body);
                }
                answer(model, &seen, &body)
            }
        })
        .await;
        Self { mock, chats }
    }

    fn chats(&self) -> Vec<Value> {
        self.chats.lock().unwrap().clone()
    }

    /// The config, `extra` appended; the recall tool alone (`recall =
    /// "tool"`) unless `extra` has an `[archive]` table of its own.
    fn config(&self, extra: &str) -> String {
        let tool = if extra.contains("[archive]") {
            ""
        } else {
            "[archive]\nrecall = \"tool\"\n"
        };
        format!(
            "{}\
             [models.\"tiny-*\"]\ncontext_window = 4000\n\
             [policy]\nreset_ratio = 0.45\nmode = \"inline\"\n\
             [summarizer]\nprovider = \"mock\"\nmax_summary_tokens = 400\nretries = 0\ntimeout = \"5s\"\n{tool}{extra}",
            crate::common::providers(&self.mock.url)
        )
    }
}

fn has_recall_tool(body: &Value) -> bool {
    tool_names(body).iter().any(|n| n == "foldgate_recall")
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect()
}

/// The prompt tokens the mock reports: the request's size over four, so
/// every round reports a different count.
fn prompt_tokens(body: &Value) -> u64 {
    body.to_string().len() as u64 / 4
}

/// What the scripted model does with a request whose conversation is in
/// `field`: whether it calls the recall tool (it can only when offered),
/// and the text it writes.
fn decide(model: Model, body: &Value, field: &str) -> (bool, &'static str) {
    let items = body[field].as_array().cloned().unwrap_or_default();
    let asked = items
        .last()
        .is_some_and(|m| m.to_string().contains("favourite colour"));
    let sees_fact = body[field].to_string().contains("teal");
    let offered = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["name"] == "foldgate_recall" || t["function"]["name"] == "foldgate_recall");
    let recall = offered
        && match model {
            Model::Recalling | Model::Mixed => asked && !sees_fact,
            Model::Stubborn => true,
        };
    let text = if recall {
        "Let me look that up."
    } else if sees_fact {
        "The favourite colour is teal."
    } else {
        "I cannot see that."
    };
    (recall, text)
}

fn answer(model: Model, seen: &Mutex<Vec<Value>>, body: &Value) -> Response<foldgate::body::Body> {
    if body.pointer("/messages/0/content").and_then(Value::as_str) == Some(SYSTEM_PROMPT) {
        return mock::json(
            StatusCode::OK,
            &json!({"choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": LOSSY_SUMMARY}}]}),
        );
    }
    seen.lock().unwrap().push(body.clone());
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let (recall, text) = decide(model, body, "messages");
    let usage = json!({"prompt_tokens": prompt_tokens(body), "completion_tokens": 7,
                       "total_tokens": prompt_tokens(body) + 7});
    let mut calls = Vec::new();
    if recall {
        calls.push(json!({"id": format!("call_r{}", messages.len()), "type": "function",
            "function": {"name": "foldgate_recall", "arguments": "{\"query\": \"favourite colour\"}"}}));
    }
    if recall && model == Model::Mixed {
        calls.push(json!({"id": "call_client", "type": "function",
            "function": {"name": "read_file", "arguments": "{\"path\": \"notes.md\"}"}}));
    }
    let text = text.to_string();
    if body["stream"] == json!(true) {
        return stream(text, calls, usage);
    }
    let mut message = json!({"role": "assistant", "content": text});
    let finish = if calls.is_empty() {
        "stop"
    } else {
        message["tool_calls"] = Value::Array(calls);
        "tool_calls"
    };
    mock::json(
        StatusCode::OK,
        &json!({"id": "chatcmpl-r", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}),
    )
}

/// The same answer as OpenAI streams it: text in pieces, each tool call
/// as a first delta (id, name) and argument pieces, then the finish, the
/// usage chunk and `[DONE]`.
fn stream(text: String, calls: Vec<Value>, usage: Value) -> Response<foldgate::body::Body> {
    let (tx, resp) = mock::stream("text/event-stream");
    tokio::spawn(async move {
        let chunk = |delta: Value, finish: Value| {
            let c = json!({"id": "chatcmpl-s", "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
            Bytes::from(format!("data: {c}\n\n"))
        };
        let mut events = vec![chunk(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        )];
        for word in text.split_inclusive(' ') {
            events.push(chunk(json!({"content": word}), Value::Null));
        }
        for (i, call) in calls.iter().enumerate() {
            events.push(chunk(
                json!({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": ""}}]}),
                Value::Null,
            ));
            let args = call["function"]["arguments"].as_str().unwrap();
            let (a, b) = args.split_at(args.len() / 2);
            for piece in [a, b] {
                events.push(chunk(
                    json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                    Value::Null,
                ));
            }
        }
        let finish = if calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        events.push(chunk(json!({}), json!(finish)));
        let usage = json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "choices": [], "usage": usage});
        events.push(Bytes::from(format!("data: {usage}\n\n")));
        events.push(Bytes::from_static(b"data: [DONE]\n\n"));
        for e in events {
            if tx.send(e).await.is_err() {
                return;
            }
        }
    });
    resp
}

/// A conversation that folds on its first request, with the fact in its
/// first, folded, user message and the question last.
fn conversation() -> Convo {
    Convo::fact_then_question(FACT, QUESTION)
}

async fn ask(fg: &Foldgate, body: &Value) -> Reply {
    ask_on(fg, "/v1/chat/completions", body).await
}

/// Sends `body` to foldgate's `path` in the test's conversation.
async fn ask_on(fg: &Foldgate, path: &str, body: &Value) -> Reply {
    post_json(
        &format!("{}{path}", fg.url),
        &[
            ("x-conversation-id", "recall"),
            ("authorization", "Bearer sk-tenant-a"),
        ],
        body,
    )
    .await
}

/// The JSON data of every event of a stream (`[DONE]` left out), for
/// each API's events.
fn chunks(body: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(body)
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn streamed_text(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| {
            c.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect()
}

/// The usage every round reported, summed.
fn summed_usage(chats: &[Value]) -> (u64, u64) {
    let prompt = chats.iter().map(prompt_tokens).sum();
    (prompt, 7 * chats.len() as u64)
}

#[tokio::test]
async fn the_model_recalls_a_folded_fact_and_the_client_sees_only_the_answer() {
    let upstream = Upstream::start(Model::Recalling).await;
    let fg = Foldgate::start(&upstream.config("")).await;
    let reply = ask(&fg, &conversation().body()).await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    let answer = reply.json();
    let message = &answer["choices"][0]["message"];
    assert_eq!(message["content"], "The favourite colour is teal.");
    assert!(message.get("tool_calls").is_none());
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert!(!reply.body.windows(15).any(|w| w == b"foldgate_recall"));

    let chats = upstream.chats();
    assert_eq!(chats.len(), 2, "one recall round");
    let first = &chats[0];
    assert!(has_recall_tool(first));
    let view = first["messages"].as_array().unwrap();
    assert!(
        !view.iter().any(|m| content_text(m).contains("teal")),
        "the fact is folded"
    );
    let summary = view
        .iter()
        .find(|m| content_text(m).contains("[foldgate] Summary"))
        .unwrap();
    assert!(content_text(summary).contains("call the foldgate_recall tool"));

    let second = chats[1]["messages"].as_array().unwrap();
    assert_eq!(second.len(), view.len() + 2);
    let call = &second[view.len()];
    assert_eq!(call["role"], "assistant");
    assert_eq!(call["tool_calls"][0]["function"]["name"], "foldgate_recall");
    let result = &second[view.len() + 1];
    assert_eq!(result["role"], "tool");
    assert_eq!(result["tool_call_id"], call["tool_calls"][0]["id"]);
    assert!(content_text(result).contains(FACT), "{result}");

    let (prompt, completion) = summed_usage(&chats);
    assert_eq!(answer["usage"]["prompt_tokens"], prompt);
    assert_eq!(answer["usage"]["completion_tokens"], completion);
    let metrics = fg.metrics().await;
    assert_eq!(metric(&metrics, "foldgate_recall_calls_total"), 1.0);
    assert_eq!(metric(&metrics, "foldgate_recall_offers_total"), 1.0);
}

#[tokio::test]
async fn a_streamed_answer_passes_until_the_recall_call_and_continues_after_it() {
    let upstream = Upstream::start(Model::Recalling).await;
    let fg = Foldgate::start(&upstream.config("")).await;
    let mut body = conversation().body_for("tiny-model", true);
    body["stream_options"] = json!({"include_usage": true});
    let reply = ask(&fg, &body).await;
    reply.assert_ok();
    assert!(
        reply
            .header("content-type")
            .starts_with("text/event-stream")
    );
    assert!(!reply.body.windows(15).any(|w| w == b"foldgate_recall"));
    let chunks = chunks(&reply.body);
    assert_eq!(
        streamed_text(&chunks),
        "Let me look that up.\n\nThe favourite colour is teal.",
        "the text before the recall call went out as it came; the answer after it"
    );
    assert!(
        chunks
            .iter()
            .all(|c| c.pointer("/choices/0/delta/tool_calls").is_none())
    );
    let finishes: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| {
            c.pointer("/choices/0/finish_reason")
                .filter(|f| !f.is_null())
        })
        .collect();
    assert_eq!(finishes, [&json!("stop")]);
    assert!(reply.body.ends_with(b"data: [DONE]\n\n"));

    let chats = upstream.chats();
    assert_eq!(chats.len(), 2);
    let second = chats[1]["messages"].as_array().unwrap();
    let call = &second[second.len() - 2];
    assert_eq!(call["content"], "Let me look that up.");
    assert_eq!(
        call["tool_calls"][0]["function"]["arguments"], "{\"query\":\"favourite colour\"}",
        "the call goes back with its bounded query"
    );
    assert!(content_text(&second[second.len() - 1]).contains(FACT));
    let usage: Vec<&Value> = chunks.iter().filter_map(|c| c.get("usage")).collect();
    assert_eq!(usage.len(), 1, "one usage chunk, the last round's, summed");
    let (prompt, completion) = summed_usage(&chats);
    assert_eq!(usage[0]["prompt_tokens"], prompt);
    assert_eq!(usage[0]["completion_tokens"], completion);
}

#[tokio::test]
async fn a_model_that_keeps_recalling_stops_after_recall_rounds() {
    for stream in [false, true] {
        let upstream = Upstream::start(Model::Stubborn).await;
        let fg =
            Foldgate::start(&upstream.config("[archive]\nrecall = \"tool\"\nrecall_rounds = 2\n"))
                .await;
        let reply = ask(&fg, &conversation().body_for("tiny-model", stream)).await;
        reply.assert_ok();
        let chats = upstream.chats();
        assert_eq!(
            chats.len(),
            3,
            "two recall rounds, then once without the tool"
        );
        assert!(has_recall_tool(&chats[0]) && has_recall_tool(&chats[1]));
        assert!(
            chats[2].get("tools").is_none(),
            "the last request goes without the tool"
        );
        let text = if stream {
            streamed_text(&chunks(&reply.body))
        } else {
            reply.json()["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert!(text.ends_with("The favourite colour is teal."), "{text}");
        assert_eq!(
            metric(&fg.metrics().await, "foldgate_recall_calls_total"),
            2.0
        );
    }
}

#[tokio::test]
async fn recall_and_client_calls_in_one_answer_give_the_client_its_own_calls() {
    for stream in [false, true] {
        let upstream = Upstream::start(Model::Mixed).await;
        let fg = Foldgate::start(&upstream.config("")).await;
        let mut body = conversation().body_for("tiny-model", stream);
        body["tools"] = json!([{"type": "function", "function": {"name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]);
        let reply = ask(&fg, &body).await;
        reply.assert_ok();
        assert_eq!(
            upstream.chats().len(),
            1,
            "no recall round: the client's call goes out"
        );
        assert_eq!(
            tool_names(&upstream.chats()[0]),
            ["read_file", "foldgate_recall"]
        );
        assert!(!reply.body.windows(15).any(|w| w == b"foldgate_recall"));
        let calls: Vec<Value> = if stream {
            chunks(&reply.body)
                .iter()
                .filter_map(|c| c.pointer("/choices/0/delta/tool_calls"))
                .flat_map(|c| c.as_array().cloned().unwrap())
                .collect()
        } else {
            let answer = reply.json();
            assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");
            answer["choices"][0]["message"]["tool_calls"]
                .as_array()
                .cloned()
                .unwrap()
        };
        assert!(!calls.is_empty());
        for call in &calls {
            if stream {
                assert_eq!(call["index"], 0, "renumbered after the removed recall call");
            }
        }
        assert_eq!(calls[0]["id"], "call_client");
        assert_eq!(calls[0]["function"]["name"], "read_file");
        assert_eq!(
            metric(&fg.metrics().await, "foldgate_recall_calls_total"),
            0.0
        );
    }
}

#[tokio::test]
async fn no_recall_tool_where_the_model_is_not_free_to_use_it() {
    let upstream = Upstream::start(Model::Recalling).await;
    let fg = Foldgate::start(&upstream.config("")).await;
    let forced = json!({"type": "function", "function": {"name": "read_file"}});
    for (field, value) in [
        ("tool_choice", json!("required")),
        ("tool_choice", forced),
        ("n", json!(2)),
    ] {
        let mut body = conversation().body();
        body["tools"] = json!([{"type": "function", "function": {"name": "read_file"}}]);
        body[field] = value;
        ask(&fg, &body).await.assert_ok();
        let sent = upstream.chats().pop().unwrap();
        assert_eq!(tool_names(&sent), ["read_file"], "{field}");
    }
    // A conversation with nothing folded gets no tool either.
    let mut short = Convo::with_turns(2);
    short.user(QUESTION);
    ask(&fg, &short.body()).await.assert_ok();
    assert!(upstream.chats().pop().unwrap().get("tools").is_none());
}

#[tokio::test]
async fn recall_off_leaves_the_request_and_the_summary_without_it() {
    let upstream = Upstream::start(Model::Recalling).await;
    let fg = Foldgate::start(&upstream.config("[archive]\nrecall = \"off\"\n")).await;
    let reply = ask(&fg, &conversation().body()).await;
    assert_eq!(
        reply.json()["choices"][0]["message"]["content"],
        "I cannot see that."
    );
    let sent = upstream.chats().pop().unwrap();
    assert!(sent.get("tools").is_none());
    assert!(!sent.to_string().contains("foldgate_recall"));
}

#[tokio::test]
async fn a_failing_recall_round_falls_back_to_the_first_request_without_the_tool() {
    // The upstream fails every request that carries a recall result.
    let chats = Arc::new(Mutex::new(Vec::new()));
    let seen = chats.clone();
    let mock = Mock::start(move |r: Recorded| {
        let seen = seen.clone();
        async move {
            let body = r.json();
            let has_result = body["messages"]
                .as_array()
                .is_some_and(|ms| ms.iter().any(|m| m["role"] == "tool"));
            if has_result {
                seen.lock().unwrap().push(body);
                return mock::json(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &json!({"error": {"message": "boom"}}),
                );
            }
            answer(Model::Recalling, &seen, &body)
        }
    })
    .await;
    let upstream = Upstream { mock, chats };
    let fg = Foldgate::start(&upstream.config("")).await;
    let reply = ask(&fg, &conversation().body()).await;
    reply.assert_ok();
    assert_eq!(
        reply.json()["choices"][0]["message"]["content"],
        "I cannot see that."
    );
    let chats = upstream.chats();
    assert_eq!(
        chats.len(),
        3,
        "first round, the failed recall round, the fallback"
    );
    assert!(chats[2].get("tools").is_none());
    assert_eq!(chats[2]["messages"], chats[0]["messages"]);
}

/// The same model on Anthropic's Messages API: it checks the API's
/// pairing rules on every request, then answers in blocks.
fn anthropic(
    model: Model,
    seen: &Mutex<Vec<Value>>,
    body: &Value,
) -> Response<foldgate::body::Body> {
    seen.lock().unwrap().push(body.clone());
    if let Some(violation) = common::agents::anthropic_violation(body) {
        return mock::json(
            StatusCode::BAD_REQUEST,
            &json!({"type": "error", "error": {"type": "invalid_request_error", "message": violation}}),
        );
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let (recall, text) = decide(model, body, "messages");
    let mut blocks = Vec::new();
    blocks.push(json!({"type": "text", "text": text}));
    if recall {
        blocks.push(
            json!({"type": "tool_use", "id": format!("toolu_{}", messages.len()),
            "name": "foldgate_recall", "input": {"query": "favourite colour"}}),
        );
    }
    if recall && model == Model::Mixed {
        blocks.push(json!({"type": "tool_use", "id": "toolu_client", "name": "read_file", "input": {"path": "notes.md"}}));
    }
    let stop = if recall { "tool_use" } else { "end_turn" };
    let usage = json!({"input_tokens": prompt_tokens(body), "output_tokens": 7});
    if body["stream"] != json!(true) {
        return mock::json(
            StatusCode::OK,
            &json!({"id": "msg_r", "type": "message", "role": "assistant", "model": body["model"],
                "content": blocks, "stop_reason": stop, "usage": usage}),
        );
    }
    let (tx, resp) = mock::stream("text/event-stream");
    tokio::spawn(async move {
        let ev = |v: Value| {
            Bytes::from(format!(
                "event: {}\ndata: {v}\n\n",
                v["type"].as_str().unwrap()
            ))
        };
        let mut events = vec![ev(
            json!({"type": "message_start", "message": {"id": "msg_s", "type": "message",
            "role": "assistant", "content": [], "model": "m", "stop_reason": null,
            "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1}}}),
        )];
        for (i, block) in blocks.iter().enumerate() {
            if block["type"] == "text" {
                events.push(ev(json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})));
                for word in block["text"].as_str().unwrap().split_inclusive(' ') {
                    events.push(ev(json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": word}})));
                }
            } else {
                events.push(ev(
                    json!({"type": "content_block_start", "index": i, "content_block":
                    {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}),
                ));
                let input = block["input"].to_string();
                let (a, b) = input.split_at(input.len() / 2);
                for piece in [a, b] {
                    events.push(ev(json!({"type": "content_block_delta", "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": piece}})));
                }
            }
            events.push(ev(json!({"type": "content_block_stop", "index": i})));
        }
        events.push(ev(
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": 7}}),
        ));
        events.push(ev(json!({"type": "message_stop"})));
        for e in events {
            if tx.send(e).await.is_err() {
                return;
            }
        }
    });
    resp
}

/// The conversation as an Anthropic Messages body.
fn anthropic_body(stream: bool) -> Value {
    let convo = conversation();
    let system = convo.messages[0]["content"].clone();
    let messages: Vec<Value> = convo.messages[1..]
        .iter()
        .map(|m| json!({"role": m["role"], "content": [{"type": "text", "text": m["content"]}]}))
        .collect();
    json!({"model": "tiny-model", "max_tokens": 100, "system": system, "messages": messages, "stream": stream})
}

#[tokio::test]
async fn anthropic_messages_recall_whole_and_streamed() {
    for stream in [false, true] {
        let upstream = Upstream::start(Model::Recalling).await;
        let fg = Foldgate::start(&upstream.config("")).await;
        let reply = ask_on(&fg, "/v1/messages", &anthropic_body(stream)).await;
        reply.assert_ok();
        assert_eq!(reply.header("x-foldgate-fold"), "new");
        assert!(!reply.body.windows(15).any(|w| w == b"foldgate_recall"));
        let chats = upstream.chats();
        assert_eq!(chats.len(), 2, "one recall round");
        assert!(
            chats[0]["system"]
                .to_string()
                .contains("call the foldgate_recall tool")
        );
        let last = chats[1]["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(last["content"][0]["type"], "tool_result");
        assert!(last.to_string().contains("teal"));
        let (input, output) = summed_usage(&chats);
        if stream {
            let events = chunks(&reply.body);
            let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
            assert_eq!(kinds.iter().filter(|k| **k == "message_start").count(), 1);
            assert_eq!(kinds.iter().filter(|k| **k == "message_stop").count(), 1);
            assert_eq!(kinds.first(), Some(&"message_start"));
            assert_eq!(kinds.last(), Some(&"message_stop"));
            let starts: Vec<u64> = events
                .iter()
                .filter(|e| e["type"] == "content_block_start")
                .map(|e| e["index"].as_u64().unwrap())
                .collect();
            assert_eq!(
                starts,
                [0, 1],
                "the second round's block follows the first's"
            );
            let text: String = events
                .iter()
                .filter_map(|e| e["delta"]["text"].as_str())
                .collect();
            assert_eq!(
                text,
                "Let me look that up.\n\nThe favourite colour is teal."
            );
            let delta = events
                .iter()
                .find(|e| e["type"] == "message_delta")
                .unwrap();
            assert_eq!(delta["delta"]["stop_reason"], "end_turn");
            assert_eq!(delta["usage"]["input_tokens"], input);
            assert_eq!(delta["usage"]["output_tokens"], output);
        } else {
            let answer = reply.json();
            assert_eq!(
                answer["content"],
                json!([{"type": "text", "text": "The favourite colour is teal."}])
            );
            assert_eq!(answer["stop_reason"], "end_turn");
            assert_eq!(answer["usage"]["input_tokens"], input);
            assert_eq!(answer["usage"]["output_tokens"], output);
        }
    }
}

#[tokio::test]
async fn anthropic_recall_stops_after_its_rounds_and_keeps_client_tool_use() {
    for stream in [false, true] {
        let upstream = Upstream::start(Model::Stubborn).await;
        let fg =
            Foldgate::start(&upstream.config("[archive]\nrecall = \"tool\"\nrecall_rounds = 1\n"))
                .await;
        let reply = ask_on(&fg, "/v1/messages", &anthropic_body(stream)).await;
        reply.assert_ok();
        let chats = upstream.chats();
        assert_eq!(
            chats.len(),
            3,
            "one recall round, a last answer that still calls the tool, then the fallback"
        );
        assert!(chats[2].get("tools").is_none(), "the fallback has no tool");
        assert!(
            !reply.body.windows(15).any(|w| w == b"foldgate_recall"),
            "the stray call never reaches the client"
        );
        let stop = if stream {
            let events = chunks(&reply.body);
            events
                .iter()
                .find(|e| e["type"] == "message_delta")
                .unwrap()["delta"]["stop_reason"]
                .clone()
        } else {
            reply.json()["stop_reason"].clone()
        };
        assert_eq!(stop, "end_turn");

        let upstream = Upstream::start(Model::Mixed).await;
        let fg = Foldgate::start(&upstream.config("")).await;
        let mut body = anthropic_body(stream);
        body["tools"] = json!([{"name": "read_file", "input_schema": {"type": "object"}}]);
        let reply = ask_on(&fg, "/v1/messages", &body).await;
        reply.assert_ok();
        assert_eq!(upstream.chats().len(), 1);
        assert!(!reply.body.windows(15).any(|w| w == b"foldgate_recall"));
        let text = String::from_utf8_lossy(&reply.body).to_string();
        assert!(text.contains("toolu_client"), "{text}");
        if stream {
            let events = chunks(&reply.body);
            let starts: Vec<u64> = events
                .iter()
                .filter(|e| e["type"] == "content_block_start")
                .map(|e| e["index"].as_u64().unwrap())
                .collect();
            assert_eq!(
                starts,
                [0, 1],
                "the client's tool_use renumbered after the removed one"
            );
        } else {
            assert_eq!(reply.json()["stop_reason"], "tool_use");
        }
    }
}

/// The official `openai` (chat completions, Responses) and `anthropic`
/// packages, whole and streamed through their own accumulators: each gets the recalled answer, no
/// recall call, and usage summed over the two rounds it took.
#[tokio::test]
async fn official_clients_get_the_recalled_answer() {
    let upstream = Upstream::start(Model::Recalling).await;
    let fg = Foldgate::start(&upstream.config("")).await;
    let log = common::drive("recall_clients.py", &fg.url).await;
    let chats = upstream.chats();
    assert_eq!(log.len(), 6);
    assert_eq!(chats.len(), 12, "two rounds per client request");
    for (i, entry) in log.iter().enumerate() {
        let client = entry["client"].as_str().unwrap();
        // A stream shows the text written before the recall call.
        let text = if client.ends_with("stream") {
            "Let me look that up.\n\nThe favourite colour is teal."
        } else {
            "The favourite colour is teal."
        };
        assert_eq!(entry["text"], text, "{client}");
        assert_eq!(entry["tool_calls"], Value::Null, "{client}");
        let finish = match client.split('-').next() {
            Some("openai") => "stop",
            Some("responses") => "completed",
            _ => "end_turn",
        };
        assert_eq!(entry["finish"], finish, "{client}");
        let (input, output) = summed_usage(&chats[2 * i..2 * i + 2]);
        assert_eq!(entry["input"], input, "{client}");
        assert_eq!(entry["output"], output, "{client}");
    }
}

/// The same model on the Responses API: it checks the API's pairing rules
/// on every request, then answers in output items.
fn responses(
    model: Model,
    seen: &Mutex<Vec<Value>>,
    body: &Value,
) -> Response<foldgate::body::Body> {
    seen.lock().unwrap().push(body.clone());
    let input = body["input"].as_array().cloned().unwrap_or_default();
    let outputs: Vec<&Value> = input
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .collect();
    for output in &outputs {
        let called = input
            .iter()
            .any(|i| i["type"] == "function_call" && i["call_id"] == output["call_id"]);
        assert!(called, "an output without its call: {output}");
    }
    let (recall, text) = decide(model, body, "input");
    let n = input.len();
    let mut items = vec![
        json!({"type": "message", "id": format!("msg_{n}"), "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]}),
    ];
    if recall {
        items.push(json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"),
            "name": "foldgate_recall", "arguments": "{\"query\": \"favourite colour\"}", "status": "completed"}));
    }
    if recall && model == Model::Mixed {
        items.push(
            json!({"type": "function_call", "id": "fc_client", "call_id": "call_client",
            "name": "read_file", "arguments": "{\"path\": \"notes.md\"}", "status": "completed"}),
        );
    }
    let usage = json!({"input_tokens": prompt_tokens(body), "output_tokens": 7, "total_tokens": prompt_tokens(body) + 7});
    let response = |output: Value, status: &str| {
        json!({"id": format!("resp_{n}"), "object": "response", "created_at": 1, "status": status,
            "model": body["model"], "output": output, "usage": usage, "tools": [], "tool_choice": "auto",
            "parallel_tool_calls": true})
    };
    if body["stream"] != json!(true) {
        return mock::json(StatusCode::OK, &response(json!(items), "completed"));
    }
    let created = response(json!([]), "in_progress");
    let completed = response(json!(items), "completed");
    let (tx, resp) = mock::stream("text/event-stream");
    tokio::spawn(async move {
        let mut events = vec![
            json!({"type": "response.created", "response": created}),
            json!({"type": "response.in_progress", "response": created}),
        ];
        for (i, item) in items.iter().enumerate() {
            if item["type"] == "message" {
                let mut open = item.clone();
                open["content"] = json!([]);
                open["status"] = json!("in_progress");
                events.push(
                    json!({"type": "response.output_item.added", "output_index": i, "item": open}),
                );
                events.push(json!({"type": "response.content_part.added", "output_index": i, "item_id": item["id"],
                    "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}));
                for word in text.split_inclusive(' ') {
                    events.push(json!({"type": "response.output_text.delta", "output_index": i, "item_id": item["id"],
                        "content_index": 0, "delta": word}));
                }
                events.push(json!({"type": "response.output_text.done", "output_index": i, "item_id": item["id"],
                    "content_index": 0, "text": text}));
                events.push(json!({"type": "response.content_part.done", "output_index": i, "item_id": item["id"],
                    "content_index": 0, "part": item["content"][0]}));
            } else {
                let mut open = item.clone();
                open["arguments"] = json!("");
                open["status"] = json!("in_progress");
                events.push(
                    json!({"type": "response.output_item.added", "output_index": i, "item": open}),
                );
                let args = item["arguments"].as_str().unwrap();
                let (a, b) = args.split_at(args.len() / 2);
                for piece in [a, b] {
                    events.push(
                        json!({"type": "response.function_call_arguments.delta", "output_index": i,
                        "item_id": item["id"], "delta": piece}),
                    );
                }
                events.push(
                    json!({"type": "response.function_call_arguments.done", "output_index": i,
                    "item_id": item["id"], "arguments": args}),
                );
            }
            events.push(
                json!({"type": "response.output_item.done", "output_index": i, "item": item}),
            );
        }
        events.push(json!({"type": "response.completed", "response": completed}));
        for (seq, mut e) in events.into_iter().enumerate() {
            e["sequence_number"] = json!(seq);
            let event = Bytes::from(format!(
                "event: {}\ndata: {e}\n\n",
                e["type"].as_str().unwrap()
            ));
            if tx.send(event).await.is_err() {
                return;
            }
        }
    });
    resp
}

/// The conversation as a Responses body.
fn responses_body(stream: bool) -> Value {
    let convo = conversation();
    let input: Vec<Value> = convo.messages[1..]
        .iter()
        .map(|m| json!({"role": m["role"], "content": m["content"]}))
        .collect();
    json!({"model": "tiny-model", "instructions": convo.messages[0]["content"], "input": input,
           "stream": stream, "store": false})
}

#[tokio::test]
async fn responses_recall_whole_and_streamed() {
    for stream in [false, true] {
        let upstream = Upstream::start(Model::Recalling).await;
        let fg = Foldgate::start(&upstream.config("")).await;
        let reply = ask_on(&fg, "/v1/responses", &responses_body(stream)).await;
        reply.assert_ok();
        assert_eq!(reply.header("x-foldgate-fold"), "new");
        assert!(!reply.body.windows(15).any(|w| w == b"foldgate_recall"));
        let chats = upstream.chats();
        assert_eq!(chats.len(), 2, "one recall round");
        assert!(
            chats[0]["input"]
                .to_string()
                .contains("call the foldgate_recall tool")
        );
        let last = chats[1]["input"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(last["type"], "function_call_output");
        assert!(last["output"].as_str().unwrap().contains("teal"));
        let (input, output) = summed_usage(&chats);
        let response = if stream {
            let events = chunks(&reply.body);
            let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
            assert_eq!(
                kinds.iter().filter(|k| **k == "response.created").count(),
                1
            );
            assert_eq!(
                kinds.iter().filter(|k| **k == "response.completed").count(),
                1
            );
            assert_eq!(kinds.last(), Some(&"response.completed"));
            let sequence: Vec<u64> = events
                .iter()
                .map(|e| e["sequence_number"].as_u64().unwrap())
                .collect();
            assert_eq!(sequence, (0..events.len() as u64).collect::<Vec<_>>());
            let added: Vec<u64> = events
                .iter()
                .filter(|e| e["type"] == "response.output_item.added")
                .map(|e| e["output_index"].as_u64().unwrap())
                .collect();
            assert_eq!(added, [0, 1], "the second round's item follows the first's");
            events.last().unwrap()["response"].clone()
        } else {
            reply.json()
        };
        let texts: Vec<&str> = response["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["content"][0]["text"].as_str().unwrap())
            .collect();
        let expected: &[&str] = if stream {
            &["Let me look that up.", "\n\nThe favourite colour is teal."]
        } else {
            &["The favourite colour is teal."]
        };
        assert_eq!(texts, expected);
        assert_eq!(response["usage"]["input_tokens"], input);
        assert_eq!(response["usage"]["output_tokens"], output);
    }
}
