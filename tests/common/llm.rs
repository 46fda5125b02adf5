//! A mock LLM upstream that plays both the chat model and the summarizer.
//!
//! Client messages carry tags like `[m17]`. The mock summarizer returns a
//! summary whose `facts` list the tags it has seen (in the current summary
//! and in the transcript), compressed to ranges (`[m0..m57]`), so a test
//! can check that every message missing from a view is in its summary.

use super::mock::{self, Mock, Recorded};
use bytes::Bytes;
use foldgate::summarize::prompt::SYSTEM_PROMPT;
use http::{Response, StatusCode};
use serde_json::{Value, json};
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the mock summarizer answers one call.
#[derive(Debug, Clone)]
pub enum Sum {
    /// A valid JSON summary.
    Good,
    /// The same, inside a markdown code fence with prose around it.
    Fenced,
    /// Text that is not JSON.
    Garbage,
    /// An HTTP error status.
    Status(u16),
    /// A valid summary that keeps no identifier at all.
    Lossy,
    /// Exactly this message content, `finish_reason: "stop"`.
    Raw(String),
    /// Exactly this message content, `finish_reason: "length"` (cut off at
    /// the token limit).
    Cut(String),
}

/// The lossy summary [`Sum::Lossy`] answers.
pub const LOSSY_SUMMARY: &str = r#"{"summary":"The user and the assistant discussed the work.","facts":["work continued"],"goals":["keep working"],"decisions":[],"open_items":[],"artifacts":[]}"#;

/// What the mock saw and how it behaves.
#[derive(Default)]
pub struct LlmState {
    /// Answers for the next summarizer calls; `Good` when empty.
    pub script: Mutex<VecDeque<Sum>>,
    /// Reject `response_format: json_schema` with a 400.
    pub reject_schema: AtomicBool,
    /// Answer chat requests whose body exceeds this many bytes with a
    /// context-length 400 (0 = off).
    pub context_limit_bytes: AtomicUsize,
    /// Report this many prompt tokens in chat usage (0 = no usage field).
    pub usage_prompt_tokens: AtomicU32,
    /// Count prompt tokens with a tokenizer (see
    /// [`super::agents::text_tokens`]) instead of one per 3 bytes, and
    /// report them in chat usage too.
    pub usage_from_text: AtomicBool,
    /// Delay of every summarizer call.
    pub summarizer_delay_ms: AtomicU32,
    /// Summarizer request bodies, in order.
    pub summarizer_requests: Mutex<Vec<Value>>,
    /// Chat request bodies, in order.
    pub chat_requests: Mutex<Vec<Value>>,
    /// The answer to `GET /v1/models`, when set.
    pub models_listing: Mutex<Option<Value>>,
    /// Other JSON answers by `"METHOD /path"` (a local server's own API,
    /// e.g. `"GET /props"`), with 200.
    pub routes: Mutex<std::collections::HashMap<String, Value>>,
    /// The answer when `script` is empty; `Good` when unset.
    pub default_answer: Mutex<Option<Sum>>,
    /// Agent-API (Messages, Responses) answers given so far.
    pub agent_turns: AtomicU32,
    /// Rule violations the agent-API mocks rejected.
    pub violations: Mutex<Vec<String>>,
    /// The agent-API mocks' window, in rough tokens (0 = none).
    pub window_tokens: AtomicU32,
    /// Summarizer calls being answered right now.
    pub summarizer_in_flight: AtomicUsize,
    /// The most summarizer calls ever answered at once.
    pub summarizer_max_in_flight: AtomicUsize,
    /// Call `foldgate_recall` on every Nth chat request that offers it
    /// (0 = never); see [`recall_call`].
    pub recall_every: AtomicUsize,
    /// Recall calls made so far.
    pub recalls: AtomicUsize,
}

/// Counts one summarizer call in flight until dropped.
struct InFlight<'a>(&'a LlmState);

