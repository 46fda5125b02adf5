//! The scripted model of `tests/recall_echo.rs`: it calls the recall tool
//! once when it has it and no result yet (writing `LOOKING` first), then
//! answers from what it sees, on chat completions, Anthropic Messages and
//! the Responses API, whole or streamed. Its answers are written as raw
//! JSON, so the arguments of its call can be anything a model may send.
//! A test may script what it does instead on a given request ([`Act`]).

use super::common::llm::LOSSY_SUMMARY;
use super::common::mock::{Mock, Recorded};
use super::script::{ANSWER, BLIND, LOOKING};
use foldgate::summarize::prompt::SYSTEM_PROMPT;
use http::Response;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// The recall call's arguments as the model writes them, raw: `literal`
/// is the JSON string literal of `arguments` (chat, Responses, Anthropic's
/// streamed `partial_json`), `object` Anthropic's whole `input`. Raw, so
/// a lone surrogate escape reaches foldgate as the model sent it.
#[derive(Clone)]
pub struct Args {
    pub literal: String,
    pub object: String,
}

impl Args {
    pub fn query(query: &str) -> Self {
        let object = json!({ "query": query }).to_string();
        Self {
            literal: serde_json::to_string(&object).unwrap(),
            object,
        }
    }

    /// `{"query": "\ud800 vault"}`, the surrogate escaped in the answer's
    /// own JSON (as issue 25 sent it).
    pub fn lone_surrogate() -> Self {
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

/// What the model does on one request, instead of its script.
pub enum Act {
    /// Answer as scripted.
    Script,
    /// Call the recall tool, whether it was offered or not.
    Recall,
    /// Answer as scripted, but cut the connection right before the
    /// answer's first `marker` (halfway when it has none).
    Cut(&'static str),
    /// Send this response.
    Respond(Response<foldgate::body::Body>),
}

/// Picks the model's act for its `n`th request (from 0, summarizer calls
/// not counted), given the request's JSON.
pub type Acts = Arc<dyn Fn(usize, &Value) -> Act + Send + Sync>;

/// The scripted model: calls the recall tool once when it has it and no
/// result yet (writing `LOOKING` first), then answers from what it sees.
pub struct Model {
    mock: Mock,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl Model {
    pub async fn start(args: Args) -> Self {
        Self::acting(args, Arc::new(|_, _| Act::Script)).await
    }

    /// A model that does what `acts` picks on each request.
    pub async fn acting(args: Args, acts: Acts) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let mock = Mock::start(move |r: Recorded| {
            let (args, log, acts) = (args.clone(), log.clone(), acts.clone());
            async move { answer(&r, &args, &log, &acts).await }
        })
        .await;
        Self { mock, seen }
    }

    /// The raw bodies of the requests the model answered.
    pub fn raw(&self) -> Vec<bytes::Bytes> {
        self.mock
            .received()
            .into_iter()
            .map(|r| r.body)
            .filter(|b| !is_summarizer(&serde_json::from_slice(b).unwrap()))
            .collect()
    }

    /// The requests the model answered (summarizer calls left out).
    pub fn seen(&self) -> Vec<Value> {
        self.seen.lock().unwrap().clone()
    }

    pub fn config(&self) -> String {
        format!(
            "{}\
             [models.\"tiny-*\"]\ncontext_window = 4000\n\
             [policy]\nreset_ratio = 0.45\nmode = \"inline\"\n\
             [summarizer]\nprovider = \"mock\"\nmax_summary_tokens = 400\nretries = 0\ntimeout = \"5s\"\n\
             [archive]\nrecall = \"tool\"\n",
            crate::common::providers(&self.mock.url)
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

fn is_summarizer(body: &Value) -> bool {
    body.pointer("/messages/0/content").and_then(Value::as_str) == Some(SYSTEM_PROMPT)
}

async fn answer(
    r: &Recorded,
    args: &Args,
    log: &Mutex<Vec<Value>>,
    acts: &Acts,
) -> Response<foldgate::body::Body> {
    let body = r.json();
    if is_summarizer(&body) {
        let summary = json!({"choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": LOSSY_SUMMARY}}]});
        return raw("application/json", summary.to_string());
    }
    let n = {
        let mut log = log.lock().unwrap();
        log.push(body.clone());
        log.len() - 1
    };
    let text = body.to_string();
    let offered = text.contains("\"name\":\"foldgate_recall\"");
    let answered = ["\"role\":\"tool\"", "tool_result", "function_call_output"]
        .iter()
        .any(|k| text.contains(k));
    let (recall, cut) = match acts(n, &body) {
        Act::Script => (offered && !answered, None),
        Act::Recall => (true, None),
        Act::Cut(marker) => (offered && !answered, Some(marker)),
        Act::Respond(response) => return response,
    };
    let said = if recall {
        LOOKING
    } else if text.contains("teal") {
        ANSWER
    } else {
        BLIND
    };
    let stream = body["stream"] == json!(true);
    let response = if r.uri.ends_with("/messages") {
        anthropic(said, recall, stream, args)
    } else if r.uri.ends_with("/responses") {
        responses(&body, said, recall, stream, args)
    } else {
        chat(said, recall, stream, args)
    };
    match cut {
        Some(marker) => cut_before(response, marker).await,
        None => response,
    }
}

/// `response` with its body cut right before `marker` (halfway without
/// one): what came before is sent, then the connection breaks.
async fn cut_before(
    response: Response<foldgate::body::Body>,
    marker: &str,
) -> Response<foldgate::body::Body> {
    use http_body_util::BodyExt;
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker.as_bytes())
        .unwrap_or(bytes.len() / 2);
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    let head = bytes.slice(..at);
    tokio::spawn(async move {
        tx.send(Ok(head)).await.unwrap();
        // Let the part reach foldgate before the connection breaks.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let _ = tx.send(Err(std::io::Error::other("cut"))).await;
    });
    let mut parts = parts;
    parts.headers.remove(http::header::CONTENT_LENGTH);
    Response::from_parts(parts, foldgate::body::boxed(Failing(rx)))
}

/// A body whose frames (or its error) come from a channel.
struct Failing(tokio::sync::mpsc::Receiver<Result<bytes::Bytes, std::io::Error>>);

impl http_body::Body for Failing {
    type Data = bytes::Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, std::io::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|o| o.map(|r| r.map(http_body::Frame::data)))
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
