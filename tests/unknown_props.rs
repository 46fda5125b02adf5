//! Unknown in, unchanged out, on all five APIs: random conversations that
//! hold items, parts, blocks and members of types no codec knows (and,
//! on Responses, Codex's `additional_tools`, `configuration_update`,
//! `compaction` and `compaction_trigger` items), sent turn by turn through
//! the real server with a window small enough to fold several times.
//! Every forwarded view must hold every unknown thing unchanged, in its
//! place (its item or message whole; on Gemini, whose codec joins adjacent
//! user turns, its content's parts in order), and be valid for the API
//! (tool calls paired with their results, a user turn first).
//!
//! The summarizer prompts are checked too: no placeholder where a client
//! sent text, and nothing of an unknown thing (tests/prompt_texts.rs
//! checks that every text a codec reads reaches the summarizer).

use crate::common::mock::{self, Mock, Recorded};
use crate::common::{Foldgate, post_json};
use crate::props_support;
use foldgate::summarize::prompt::SYSTEM_PROMPT;
use http::StatusCode;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The model's window: a few steps of the generated sizes fill it.
const WINDOW: u32 = 2000;

/// One step of a conversation.
#[derive(Debug, Clone)]
enum Step {
    /// A user turn of so many words.
    User(usize),
    /// An assistant answer.
    Answer(usize),
    /// A tool call and its result of so many words.
    Call(usize),
    /// Something no codec knows, placed so.
    Unknown(Place),
}

/// Where an unknown thing sits.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// On its own: an item, or a message of nothing else.
    Alone,
    /// Beside the text of a user turn.
    InUser,
    /// Beside the text of an answer.
    InAnswer,
    /// Beside a tool call (the call's message cannot leave its result).
    InCall,
}

fn step() -> impl Strategy<Value = Step> {
    let words = || 10usize..60;
    let place = prop_oneof![
        Just(Place::Alone),
        Just(Place::InUser),
        Just(Place::InAnswer),
        Just(Place::InCall)
    ];
    prop_oneof![
        3 => words().prop_map(Step::User),
        2 => words().prop_map(Step::Answer),
        4 => words().prop_map(Step::Call),
        2 => place.prop_map(Step::Unknown),
    ]
}

fn conversation() -> impl Strategy<Value = Vec<Step>> {
    (10usize..40, prop::collection::vec(step(), 16..34)).prop_map(|(first, mut steps)| {
        steps.insert(0, Step::User(first));
        steps
    })
}

