//! A mock Ollama server: `POST /api/chat` for conversations and for the
//! summarizer, streaming JSON lines (`application/x-ndjson`) unless the
//! body says `"stream": false` (absent means true, as Ollama streams by
//! default), and rejecting, with Ollama's `{"error": "..."}`, what Ollama
//! rejects or would silently drop: content that is not a string, call
//! arguments that are not an object, roles it does not know, OpenAI-only
//! fields, and tool results that do not answer the calls right before
//! them.

use super::llm::{ranges, tags};
use super::mock::{self, Recorded};
use bytes::Bytes;
use foldgate::summarize::prompt::SYSTEM_PROMPT;
use http::{Response, StatusCode};
use serde_json::{Value, json};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// What the mock saw and how it behaves.
#[derive(Default)]
pub struct OllamaState {
    /// Conversation requests (not the summarizer's), as received.
    pub conversation: Mutex<Vec<Recorded>>,
    /// Summarizer requests, as received.
    pub summarizer: Mutex<Vec<Recorded>>,
    /// Rule violations seen, one line each.
    pub violations: Mutex<Vec<String>>,
    /// Answer with a call of the client's tool `run` (an agent loop).
    pub calls_tools: AtomicBool,
    turns: AtomicUsize,
}

/// The running mock.
pub type OllamaMock = mock::Stateful<OllamaState>;

impl OllamaMock {
    pub async fn start() -> Self {
        Self::with(answer).await
    }

    /// The conversation requests' bodies.
    pub fn bodies(&self) -> Vec<Value> {
        let seen = self.state.conversation.lock().unwrap();
        seen.iter().map(Recorded::json).collect()
    }

    /// The violations seen so far.
    pub fn violations(&self) -> Vec<String> {
        self.state.violations.lock().unwrap().clone()
    }
}

/// Ollama's error.
pub fn error(status: StatusCode, message: &str) -> Response<foldgate::body::Body> {
    mock::json(status, &json!({ "error": message }))
}

fn answer(state: &OllamaState, r: Recorded) -> Response<foldgate::body::Body> {
    if r.uri != "/api/chat" {
        return error(StatusCode::NOT_FOUND, "404 page not found");
    }
    let Ok(body) = serde_json::from_slice::<Value>(&r.body) else {
        return error(StatusCode::BAD_REQUEST, "invalid character in request body");
    };
    let summarizer = body.pointer("/messages/0/content") == Some(&json!(SYSTEM_PROMPT));
    let seen = match summarizer {
        true => &state.summarizer,
        false => &state.conversation,
    };
    seen.lock().unwrap().push(r.clone());
    let broken = violation(&body).or_else(|| {
        let asked = summarizer && (body["stream"] != json!(false) || body["format"] != "json");
        asked.then(|| {
            "the summarizer must ask with \"stream\": false and \"format\": \"json\"".into()
        })
    });
    if let Some(v) = broken {
        state.violations.lock().unwrap().push(v.clone());
        return error(StatusCode::BAD_REQUEST, &v);
    }
    let prompt = u64::try_from(r.body.len() / 3).unwrap_or(0);
    let message = if summarizer {
        json!({"role": "assistant", "content": summary(&body).to_string()})
    } else {
        reply(state, &body)
    };
    let model = body["model"].clone();
    if body.get("stream") == Some(&json!(false)) {
        return mock::json(StatusCode::OK, &done(&model, message, prompt));
    }
    // Streamed: the text in two pieces, the calls whole in a line of
    // their own, then the final line with the counts.
    let text = message["content"].as_str().unwrap_or_default().to_string();
    let (head, tail) = text.split_at(text.len() / 2);
    let mut lines = vec![
        chunk(&model, json!({"role": "assistant", "content": head})),
        chunk(&model, json!({"role": "assistant", "content": tail})),
    ];
    if let Some(calls) = message.get("tool_calls") {
        lines.push(chunk(
            &model,
            json!({"role": "assistant", "content": "", "tool_calls": calls}),
        ));
    }
    lines.push(done(
        &model,
        json!({"role": "assistant", "content": ""}),
        prompt,
    ));
    let (tx, resp) = mock::stream("application/x-ndjson");
    tokio::spawn(async move {
        for line in lines {
            let _ = tx.send(Bytes::from(format!("{line}\n"))).await;
        }
    });
    resp
}

/// A streamed line of the answer.
fn chunk(model: &Value, message: Value) -> Value {
    json!({"model": model, "created_at": "2026-11-26T12:00:00Z", "message": message, "done": false})
}

/// The final object of an answer: `message`, and the counts.
fn done(model: &Value, message: Value, prompt: u64) -> Value {
    json!({"model": model, "created_at": "2026-11-26T12:00:00Z", "message": message,
        "done": true, "done_reason": "stop", "total_duration": 1000, "load_duration": 10,
        "prompt_eval_count": prompt, "prompt_eval_duration": 100, "eval_count": 5, "eval_duration": 50})
}