impl<'a> InFlight<'a> {
    fn enter(state: &'a LlmState) -> Self {
        let now = state.summarizer_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state
            .summarizer_max_in_flight
            .fetch_max(now, Ordering::SeqCst);
        Self(state)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.summarizer_in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The running mock.
pub struct Llm {
    pub mock: Mock,
    pub state: Arc<LlmState>,
}

impl Llm {
    pub async fn start() -> Self {
        let state = Arc::new(LlmState::default());
        let shared = state.clone();
        let mock = Mock::start(move |r: Recorded| answer(shared.clone(), r)).await;
        Self { mock, state }
    }

    pub fn url(&self) -> &str {
        &self.mock.url
    }

    pub fn summarizer_calls(&self) -> usize {
        self.state.summarizer_requests.lock().unwrap().len()
    }

    pub fn chat_requests(&self) -> Vec<Value> {
        self.state.chat_requests.lock().unwrap().clone()
    }

    pub fn summarizer_requests(&self) -> Vec<Value> {
        self.state.summarizer_requests.lock().unwrap().clone()
    }

    pub fn script(&self, answers: impl IntoIterator<Item = Sum>) {
        self.state.script.lock().unwrap().extend(answers);
    }

    /// Answers `"METHOD /path"` with `json` (200) from now on.
    pub fn route(&self, method_and_path: &str, json: Value) {
        self.state
            .routes
            .lock()
            .unwrap()
            .insert(method_and_path.to_string(), json);
    }

    /// Sets the answer used whenever the script is empty.
    pub fn answer_always(&self, answer: Sum) {
        *self.state.default_answer.lock().unwrap() = Some(answer);
    }

    /// The most summarizer calls the mock has answered at once.
    pub fn max_summarizer_in_flight(&self) -> usize {
        self.state.summarizer_max_in_flight.load(Ordering::SeqCst)
    }
}

fn is_summarizer(body: &Value) -> bool {
    body.pointer("/messages/0/content").and_then(Value::as_str) == Some(SYSTEM_PROMPT)
}

async fn answer(state: Arc<LlmState>, r: Recorded) -> Response<foldgate::body::Body> {
    let route = format!("{} {}", r.method, r.uri);
    if let Some(json) = state.routes.lock().unwrap().get(&route) {
        return mock::json(StatusCode::OK, json);
    }
    if r.method == http::Method::GET && r.uri.ends_with("/models") {
        return match state.models_listing.lock().unwrap().clone() {
            Some(listing) => mock::json(StatusCode::OK, &listing),
            None => mock::json(
                StatusCode::NOT_FOUND,
                &json!({"error": {"message": "no listing"}}),
            ),
        };
    }
    let Ok(body) = serde_json::from_slice::<Value>(&r.body) else {
        return mock::json(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"message": "mock: not JSON"}}),
        );
    };
    if is_summarizer(&body) {
        return summarize(&state, body).await;
    }
    if r.uri.ends_with("/messages") && body["system"] == SYSTEM_PROMPT {
        return summarize_messages_api(&state, body).await;
    }
    if r.uri.ends_with("/messages") {
        return super::agents::anthropic(&state, body, r.body.len());
    }
    if r.uri.ends_with("/responses") {
        return super::agents::responses(&state, body, r.body.len());
    }
    state.chat_requests.lock().unwrap().push(body.clone());
    let window = state.window_tokens.load(Ordering::Relaxed) as usize;
    let from_text = state.usage_from_text.load(Ordering::Relaxed);
    let tokens = super::agents::prompt_tokens(from_text, &body, r.body.len());
    if window > 0 && tokens > window {
        let message = format!(
            "This model's maximum context length is {window} tokens. However, your messages resulted in {tokens} tokens."
        );
        return mock::json(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"message": message, "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
        );
    }
    let limit = state.context_limit_bytes.load(Ordering::Relaxed);
    if limit > 0 && r.body.len() > limit {
        return mock::json(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"message": "This model's maximum context length is 1000 tokens. However, your messages resulted in 5000 tokens.",
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
        );
    }
    if let Some(call) = recall_call(&state, &body) {
        return mock::json(StatusCode::OK, &call);
    }
    let mut usage = state.usage_prompt_tokens.load(Ordering::Relaxed);
    if from_text {
        usage = u32::try_from(tokens).unwrap_or(u32::MAX);
    }
    let usage = (usage > 0).then(
        || json!({"prompt_tokens": usage, "completion_tokens": 3, "total_tokens": usage + 3}),
    );
    if body["stream"] == json!(true) {
        let (tx, resp) = mock::stream("text/event-stream");
        tokio::spawn(async move {
            for word in ["Sure", ", done", "."] {
                let chunk = json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": word}}]});
                let _ = tx.send(Bytes::from(format!("data: {chunk}\n\n"))).await;
            }
            if let Some(u) = usage {
                let chunk = json!({"object": "chat.completion.chunk", "choices": [], "usage": u});
                let _ = tx.send(Bytes::from(format!("data: {chunk}\n\n"))).await;
            }
            let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
        });
        return resp;
    }
    let mut reply = json!({
        "id": "chatcmpl-mock", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Sure, done."}, "finish_reason": "stop"}],
    });
    if let Some(u) = usage {
        reply["usage"] = u;
    }
    mock::json(StatusCode::OK, &reply)
}