/// Text of `words` words, each unique to step `i` (`w{i}x{k}`), so a test
/// can find it in a summarizer's prompt.
fn text(i: usize, words: usize) -> String {
    (0..words)
        .map(|k| format!("w{i}x{k}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The five APIs as the test drives them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Api {
    Chat,
    Responses,
    Anthropic,
    Gemini,
    Ollama,
}

/// A conversation of one API: its items, and the unknown things to find.
struct Rendered {
    items: Vec<Value>,
    /// Each unknown thing: the item (or message) that holds it.
    unknown: Vec<Value>,
}

impl Api {
    pub(crate) fn path(self) -> &'static str {
        match self {
            Self::Chat => "/v1/chat/completions",
            Self::Responses => "/v1/responses",
            Self::Anthropic => "/v1/messages",
            Self::Gemini => "/v1beta/models/unk-1:generateContent",
            Self::Ollama => "/api/chat",
        }
    }

    /// The conversation field of a body.
    fn field(self) -> &'static str {
        match self {
            Self::Chat | Self::Anthropic | Self::Ollama => "messages",
            Self::Responses => "input",
            Self::Gemini => "contents",
        }
    }

    pub(crate) fn body(self, items: &[Value]) -> Value {
        let items = Value::Array(items.to_vec());
        match self {
            Self::Chat | Self::Ollama => {
                let mut messages = vec![json!({"role": "system", "content": "You are terse."})];
                messages.extend(items.as_array().unwrap().iter().cloned());
                let mut body = json!({"model": "unk-1", "messages": messages});
                if self == Self::Ollama {
                    body["stream"] = json!(false);
                }
                body
            }
            Self::Responses => {
                json!({"model": "unk-1", "instructions": "You are terse.", "input": items})
            }
            Self::Anthropic => {
                json!({"model": "unk-1", "max_tokens": 100, "system": "You are terse.", "messages": items})
            }
            Self::Gemini => json!({
                "systemInstruction": {"parts": [{"text": "You are terse."}]},
                "contents": items,
            }),
        }
    }

    pub(crate) fn user(self, text: &str) -> Value {
        match self {
            Self::Chat | Self::Anthropic | Self::Ollama => json!({"role": "user", "content": text}),
            Self::Responses => {
                json!({"role": "user", "content": [{"type": "input_text", "text": text}]})
            }
            Self::Gemini => json!({"role": "user", "parts": [{"text": text}]}),
        }
    }

    fn answer(self, text: &str) -> Value {
        match self {
            Self::Chat | Self::Ollama => json!({"role": "assistant", "content": text}),
            Self::Anthropic => {
                json!({"role": "assistant", "content": [{"type": "text", "text": text}]})
            }
            Self::Responses => json!({"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}),
            Self::Gemini => json!({"role": "model", "parts": [{"text": text}]}),
        }
    }

    /// A tool call and its result.
    fn call(self, i: usize, text: &str) -> [Value; 2] {
        let id = format!("call_{i}");
        match self {
            Self::Chat => [
                json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
                    "function": {"name": "shell", "arguments": format!("{{\"cmd\":\"run {i}\"}}")}}]}),
                json!({"role": "tool", "tool_call_id": id, "content": text}),
            ],
            Self::Responses => [
                json!({"type": "function_call", "call_id": id, "name": "shell",
                    "arguments": format!("{{\"cmd\":\"run {i}\"}}")}),
                json!({"type": "function_call_output", "call_id": id, "output": text}),
            ],
            Self::Anthropic => [
                json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "shell",
                    "input": {"cmd": format!("run {i}")}}]}),
                json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": text}]}),
            ],
            Self::Gemini => [
                json!({"role": "model", "parts": [{"functionCall": {"name": "shell", "args": {"cmd": format!("run {i}")}}}]}),
                json!({"role": "user", "parts": [{"functionResponse": {"name": "shell", "response": {"output": text}}}]}),
            ],
            Self::Ollama => [
                json!({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "shell",
                    "arguments": {"cmd": format!("run {i}")}}}]}),
                json!({"role": "tool", "tool_name": "shell", "content": text}),
            ],
        }
    }

    /// A part (or, for Ollama, a member) of a type nobody knows.
    fn unknown_part(self, i: usize) -> (String, Value) {
        let payload = json!({"seed": i, "blob": format!("opaque-{i}")});
        match self {
            Self::Gemini => (format!("hologram{i}Data"), payload),
            Self::Ollama => (format!("hologram_{i}"), payload),
            _ => (
                "part".into(),
                json!({"type": format!("hologram_{i}"), "hologram": payload}),
            ),
        }
    }

    /// `message` with an unknown part beside its content.
    fn with_unknown(self, mut message: Value, i: usize) -> Value {
        let (name, part) = self.unknown_part(i);
        match self {
            Self::Ollama => message[name] = part,
            Self::Gemini => {
                let part = json!({name: part});
                message["parts"].as_array_mut().unwrap().insert(0, part);
            }
            _ => match message.get_mut("content") {
                Some(Value::Array(parts)) => parts.insert(0, part),
                Some(Value::String(s)) => {
                    let text = json!({"type": "text", "text": s.clone()});
                    message["content"] = json!([text, part]);
                }
                _ => message["content"] = json!([part]),
            },
        }
        message
    }

    /// Steps as this API's items.
    fn render(self, steps: &[Step]) -> Rendered {
        let mut items = Vec::new();
        let mut unknown = Vec::new();
        if self == Self::Responses {
            // Codex 0.171's head: tools as an item, developer messages, a
            // configuration update.
            let head = [
                json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox: workspace-write."}]}),
                json!({"type": "additional_tools", "role": "developer", "tools": [{"type": "function", "name": "shell",
                    "description": "Runs a command.", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]}),
                json!({"type": "configuration_update", "model": "unk-1", "reasoning_effort": "medium"}),
            ];
            unknown.extend(head[1..].iter().cloned());
            items.extend(head);
        }
        for (i, step) in steps.iter().enumerate() {
            match *step {
                Step::User(words) => items.push(self.user(&text(i, words))),
                Step::Answer(words) => items.push(self.answer(&text(i, words))),
                Step::Call(words) => items.extend(self.call(i, &text(i, words))),
                Step::Unknown(place) => {
                    let made = match (self, place) {
                        (Self::Responses, Place::Alone | Place::InCall) => {
                            if i % 2 == 0 {
                                json!({"type": "compaction", "encrypted_content": format!("gAAAA{i}")})
                            } else {
                                json!({"type": format!("mystery_item_{i}"), "payload": {"n": i}})
                            }
                        }
                        (_, Place::Alone) => {
                            let empty = match self {
                                Self::Gemini => json!({"role": "user", "parts": []}),
                                Self::Ollama => json!({"role": "user", "content": ""}),
                                _ => json!({"role": "user", "content": []}),
                            };
                            self.with_unknown(empty, i)
                        }
                        (_, Place::InUser) => self.with_unknown(self.user(&text(i, 30)), i),
                        (_, Place::InAnswer) => self.with_unknown(self.answer(&text(i, 30)), i),
                        (_, Place::InCall) => {
                            let [call, result] = self.call(i, &text(i, 40));
                            let call = self.with_unknown(call, i);
                            unknown.push(call.clone());
                            items.push(call);
                            items.push(result);
                            continue;
                        }
                    };
                    unknown.push(made.clone());
                    items.push(made);
                }
            }
        }
        if self == Self::Responses {
            let trigger = json!({"type": "compaction_trigger"});
            unknown.push(trigger.clone());
            items.push(trigger);
        }
        Rendered { items, unknown }
    }
}

