//! Mock Anthropic Messages and OpenAI Responses upstreams for agent loops.
//!
//! Each answers every request with a tool call (a text block or reasoning
//! item with a fresh `[mN]` tag first, so folded model turns can be traced
//! into summaries), streamed when asked, and rejects what the real API
//! rejects: a tool call without its result right after it, a result
//! without its call, a first message that is not the user's, and a prompt
//! over the window (with the API's own "too long" error).

pub mod cli;

use super::llm::LlmState;
use super::mock;
use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::atomic::Ordering;

/// First tag the mock model writes (client tags stay below it).
pub const MODEL_TAGS: u32 = 100_000;

type Reply = Response<foldgate::body::Body>;

/// Rough prompt tokens of a body: one per 3 bytes of JSON.
pub fn body_tokens(len: usize) -> usize {
    len / 3
}

/// A prompt's tokens as a provider's tokenizer would count them: o200k
/// tokens of every string in the body (texts, arguments, names), one per
/// number, and 3 per object (a message's or a part's framing in the
/// chat template); JSON's own syntax is not counted. For a JSON body
/// of English text this is about `len / 4.5`, where [`body_tokens`] says
/// `len / 3`.
pub fn text_tokens(body: &Value) -> usize {
    let bpe = tiktoken_rs::o200k_base_singleton();
    fn walk(v: &Value, bpe: &tiktoken_rs::CoreBPE) -> usize {
        match v {
            Value::String(s) => bpe.encode_ordinary(s).len(),
            Value::Number(_) => 1,
            Value::Array(a) => a.iter().map(|v| walk(v, bpe)).sum(),
            Value::Object(o) => 3 + o.values().map(|v| walk(v, bpe)).sum::<usize>(),
            Value::Null | Value::Bool(_) => 0,
        }
    }
    walk(body, bpe)
}

/// The prompt tokens a mock reports (and judges its window by): the
/// tokenizer's count when `from_text` is set, else [`body_tokens`].
pub fn prompt_tokens(from_text: bool, body: &Value, len: usize) -> usize {
    if from_text {
        text_tokens(body)
    } else {
        body_tokens(len)
    }
}

/// Whether a Messages request breaks the API's pairing and order rules.
pub fn anthropic_violation(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    if messages.first().map(|m| &m["role"]) != Some(&json!("user")) {
        return Some("the first message must use the user role".into());
    }
    let blocks = |m: &Value, kind: &str| -> Vec<String> {
        m["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == kind)
            .map(|b| {
                let id = if kind == "tool_use" {
                    &b["id"]
                } else {
                    &b["tool_use_id"]
                };
                id.as_str().unwrap_or_default().to_string()
            })
            .collect()
    };
    for (i, m) in messages.iter().enumerate() {
        let results = blocks(m, "tool_result");
        let previous_calls = i
            .checked_sub(1)
            .map(|p| blocks(&messages[p], "tool_use"))
            .unwrap_or_default();
        for id in &results {
            if !previous_calls.contains(id) {
                return Some(format!(
                    "messages.{i}: tool_result {id} has no tool_use in the previous message"
                ));
            }
        }
        let calls = blocks(m, "tool_use");
        if !calls.is_empty() && i + 1 < messages.len() {
            let answered = blocks(&messages[i + 1], "tool_result");
            if let Some(id) = calls.iter().find(|c| !answered.contains(c)) {
                return Some(format!(
                    "messages.{i}: tool_use {id} has no tool_result right after it"
                ));
            }
        }
    }
    None
}

/// Whether a Responses request breaks the API's pairing rules.
pub fn responses_violation(body: &Value) -> Option<String> {
    let items = body["input"].as_array()?;
    let kind = |v: &Value| v["type"].as_str().unwrap_or("message").to_string();
    let mut calls = HashSet::new();
    let mut answered = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        match kind(item).as_str() {
            "function_call" => {
                let id = item["call_id"].as_str().unwrap_or_default();
                calls.insert(id.to_string());
                // The mock's reasoning item `rs_X` precedes call `call_X`,
                // or the run of parallel calls that `call_X` starts.
                let mut first = i;
                while first > 0 && kind(&items[first - 1]) == "function_call" {
                    first -= 1;
                }
                let lead = items[first]["call_id"].as_str().unwrap_or_default();
                let reasoning = lead.replace("call_", "rs_");
                if first == 0 || items[first - 1]["id"] != json!(reasoning) {
                    return Some(format!(
                        "input[{i}]: function_call {id} without its reasoning item"
                    ));
                }
            }
            "function_call_output" => {
                let id = item["call_id"].as_str().unwrap_or_default();
                if !calls.contains(id) {
                    return Some(format!(
                        "input[{i}]: No tool call found for function call output with call_id {id}."
                    ));
                }
                answered.insert(id.to_string());
            }
            "reasoning" if items.get(i + 1).is_none_or(|n| kind(n) != "function_call") => {
                return Some(format!(
                    "input[{i}]: reasoning item without the item that follows it"
                ));
            }
            _ => {}
        }
    }
    calls
        .difference(&answered)
        .next()
        .map(|id| format!("No tool output found for function call {id}."))
}

