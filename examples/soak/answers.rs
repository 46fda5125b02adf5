//! The soak upstream's answers in each API's shape: chat completions,
//! Anthropic Messages and Responses, whole or as an event stream, either
//! text or a call to `foldgate_recall` (a scripted model that recalls).

use bytes::Bytes;
use foldgate::body::Body;
use http::{Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The text every normal answer carries.
pub const TEXT: &str = "Done: edited src/main.rs on port 8080.";
/// Marks the ids of the recall calls the scripted model makes, so the
/// round after one (whose last item is its result) is told apart.
pub const RECALL_MARK: &str = "recall_soak";

/// Which API a request speaks, from its path.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Chat,
    Anthropic,
    Responses,
}

/// Whether the request offers the recall tool (in any API's shape).
pub fn offers_recall(body: &Value) -> bool {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["name"] == "foldgate_recall" || t["function"]["name"] == "foldgate_recall")
}

/// Whether the request's last item is the result of a scripted recall
/// call: the next round of a recall, answered normally.
pub fn after_recall(api: Api, body: &Value) -> bool {
    let field = if api == Api::Responses {
        "input"
    } else {
        "messages"
    };
    body[field]
        .as_array()
        .and_then(|items| items.last())
        .is_some_and(|last| last.to_string().contains(RECALL_MARK))
}

/// The answer: text, or (`recall`) a call to `foldgate_recall`; an event
/// stream when the request asks for one.
pub fn answer(api: Api, body: &Value, recall: bool, n: u64) -> Response<Body> {
    let stream = body["stream"] == json!(true);
    let tokens = body.to_string().len() as u64 / 4;
    let query = "{\"query\": \"SOAK port\"}";
    let events = match api {
        Api::Chat => chat(body, recall, n, tokens, query, stream),
        Api::Anthropic => anthropic(recall, n, tokens, stream),
        Api::Responses => responses(body, recall, n, tokens, query, stream),
    };
    match events {
        Ok(value) => json_reply(StatusCode::OK, &value),
        Err(events) => sse(events),
    }
}

/// `Ok` the whole answer, `Err` its stream's events (`event:`, data).
type Shaped = Result<Value, Vec<(Option<String>, Value)>>;

fn chat(body: &Value, recall: bool, n: u64, tokens: u64, query: &str, stream: bool) -> Shaped {
    let call = json!({"id": format!("call_{RECALL_MARK}_{n}"), "type": "function",
        "function": {"name": "foldgate_recall", "arguments": query}});
    let usage =
        json!({"prompt_tokens": tokens, "completion_tokens": 9, "total_tokens": tokens + 9});
    let finish = if recall { "tool_calls" } else { "stop" };
    if !stream {
        let mut message =
            json!({"role": "assistant", "content": if recall { "Let me look." } else { TEXT }});
        if recall {
            message["tool_calls"] = json!([call]);
        }
        return Ok(
            json!({"id": "chatcmpl-soak", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}),
        );
    }
    let chunk = |delta: Value, finish: Value| {
        (
            None,
            json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": "Working"}),
        Value::Null,
    )];
    if recall {
        events.push(chunk(
            json!({"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                "function": {"name": "foldgate_recall", "arguments": ""}}]}),
            Value::Null,
        ));
        let (a, b) = query.split_at(query.len() / 2);
        for piece in [a, b] {
            events.push(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                Value::Null,
            ));
        }
    } else {
        events.push(chunk(
            json!({"content": ": edited src/main.rs"}),
            Value::Null,
        ));
    }
    events.push(chunk(json!({}), json!(finish)));
    events.push((
        None,
        json!({"object": "chat.completion.chunk", "choices": [], "usage": usage}),
    ));
    Err(events)
}

fn anthropic(recall: bool, n: u64, tokens: u64, stream: bool) -> Shaped {
    let mut blocks =
        vec![json!({"type": "text", "text": if recall { "Let me look." } else { TEXT }})];
    if recall {
        blocks.push(
            json!({"type": "tool_use", "id": format!("toolu_{RECALL_MARK}_{n}"),
            "name": "foldgate_recall", "input": {"query": "SOAK port"}}),
        );
    }
    let stop = if recall { "tool_use" } else { "end_turn" };
    if !stream {
        return Ok(
            json!({"id": "msg_soak", "type": "message", "role": "assistant", "model": "soak-model",
            "content": blocks, "stop_reason": stop, "usage": {"input_tokens": tokens, "output_tokens": 9}}),
        );
    }
    let ev = |v: Value| (v["type"].as_str().map(str::to_string), v);
    let mut events = vec![ev(
        json!({"type": "message_start", "message": {"id": "msg_soak", "type": "message", "role": "assistant",
        "content": [], "model": "soak-model", "stop_reason": null, "usage": {"input_tokens": tokens, "output_tokens": 1}}}),
    )];
    for (i, block) in blocks.iter().enumerate() {
        if block["type"] == "text" {
            events.push(ev(json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})));
            events.push(ev(json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block["text"]}})));
        } else {
            events.push(ev(
                json!({"type": "content_block_start", "index": i, "content_block":
                {"type": "tool_use", "id": block["id"], "name": "foldgate_recall", "input": {}}}),
            ));
            events.push(ev(json!({"type": "content_block_delta", "index": i,
                "delta": {"type": "input_json_delta", "partial_json": block["input"].to_string()}})));
        }
        events.push(ev(json!({"type": "content_block_stop", "index": i})));
    }
    events.push(ev(
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 9}}),
    ));
    events.push(ev(json!({"type": "message_stop"})));
    Err(events)
}