/// What the mock upstream saw: forwarded bodies and summarizer prompts.
#[derive(Default)]
struct Seen {
    forwarded: Mutex<Vec<Value>>,
    prompts: Mutex<Vec<String>>,
}

const SUMMARY: &str = r#"{"summary":"Work went on.","facts":[],"goals":[],"decisions":[],"completed":[],"open_items":[],"artifacts":[]}"#;

fn answer(seen: &Seen, r: &Recorded) -> http::Response<foldgate::body::Body> {
    if r.method != http::Method::POST {
        return mock::json(StatusCode::NOT_FOUND, &json!({"error": {"message": "no"}}));
    }
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    let ok = |v: Value| mock::json(StatusCode::OK, &v);
    if body.pointer("/messages/0/content").and_then(Value::as_str) == Some(SYSTEM_PROMPT) {
        let prompt = body
            .pointer("/messages/1/content")
            .and_then(Value::as_str)
            .unwrap_or("");
        seen.prompts.lock().unwrap().push(prompt.to_string());
        return ok(
            json!({"id": "s", "object": "chat.completion", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": SUMMARY}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}),
        );
    }
    seen.forwarded.lock().unwrap().push(body.clone());
    let path = r.uri.as_str();
    if path.ends_with("/responses") {
        ok(
            json!({"id": "resp_1", "object": "response", "status": "completed", "model": "unk-1",
            "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "ok", "annotations": []}]}],
            "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}),
        )
    } else if path.ends_with("/messages") {
        ok(
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "unk-1",
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1}}),
        )
    } else if path.contains(":generateContent") {
        ok(
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2}}),
        )
    } else if path.ends_with("/api/chat") {
        ok(
            json!({"model": "unk-1", "message": {"role": "assistant", "content": "ok"}, "done": true,
            "prompt_eval_count": 1, "eval_count": 1}),
        )
    } else {
        ok(
            json!({"id": "c", "object": "chat.completion", "model": "unk-1", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}),
        )
    }
}