/// The next tag and call number.
fn next(state: &LlmState) -> u32 {
    MODEL_TAGS + state.agent_turns.fetch_add(1, Ordering::SeqCst)
}

/// Answers a Messages request.
pub fn anthropic(state: &LlmState, body: Value, len: usize) -> Reply {
    state.chat_requests.lock().unwrap().push(body.clone());
    let error = |message: String| {
        mock::json(
            StatusCode::BAD_REQUEST,
            &json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}}),
        )
    };
    if let Some(v) = anthropic_violation(&body) {
        state.violations.lock().unwrap().push(v.clone());
        return error(v);
    }
    let window = state.window_tokens.load(Ordering::Relaxed) as usize;
    let tokens = prompt_tokens(state.usage_from_text.load(Ordering::Relaxed), &body, len);
    if window > 0 && tokens > window {
        return error(format!(
            "prompt is too long: {tokens} tokens > {window} maximum"
        ));
    }
    let n = next(state);
    let text = format!("[m{n}] running step {n}");
    let call_id = format!("toolu_{n}");
    let input = json!({"cmd": format!("make step-{n}")});
    let usage = json!({"input_tokens": tokens, "output_tokens": 12});
    if body["stream"] != json!(true) {
        return mock::json(
            StatusCode::OK,
            &json!({"id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": body["model"],
                "content": [{"type": "text", "text": text}, {"type": "tool_use", "id": call_id, "name": "bash", "input": input}],
                "stop_reason": "tool_use", "stop_sequence": null, "usage": usage}),
        );
    }
    let events = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": format!("msg_{n}"), "type": "message", "role": "assistant",
            "model": body["model"], "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": tokens, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "tool_use", "id": call_id, "name": "bash", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
            "usage": {"output_tokens": 12}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    sse(events.into_iter().map(|(name, data)| (Some(name), data)))
}

/// Answers a Responses request.
pub fn responses(state: &LlmState, body: Value, len: usize) -> Reply {
    state.chat_requests.lock().unwrap().push(body.clone());
    let error = |message: String, code: &str| {
        mock::json(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"message": message, "type": "invalid_request_error", "param": "input", "code": code}}),
        )
    };
    if let Some(v) = responses_violation(&body) {
        state.violations.lock().unwrap().push(v.clone());
        return error(v, "invalid_request");
    }
    let window = state.window_tokens.load(Ordering::Relaxed) as usize;
    let tokens = prompt_tokens(state.usage_from_text.load(Ordering::Relaxed), &body, len);
    if window > 0 && tokens > window {
        return error(
            format!(
                "Your input exceeds the context window of this model. This model's maximum context length is {window} tokens."
            ),
            "context_length_exceeded",
        );
    }
    let n = next(state);
    let output = json!([
        {"type": "reasoning", "id": format!("rs_{n}"), "summary": [{"type": "summary_text", "text": format!("[m{n}] thinking about step {n}")}]},
        {"type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"), "name": "bash",
         "arguments": json!({"cmd": format!("make step-{n} [m{n}]")}).to_string(), "status": "completed"},
    ]);
    let response = json!({"id": format!("resp_{n}"), "object": "response", "created_at": 1_700_000_000, "status": "completed",
        "model": body["model"], "output": output, "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
        "usage": {"input_tokens": tokens, "output_tokens": 20, "total_tokens": tokens + 20,
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}});
    if body["stream"] != json!(true) {
        return mock::json(StatusCode::OK, &response);
    }
    let mut created = response.clone();
    created["status"] = json!("in_progress");
    created["output"] = json!([]);
    let mut events =
        vec![json!({"type": "response.created", "sequence_number": 0, "response": created})];
    for (i, item) in output.as_array().unwrap().iter().enumerate() {
        events.push(json!({"type": "response.output_item.added", "output_index": i, "item": item, "sequence_number": events.len()}));
        events.push(json!({"type": "response.output_item.done", "output_index": i, "item": item, "sequence_number": events.len() + 1}));
    }
    events.push(json!({"type": "response.completed", "response": response, "sequence_number": events.len()}));
    sse(events
        .into_iter()
        .map(|data| (data["type"].as_str().map(str::to_string), data)))
}

/// An event stream of `(event name, data)` pairs.
fn sse<N: std::fmt::Display>(events: impl IntoIterator<Item = (Option<N>, Value)>) -> Reply {
    let (tx, resp) = mock::stream("text/event-stream");
    let frames: Vec<Bytes> = events
        .into_iter()
        .map(|(name, data)| match name {
            Some(name) => Bytes::from(format!("event: {name}\ndata: {data}\n\n")),
            None => Bytes::from(format!("data: {data}\n\n")),
        })
        .collect();
    tokio::spawn(async move {
        for frame in frames {
            if tx.send(frame).await.is_err() {
                return;
            }
        }
    });
    resp
}