/// The model's message: asked about the favourite colour, it calls
/// `foldgate_recall` when offered and the answer is not in its messages;
/// in an agent loop it calls `run`; else it answers with a tag.
fn reply(state: &OllamaState, body: &Value) -> Value {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or_default();
    let asked = last["role"] == "user" && last["content"].to_string().contains("favourite colour");
    let after_recall = last["role"] == "tool" && last["tool_name"] == "foldgate_recall";
    if asked || after_recall {
        let seen = body["messages"].to_string();
        let offered = body["tools"].to_string().contains("\"foldgate_recall\"");
        if seen.contains("teal") {
            return json!({"role": "assistant", "content": "The favourite colour is teal."});
        }
        if offered && asked {
            return json!({"role": "assistant", "content": "Let me look that up.", "tool_calls": [
                {"function": {"name": "foldgate_recall", "arguments": {"query": "favourite colour"}}}]});
        }
        return json!({"role": "assistant", "content": "I cannot see that."});
    }
    let n = state.turns.fetch_add(1, Ordering::SeqCst) + super::agents::MODEL_TAGS as usize;
    let mut message = json!({"role": "assistant", "content": format!("[m{n}] on it")});
    if state.calls_tools.load(Ordering::Relaxed) {
        message["tool_calls"] = json!([{"function": {"name": "run", "arguments": {"step": n}}}]);
    }
    message
}

/// The mock summarizer's JSON: a summary whose facts name every `[mN]` tag
/// of the folded text, so coverage can be traced.
fn summary(body: &Value) -> Value {
    let prompt = body
        .pointer("/messages/1/content")
        .and_then(Value::as_str)
        .unwrap_or("");
    json!({
        "summary": "The user and the model worked through numbered steps.",
        "facts": [ranges(&tags(prompt))],
        "goals": ["finish the steps"], "decisions": [], "open_items": [], "artifacts": [],
    })
}

/// Top-level fields of OpenAI's chat completions that Ollama does not
/// read (it would drop them without a word).
const OPENAI_ONLY: [&str; 7] = [
    "response_format",
    "max_tokens",
    "max_completion_tokens",
    "tool_choice",
    "stream_options",
    "n",
    "functions",
];

/// The fields of an Ollama message.
const MESSAGE_FIELDS: [&str; 7] = [
    "role",
    "content",
    "images",
    "tool_calls",
    "thinking",
    "tool_name",
    "tool_call_id",
];

/// Why Ollama would reject (or silently mangle) a chat body, if it would.
pub fn violation(body: &Value) -> Option<String> {
    if body["model"].as_str().is_none_or(str::is_empty) {
        return Some("model is required".into());
    }
    if let Some(field) = OPENAI_ONLY.iter().find(|f| body.get(**f).is_some()) {
        return Some(format!("{field} is not an Ollama field"));
    }
    for tool in body["tools"].as_array().into_iter().flatten() {
        if tool["type"] != "function" || !tool["function"]["name"].is_string() {
            return Some(format!("a tool must be a named function tool: {tool}"));
        }
    }
    let Some(messages) = body["messages"].as_array() else {
        return Some("messages must be an array".into());
    };
    for (i, m) in messages.iter().enumerate() {
        let Some(fields) = m.as_object() else {
            return Some(format!("messages[{i}] is not an object"));
        };
        if let Some(key) = fields
            .keys()
            .find(|k| !MESSAGE_FIELDS.contains(&k.as_str()))
        {
            return Some(format!("messages[{i}]: unknown field {key:?}"));
        }
        let role = m["role"].as_str().unwrap_or_default();
        if !matches!(role, "system" | "user" | "assistant" | "tool") {
            return Some(format!("messages[{i}]: unknown role {role:?}"));
        }
        if m.get("content").is_some_and(|c| !c.is_string()) {
            return Some(format!(
                "json: cannot unmarshal {} into Go struct field Message.messages.content of type string",
                m["content"]
            ));
        }
        if let Some(images) = m.get("images") {
            if !images
                .as_array()
                .is_some_and(|a| a.iter().all(Value::is_string))
            {
                return Some(format!("messages[{i}]: images must be base64 strings"));
            }
        }
        for call in m["tool_calls"].as_array().into_iter().flatten() {
            if !call["function"]["arguments"].is_object() {
                return Some(format!(
                    "json: cannot unmarshal {} into Go struct field ToolCallFunction.messages.tool_calls.function.arguments",
                    call["function"]["arguments"]
                ));
            }
        }
    }
    pairing_violation(messages)
}

/// Whether tool results answer the calls right before them: each run of
/// `tool` messages follows an assistant message with as many calls, a
/// `tool_name` naming one of them, and calls are answered before the
/// next message.
pub fn pairing_violation(messages: &[Value]) -> Option<String> {
    let names = |m: &Value| -> Vec<String> {
        m["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                c["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    let mut i = 0;
    while i < messages.len() {
        let calls = names(&messages[i]);
        let results = messages[i + 1..]
            .iter()
            .take_while(|m| m["role"] == "tool")
            .count();
        if messages[i]["role"] == "tool" {
            return Some(format!(
                "messages[{i}]: a tool result without the calls before it"
            ));
        }
        if calls.is_empty() && results > 0 {
            return Some(format!(
                "messages[{}]: a tool result without a call before it",
                i + 1
            ));
        }
        let last = i + 1 + results == messages.len() && results == 0;
        if !calls.is_empty() && results != calls.len() && !last {
            return Some(format!(
                "messages[{i}]: {} calls answered by {results} tool results",
                calls.len()
            ));
        }
        for r in &messages[i + 1..i + 1 + results] {
            if let Some(name) = r["tool_name"].as_str() {
                if !calls.iter().any(|c| c == name) {
                    return Some(format!(
                        "a tool result names {name:?}, not a call before it"
                    ));
                }
            }
        }
        i += 1 + results;
    }
    None
}
