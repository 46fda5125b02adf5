//! A mock Gemini upstream: `generateContent` and `streamGenerateContent`
//! (SSE with `alt=sse`, else a JSON array) for conversations and for the
//! summarizer, rejecting what the real API rejects: roles that do not
//! alternate user/model, a model turn's function calls without the
//! responses right after it, a response without its call, and a prompt
//! over the window (with Gemini's own error).

use super::llm::{ranges, tags};
use super::mock::{self, Recorded};
use bytes::Bytes;
use foldgate::fold::summary::HEADING_PREFIX;
use foldgate::summarize::prompt::SYSTEM_PROMPT;
use http::{Response, StatusCode};
use serde_json::{Value, json};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What the mock saw and how it behaves.
#[derive(Default)]
pub struct GeminiState {
    /// Conversation requests (not the summarizer's), as received.
    pub conversation: Mutex<Vec<Recorded>>,
    /// Summarizer requests, as received.
    pub summarizer: Mutex<Vec<Recorded>>,
    /// Rule violations seen, one line each.
    pub violations: Mutex<Vec<String>>,
    /// A conversation body larger than this many bytes is rejected as too
    /// long (0: no limit).
    pub window_bytes: AtomicUsize,
    /// Answer with a function call `run` (an agent loop), else with text.
    pub calls_tools: std::sync::atomic::AtomicBool,
    /// Call `foldgate_recall` when offered, asked about a colour it cannot
    /// see.
    pub recalls: std::sync::atomic::AtomicBool,
    /// Refuse summarizer calls that ask for JSON output, as models without
    /// JSON mode do.
    pub no_json_mode: std::sync::atomic::AtomicBool,
    /// Report prompt tokens counted by a tokenizer (see
    /// [`super::agents::text_tokens`]) instead of one per 3 bytes.
    pub usage_from_text: std::sync::atomic::AtomicBool,
    turns: AtomicUsize,
}

/// The running mock.
pub type GeminiMock = mock::Stateful<GeminiState>;

impl GeminiMock {
    pub async fn start() -> Self {
        Self::with(answer).await
    }

    /// The conversation requests' bodies.
    pub fn bodies(&self) -> Vec<Value> {
        let seen = self.state.conversation.lock().unwrap();
        seen.iter().map(Recorded::json).collect()
    }
}

/// Google's error envelope.
pub fn error(code: u16, status: &str, message: &str) -> Response<foldgate::body::Body> {
    mock::json(
        StatusCode::from_u16(code).unwrap(),
        &json!({"error": {"code": code, "message": message, "status": status}}),
    )
}

fn answer(state: &GeminiState, r: Recorded) -> Response<foldgate::body::Body> {
    let Ok(body) = serde_json::from_slice::<Value>(&r.body) else {
        return error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.");
    };
    if is_summarizer(&body) {
        state.summarizer.lock().unwrap().push(r.clone());
        let json_mode = body.pointer("/generationConfig/responseMimeType").is_some();
        if json_mode && state.no_json_mode.load(Ordering::Relaxed) {
            return error(
                400,
                "INVALID_ARGUMENT",
                "Json mode is not enabled for models/tiny-gemini",
            );
        }
        return mock::json(StatusCode::OK, &summary(&body));
    }
    state.conversation.lock().unwrap().push(r.clone());
    if let Some(v) = violation(&body) {
        state.violations.lock().unwrap().push(v.clone());
        return error(400, "INVALID_ARGUMENT", &v);
    }
    let limit = state.window_bytes.load(Ordering::Relaxed);
    if limit > 0 && r.body.len() > limit {
        let message = format!(
            "The input token count ({}) exceeds the maximum number of tokens allowed ({}).",
            r.body.len() / 3,
            limit / 3
        );
        return error(400, "INVALID_ARGUMENT", &message);
    }
    let n = state.turns.fetch_add(1, Ordering::SeqCst) + super::agents::MODEL_TAGS as usize;
    let mut parts = vec![json!({"text": format!("[m{n}] on it")})];
    if state.recalls.load(Ordering::Relaxed) {
        parts = vec![recalling(&body)];
    } else if state.calls_tools.load(Ordering::Relaxed) {
        parts.push(json!({"functionCall": {"name": "run", "args": {"step": n}}}));
    }
    let from_text = state.usage_from_text.load(Ordering::Relaxed);
    let prompt = super::agents::prompt_tokens(from_text, &body, r.body.len());
    let prompt = u64::try_from(prompt).unwrap_or(0);
    if !r.uri.contains(":streamGenerateContent") {
        return mock::json(StatusCode::OK, &response(parts, prompt));
    }
    let events = vec![response(parts, 0), response(Vec::new(), prompt)];
    if r.uri.contains("alt=sse") {
        let (tx, resp) = mock::stream("text/event-stream");
        tokio::spawn(async move {
            for e in events {
                let _ = tx.send(Bytes::from(format!("data: {e}\r\n\r\n"))).await;
            }
        });
        return resp;
    }
    mock::json(StatusCode::OK, &Value::Array(events))
}