/// Whether `view` holds `unknown` unchanged, in its place.
fn holds(api: Api, view: &[Value], unknown: &Value) -> bool {
    if api != Api::Gemini {
        return view.contains(unknown);
    }
    let parts = unknown["parts"].as_array().unwrap();
    view.iter()
        .filter(|c| c["role"] == unknown["role"])
        .filter_map(|c| c["parts"].as_array())
        .any(|ps| {
            ps.windows(parts.len().max(1))
                .any(|w| w == parts.as_slice())
        })
}

/// The API's rule a view breaks, if any: a tool result without its call
/// right before it, a call whose result is missing, or no user turn first.
fn violation(api: Api, view: &[Value]) -> Option<String> {
    match api {
        Api::Responses => {
            let mut open: Vec<&str> = Vec::new();
            for (i, item) in view.iter().enumerate() {
                match item["type"].as_str() {
                    Some("function_call") => open.push(item["call_id"].as_str().unwrap()),
                    Some("function_call_output") => {
                        let id = item["call_id"].as_str().unwrap();
                        let Some(at) = open.iter().position(|c| *c == id) else {
                            return Some(format!("input[{i}]: output of {id} without its call"));
                        };
                        open.remove(at);
                    }
                    _ => {}
                }
            }
            (!open.is_empty()).then(|| format!("calls without output: {open:?}"))
        }
        Api::Chat | Api::Ollama => {
            let pending = |m: &Value| m["tool_calls"].as_array().map_or(0, Vec::len);
            let mut owed = 0;
            for (i, m) in view.iter().enumerate() {
                if m["role"] == "tool" {
                    if owed == 0 {
                        return Some(format!("messages[{i}]: tool result without a call"));
                    }
                    owed -= 1;
                } else if owed > 0 {
                    return Some(format!("messages[{i}]: {owed} calls left unanswered"));
                } else {
                    owed = pending(m);
                }
            }
            None
        }
        Api::Anthropic | Api::Gemini => {
            let (calls, results) = match api {
                Api::Anthropic => ("tool_use", "tool_result"),
                _ => ("functionCall", "functionResponse"),
            };
            let blocks = |m: &Value, kind: &str| {
                let parts = m.get("content").or_else(|| m.get("parts"));
                parts.and_then(Value::as_array).map_or(0, |ps| {
                    ps.iter()
                        .filter(|p| p["type"] == kind || p.get(kind).is_some())
                        .count()
                })
            };
            if view.first().is_some_and(|m| m["role"] != "user") {
                return Some("the first turn is not the user's".into());
            }
            for (i, m) in view.iter().enumerate() {
                let made = i.checked_sub(1).map_or(0, |j| blocks(&view[j], calls));
                if blocks(m, results) > 0 && made == 0 {
                    return Some(format!("[{i}]: results without calls right before"));
                }
                let answered = view.get(i + 1).map_or(usize::MAX, |n| blocks(n, results));
                if blocks(m, calls) > 0 && answered == 0 {
                    return Some(format!("[{i}]: calls without results right after"));
                }
            }
            None
        }
    }
}

