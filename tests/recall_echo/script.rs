//! The recall conversation `tests/recall_echo.rs` and
//! `tests/recall_faults.rs` ask on every API, and how they read what the
//! client was shown: one script for the scripted model of `model.rs`.

use super::common::convo::Convo;
use super::common::{Foldgate, Reply, post_json};
use serde_json::{Value, json};

pub const FACT: &str = "the favourite colour of the customer is teal";
pub const LOOKING: &str = "Let me look that up.";
pub const ANSWER: &str = "The favourite colour is teal.";
pub const BLIND: &str = "I cannot see that.";

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Api {
    Chat,
    Anthropic,
    Responses,
}

pub const APIS: [Api; 3] = [Api::Chat, Api::Anthropic, Api::Responses];

/// A conversation that folds on its first request: the fact in its first,
/// folded, user message, the question last.
pub fn conversation() -> Vec<Value> {
    Convo::fact_then_question(FACT, "what is the favourite colour of the customer?").messages
}

/// Asks the conversation's question on `api` as conversation `id`, with
/// the client's `tools`.
pub async fn ask_as(
    fg: &Foldgate,
    id: &str,
    api: Api,
    stream: bool,
    tools: Option<Value>,
) -> Reply {
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
        ("x-conversation-id", id),
        ("authorization", "Bearer sk-tenant-a"),
    ];
    post_json(&format!("{}{path}", fg.url), &headers, &body).await
}

/// The JSON data of every event of a stream (`[DONE]` left out).
pub fn events(reply: &Reply) -> Vec<Value> {
    String::from_utf8_lossy(&reply.body)
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// The text the client is shown: its stream's text deltas, or the whole
/// answer's text.
pub fn shown_text(api: Api, stream: bool, reply: &Reply) -> String {
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
pub fn output_texts(response: &Value) -> Vec<String> {
    response["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["content"][0]["text"].as_str().map(str::to_string))
        .collect()
}

/// Whether the client was shown anything of the recall tool.
pub fn mentions_recall(reply: &Reply) -> bool {
    reply.body.windows(15).any(|w| w == b"foldgate_recall")
}