/// A model that looks things up: on every `recall_every`th chat request
/// that offers `foldgate_recall` and is not itself a recall round's
/// follow-up, a whole (non-streamed) answer calling it. The Nth call asks
/// for step N's port and entry file (see `tooloop`).
fn recall_call(state: &LlmState, body: &Value) -> Option<Value> {
    let every = state.recall_every.load(Ordering::Relaxed);
    let offered = body["tools"].as_array().is_some_and(|tools| {
        tools
            .iter()
            .any(|t| t.pointer("/function/name") == Some(&json!("foldgate_recall")))
    });
    let follow_up = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["tool_call_id"].as_str())
        .is_some_and(|id| id.starts_with("call_recall"));
    let seen = state.chat_requests.lock().unwrap().len();
    if every == 0 || !offered || follow_up || seen % every != 0 || body["stream"] == json!(true) {
        return None;
    }
    let n = state.recalls.fetch_add(1, Ordering::SeqCst) + 1;
    let args = json!({"query": format!("port and entry of /srv/app/step{n}")}).to_string();
    Some(json!({
        "id": "chatcmpl-recall", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": format!("call_recall_{n}"), "type": "function",
                "function": {"name": "foldgate_recall", "arguments": args}}]},
            "finish_reason": "tool_calls"}],
    }))
}

async fn summarize(state: &LlmState, body: Value) -> Response<foldgate::body::Body> {
    let prompt_len = body
        .pointer("/messages/1/content")
        .and_then(Value::as_str)
        .map_or(0, str::len);
    match summary_reply(state, body).await {
        Ok((content, finish_reason)) => mock::json(
            StatusCode::OK,
            &json!({"id": "sum", "object": "chat.completion", "choices": [{"index": 0,
                "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
                "usage": {"prompt_tokens": prompt_len / 4, "completion_tokens": 50, "total_tokens": prompt_len / 4 + 50}}),
        ),
        Err((status, message)) => mock::json(
            status,
            &json!({"error": {"message": message, "type": "invalid_request_error"}}),
        ),
    }
}

/// The same summarizer on Anthropic's Messages API.
async fn summarize_messages_api(state: &LlmState, body: Value) -> Response<foldgate::body::Body> {
    let user = body
        .pointer("/messages/0/content")
        .cloned()
        .unwrap_or_default();
    let as_chat = json!({"model": body["model"], "max_tokens": body["max_tokens"],
        "messages": [{"role": "system", "content": body["system"]}, {"role": "user", "content": user}]});
    match summary_reply(state, as_chat).await {
        Ok((content, finish)) => mock::json(
            StatusCode::OK,
            &json!({"id": "msg_sum", "type": "message", "role": "assistant", "model": body["model"],
                "content": [{"type": "text", "text": content}],
                "stop_reason": if finish == "length" { "max_tokens" } else { "end_turn" },
                "usage": {"input_tokens": 100, "output_tokens": 50}}),
        ),
        Err((status, message)) => mock::json(
            status,
            &json!({"type": "error", "error": {"type": "api_error", "message": message}}),
        ),
    }
}

/// The summarizer's answer to a chat-completions-shaped call: the content
/// and finish reason, or an HTTP error status and message.
async fn summary_reply(
    state: &LlmState,
    body: Value,
) -> Result<(String, &'static str), (StatusCode, &'static str)> {
    state.summarizer_requests.lock().unwrap().push(body.clone());
    let _in_flight = InFlight::enter(state);
    let delay = state.summarizer_delay_ms.load(Ordering::Relaxed);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(u64::from(delay))).await;
    }
    if state.reject_schema.load(Ordering::Relaxed)
        && body
            .pointer("/response_format/type")
            .and_then(Value::as_str)
            == Some("json_schema")
    {
        return Err((
            StatusCode::BAD_REQUEST,
            "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.",
        ));
    }
    let next = state
        .script
        .lock()
        .unwrap()
        .pop_front()
        .or_else(|| state.default_answer.lock().unwrap().clone())
        .unwrap_or(Sum::Good);
    let prompt = body
        .pointer("/messages/1/content")
        .and_then(Value::as_str)
        .unwrap_or("");
    let summary = json!({
        "summary": "The user and assistant worked through numbered steps.",
        "facts": [ranges(&tags(prompt))],
        "goals": ["finish the steps"], "decisions": [], "open_items": [], "artifacts": [],
    })
    .to_string();
    Ok(match next {
        Sum::Good => (summary, "stop"),
        Sum::Lossy => (LOSSY_SUMMARY.to_string(), "stop"),
        Sum::Raw(content) => (content, "stop"),
        Sum::Cut(content) => (content, "length"),
        Sum::Fenced => (
            format!("Here is the summary:\n```json\n{summary}\n```\nAnything else?"),
            "stop",
        ),
        Sum::Garbage => (
            "I am sorry, I cannot summarize this conversation.".to_string(),
            "stop",
        ),
        Sum::Status(code) => {
            return Err((
                StatusCode::from_u16(code).unwrap(),
                "mock summarizer failure",
            ));
        }
    })
}