/// Runs `cases` random conversations of `api` through one foldgate.
fn run(api: Api, cases: u32, seed: u64) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let seen = Arc::new(Seen::default());
    let (fg, _mock) = rt.block_on(async {
        let shared = seen.clone();
        let mock = Mock::start(move |r: Recorded| {
            let shared = shared.clone();
            async move { answer(&shared, &r) }
        })
        .await;
        let url = &mock.url;
        let toml = format!(
            "[providers.openai]\nbase_url = \"{url}/v1\"\n\
             [providers.anthropic]\nbase_url = \"{url}/v1\"\napi = \"anthropic\"\n\
             [providers.google]\nbase_url = \"{url}\"\napi = \"gemini\"\n\
             [providers.local]\nbase_url = \"{url}\"\napi = \"ollama\"\n\
             [models.\"unk-*\"]\ncontext_window = {WINDOW}\n\
             [summarizer]\nprovider = \"openai\"\nmodel = \"sum-1\"\nmax_summary_tokens = 300\n"
        );
        (Foldgate::start(&toml).await, mock)
    });
    let next = AtomicUsize::new(0);
    let folds = AtomicUsize::new(0);
    let mut runner = TestRunner::new(props_support::config(cases, seed));
    let result = runner.run(&conversation(), |steps| {
        let rendered = api.render(&steps);
        let id = format!("{api:?}-{}", next.fetch_add(1, Ordering::SeqCst));
        seen.forwarded.lock().unwrap().clear();
        for end in 1..=rendered.items.len() {
            // A client sends a call's output with the call.
            if rendered.items[end - 1]["type"] == "function_call" {
                continue;
            }
            let sent = &rendered.items[..end];
            let body = api.body(sent);
            let reply = rt.block_on(post_json(
                &format!("{}{}", fg.url, api.path()),
                &[("x-conversation-id", &id)],
                &body,
            ));
            prop_assert!(
                reply.status.is_success(),
                "{}: {}",
                reply.status,
                reply.text()
            );
            if reply.header("x-foldgate-fold") != "none" {
                folds.fetch_add(1, Ordering::SeqCst);
            }
            let forwarded = seen.forwarded.lock().unwrap().last().cloned().unwrap();
            let view = forwarded[api.field()].as_array().unwrap();
            for unknown in rendered.unknown.iter().filter(|u| sent.contains(u)) {
                prop_assert!(
                    holds(api, view, unknown),
                    "request {end}: {unknown} is not in the view {}",
                    serde_json::to_string_pretty(view).unwrap()
                );
            }
            if let Some(broken) = violation(api, view) {
                prop_assert!(
                    false,
                    "request {end}: {broken} in {}",
                    serde_json::to_string_pretty(view).unwrap()
                );
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{api:?}: {e}");
    }
    // Not vacuous: the conversations did fold.
    let folds = folds.load(Ordering::SeqCst);
    assert!(
        folds >= cases as usize,
        "{api:?}: only {folds} folded views"
    );
    // Everything a fold took reached the summarizer as text.
    let prompts = seen.prompts.lock().unwrap();
    assert!(!prompts.is_empty(), "{api:?}: no summarizer call");
    for prompt in prompts.iter() {
        for marker in [
            "[input_text]",
            "[output_text]",
            "[text]",
            "[refusal]",
            "[tool_result]",
        ] {
            assert!(
                !prompt.contains(marker),
                "{api:?}: {marker} in a summarizer prompt:\n{prompt}"
            );
        }
        assert!(
            !prompt.contains("hologram"),
            "{api:?}: an unknown part was summarized:\n{prompt}"
        );
        assert!(
            !prompt.contains("mystery_item"),
            "{api:?}: an unknown item was summarized:\n{prompt}"
        );
    }
    drop(fg);
}

#[test]
fn chat_keeps_what_it_does_not_know() {
    run(Api::Chat, 6, 51_01);
}

#[test]
fn responses_keeps_what_it_does_not_know() {
    run(Api::Responses, 6, 51_02);
}

#[test]
fn anthropic_keeps_what_it_does_not_know() {
    run(Api::Anthropic, 6, 51_03);
}

#[test]
fn gemini_keeps_what_it_does_not_know() {
    run(Api::Gemini, 6, 51_04);
}

#[test]
fn ollama_keeps_what_it_does_not_know() {
    run(Api::Ollama, 6, 51_05);
}