/// A model asked about a colour: it calls `foldgate_recall` when offered
/// and the answer is not in its contents, else answers from what it sees.
fn recalling(body: &Value) -> Value {
    let contents = body["contents"].to_string();
    let offered = body["tools"].to_string().contains("\"foldgate_recall\"");
    let asked = body["contents"]
        .as_array()
        .and_then(|c| c.last())
        .is_some_and(|c| c.to_string().contains("favourite colour"));
    if contents.contains("teal") {
        json!({"text": "The favourite colour is teal."})
    } else if offered && asked {
        json!({"functionCall": {"name": "foldgate_recall", "args": {"query": "favourite colour"}}})
    } else {
        json!({"text": "I cannot see that."})
    }
}

/// Whether `body` is foldgate's summarizer call (its system prompt).
pub fn is_summarizer(body: &Value) -> bool {
    body.pointer("/systemInstruction/parts/0/text") == Some(&json!(SYSTEM_PROMPT))
}

/// The mock summarizer's answer to `body`: a summary whose facts name
/// every `[mN]` tag of the folded text, so coverage can be traced.
pub fn summary(body: &Value) -> Value {
    let prompt = body
        .pointer("/contents/0/parts/0/text")
        .and_then(Value::as_str)
        .unwrap_or("");
    let summary = json!({
        "summary": "The user and the model worked through numbered steps.",
        "facts": [ranges(&tags(prompt))],
        "goals": ["finish the steps"], "decisions": [], "open_items": [], "artifacts": [],
    });
    response(vec![json!({"text": summary.to_string()})], 100)
}

/// The summary foldgate put in a forwarded body's `systemInstruction`
/// ("" when the body carries none).
pub fn summary_of(body: &Value) -> String {
    body["systemInstruction"]["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["text"].as_str())
        .filter(|t| t.contains(HEADING_PREFIX))
        .collect()
}

/// A `GenerateContentResponse` with `parts` (none: the usage event).
pub fn response(parts: Vec<Value>, prompt_tokens: u64) -> Value {
    let mut out = json!({"modelVersion": "mock"});
    if !parts.is_empty() {
        out["candidates"] = json!([{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}]);
    }
    if prompt_tokens > 0 {
        out["usageMetadata"] = json!({"promptTokenCount": prompt_tokens,
            "candidatesTokenCount": 5, "totalTokenCount": prompt_tokens + 5});
    }
    out
}

/// The names of a content's parts of `kind` (`functionCall`,
/// `functionResponse`).
fn named(content: &Value, kind: &str) -> Vec<String> {
    content["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.get(kind))
        .map(|c| c["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Whether a request breaks Gemini's rules on roles and function pairs.
pub fn violation(body: &Value) -> Option<String> {
    let Some(contents) = body["contents"].as_array() else {
        return Some("contents: field required".into());
    };
    if contents.first().map(|c| &c["role"]) != Some(&json!("user")) {
        return Some("the first content must be the user's".into());
    }
    for (i, c) in contents.iter().enumerate() {
        let role = c["role"].as_str().unwrap_or_default();
        if role != "user" && role != "model" {
            return Some(format!("contents[{i}]: unknown role {role:?}"));
        }
        if i > 0 && contents[i - 1]["role"] == c["role"] {
            return Some(format!("contents[{i}]: roles must alternate user/model"));
        }
    }
    pairing_violation(body)
}

/// Whether a request breaks Gemini's pairing of function calls and
/// responses: a model turn's calls need their responses in the very next
/// content, a response its call in the one before.
pub fn pairing_violation(body: &Value) -> Option<String> {
    let Some(contents) = body["contents"].as_array() else {
        return Some("contents: field required".into());
    };
    for (i, c) in contents.iter().enumerate() {
        let answers = named(c, "functionResponse");
        let calls = i
            .checked_sub(1)
            .map(|p| named(&contents[p], "functionCall"));
        if !answers.is_empty() && calls.as_ref() != Some(&answers) {
            return Some(format!(
                "contents[{i}]: function responses {answers:?} do not answer the calls before them ({calls:?})"
            ));
        }
        let made = named(c, "functionCall");
        if !made.is_empty()
            && i + 1 < contents.len()
            && named(&contents[i + 1], "functionResponse") != made
        {
            return Some(format!(
                "contents[{i}]: function calls {made:?} have no responses right after them"
            ));
        }
    }
    None
}