/// Every item the client sent is in the view verbatim, in order, or, when
/// absent, every tag it carries is in the summary; the view holds nothing
/// else but foldgate's own items.
pub fn assert_covers(sent: &[Value], view: &[Value], summary: &str, own: impl Fn(&Value) -> bool) {
    let summary_tags = tags(summary);
    let mut next = 0;
    let mut verbatim = BTreeSet::new();
    for item in view {
        if let Some(pos) = sent[next..].iter().position(|s| s == item) {
            verbatim.insert(next + pos);
            next += pos + 1;
        } else {
            assert!(
                own(item),
                "view has an item the client did not send, or out of order: {item}"
            );
        }
    }
    for (i, item) in sent
        .iter()
        .enumerate()
        .filter(|(i, _)| !verbatim.contains(i))
    {
        let carried = tags(&item.to_string());
        assert!(
            !carried.is_empty() && carried.is_subset(&summary_tags),
            "item {i} ({item}) is neither in the view nor in its summary"
        );
    }
}

/// Every tag in `text`: `[m12]` singles and `[m3..m9]` ranges.
pub fn tags(text: &str) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("[m") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(']') else { break };
        let inner = &rest[..end];
        if let Some((a, b)) = inner.split_once("..m") {
            if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                out.extend(a..=b);
            }
        } else if let Ok(n) = inner.parse::<u32>() {
            out.insert(n);
        }
    }
    out
}

/// Compresses tags into `[mA..mB]` ranges.
pub fn ranges(tags: &BTreeSet<u32>) -> String {
    let mut out = String::new();
    let mut iter = tags.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end = iter.next().unwrap();
        }
        out.push_str(&format!("[m{start}..m{end}]"));
    }
    out
}

/// Text of a message's content (string or text parts).
pub fn content_text(m: &Value) -> String {
    match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Checks one forwarded view against the messages the client sent: every
/// client tag is either in a verbatim message or in the summary message,
/// tool pairs are intact, and order is kept.
pub fn assert_view_covers(client: &[Value], view: &[Value]) {
    let is_summary = |m: &Value| content_text(m).contains(foldgate::fold::summary::HEADING_PREFIX);
    let summary_tags: BTreeSet<u32> = view
        .iter()
        .filter(|m| is_summary(m))
        .flat_map(|m| tags(&content_text(m)))
        .collect();
    // Verbatim messages: those equal to a client message, in client order.
    let mut next = 0;
    let mut verbatim = BTreeSet::new();
    // foldgate's injected recall block (`recall = "auto"` on a request
    // without tools, or `"inject"`) is its own, like the summary.
    let is_recalled = |m: &Value| content_text(m).starts_with("[foldgate] Recalled from earlier");
    for m in view
        .iter()
        .filter(|m| (!is_summary(m) || client.contains(m)) && !is_recalled(m))
    {
        if let Some(pos) = client[next..].iter().position(|c| c == m) {
            verbatim.insert(next + pos);
            next += pos + 1;
        } else if content_text(m) != foldgate::fold::ACK_TEXT {
            panic!("view has a message the client did not send, or out of order: {m}");
        }
    }
    for (i, m) in client.iter().enumerate() {
        if verbatim.contains(&i) {
            continue;
        }
        let own = tags(&content_text(m));
        assert!(
            !own.is_empty() && own.is_subset(&summary_tags),
            "client message {i} ({m}) is neither in the view nor in its summary ({summary_tags:?})"
        );
    }
    assert_tool_pairs(view);
}

/// Every tool result in a view follows its call, and every call has its
/// result before the next message of another kind.
pub fn assert_tool_pairs(view: &[Value]) {
    let mut open: Vec<String> = Vec::new();
    for m in view {
        match m["role"].as_str() {
            Some("tool") => {
                let id = m["tool_call_id"].as_str().unwrap_or("");
                let at = open
                    .iter()
                    .position(|o| o == id)
                    .unwrap_or_else(|| panic!("tool result {id} without its call in the view"));
                open.remove(at);
            }
            _ => {
                assert!(
                    open.is_empty(),
                    "tool calls {open:?} lack results before {m}"
                );
                for call in m["tool_calls"].as_array().into_iter().flatten() {
                    open.push(call["id"].as_str().unwrap_or("").to_string());
                }
            }
        }
    }
}