fn responses(body: &Value, recall: bool, n: u64, tokens: u64, query: &str, stream: bool) -> Shaped {
    let text = if recall { "Let me look." } else { TEXT };
    let mut items = vec![
        json!({"type": "message", "id": format!("msg_{n}"), "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]}),
    ];
    if recall {
        items.push(json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{RECALL_MARK}_{n}"),
            "name": "foldgate_recall", "arguments": query, "status": "completed"}));
    }
    let usage = json!({"input_tokens": tokens, "output_tokens": 9, "total_tokens": tokens + 9});
    let response = |output: Value, status: &str| {
        json!({"id": format!("resp_{n}"), "object": "response", "created_at": 1, "status": status,
            "model": body["model"], "output": output, "usage": usage, "tools": [], "tool_choice": "auto"})
    };
    if !stream {
        return Ok(response(json!(items), "completed"));
    }
    let created = response(json!([]), "in_progress");
    let mut events = vec![json!({"type": "response.created", "response": created})];
    for (i, item) in items.iter().enumerate() {
        let mut open = item.clone();
        open["status"] = json!("in_progress");
        if item["type"] == "message" {
            open["content"] = json!([]);
            events.push(
                json!({"type": "response.output_item.added", "output_index": i, "item": open}),
            );
            events.push(json!({"type": "response.content_part.added", "output_index": i, "item_id": item["id"],
                "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}));
            events.push(json!({"type": "response.output_text.delta", "output_index": i, "item_id": item["id"],
                "content_index": 0, "delta": text}));
            events.push(json!({"type": "response.output_text.done", "output_index": i, "item_id": item["id"],
                "content_index": 0, "text": text}));
            events.push(json!({"type": "response.content_part.done", "output_index": i, "item_id": item["id"],
                "content_index": 0, "part": item["content"][0]}));
        } else {
            open["arguments"] = json!("");
            events.push(
                json!({"type": "response.output_item.added", "output_index": i, "item": open}),
            );
            events.push(
                json!({"type": "response.function_call_arguments.delta", "output_index": i,
                "item_id": item["id"], "delta": query}),
            );
            events.push(
                json!({"type": "response.function_call_arguments.done", "output_index": i,
                "item_id": item["id"], "arguments": query}),
            );
        }
        events.push(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
    }
    events.push(
        json!({"type": "response.completed", "response": response(json!(items), "completed")}),
    );
    Err(events
        .into_iter()
        .enumerate()
        .map(|(seq, mut e)| {
            e["sequence_number"] = json!(seq);
            (e["type"].as_str().map(str::to_string), e)
        })
        .collect())
}

/// The events as one SSE body, sent through a channel a few at a time.
fn sse(events: Vec<(Option<String>, Value)>) -> Response<Body> {
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        let chat = events.first().is_some_and(|(name, _)| name.is_none());
        for (name, data) in events {
            let text = match name {
                Some(name) => format!("event: {name}\ndata: {data}\n\n"),
                None => format!("data: {data}\n\n"),
            };
            if tx.send(Ok(Bytes::from(text))).await.is_err() {
                return;
            }
        }
        if chat {
            let _ = tx.send(Ok(Bytes::from_static(b"data: [DONE]\n\n"))).await;
        }
    });
    super::upstream::channel_reply(rx)
}

pub fn json_reply(status: StatusCode, value: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(foldgate::body::full(value.to_string()))
        .unwrap_or_else(|_| Response::new(foldgate::body::empty()))
}
