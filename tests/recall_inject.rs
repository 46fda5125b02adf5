//! Injected recall, for models that do not call tools: on a folded
//! request, foldgate searches the archive with the last user message and
//! places the excerpts that are not in the view, in one marked block,
//! right before that message, on chat completions, Anthropic Messages and
//! Responses. Through the real server, against a model that never calls
//! a tool and answers only from what its request shows, and a summarizer
//! that keeps no fact.

use crate::common;

use common::convo::Convo;
use common::llm::{LOSSY_SUMMARY, content_text};
use common::mock::{self, Mock, Recorded};
use common::{Foldgate, Reply, metric, post_json};
use foldgate::config::Config;
use foldgate::summarize::prompt::SYSTEM_PROMPT;
use foldgate::tokens::TokenCounter;
use http::{Response, StatusCode};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

const WINDOW: u32 = 4000;
const FACT: &str = "the favourite colour of the customer is teal";
const QUESTION: &str = "what is the favourite colour of the customer?";
/// How the block starts (`foldgate::pipeline` keeps it private to the crate).
const HEADING: &str = "[foldgate] Recalled from earlier in this conversation";

struct Upstream {
    mock: Mock,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl Upstream {
    async fn start() -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let state = seen.clone();
        let mock = Mock::start(move |r: Recorded| {
            let state = state.clone();
            async move { answer(&state, &r.uri, &r.json()) }
        })
        .await;
        Self { mock, seen }
    }

    fn config(&self, extra: &str) -> String {
        format!(
            "{}\
             [models.\"tiny-*\"]\ncontext_window = {WINDOW}\n{extra}\n\
             [policy]\nreset_ratio = 0.45\nmode = \"inline\"\n\
             [summarizer]\nprovider = \"mock\"\nmax_summary_tokens = 400\nretries = 0\ntimeout = \"5s\"\n",
            crate::common::providers(&self.mock.url)
        )
    }

    fn last(&self) -> Value {
        self.seen.lock().unwrap().last().cloned().unwrap()
    }
}

/// A model that never calls a tool: it answers from what the request
/// shows, in each API's shape (Anthropic's role rules checked first).
fn answer(seen: &Mutex<Vec<Value>>, uri: &str, body: &Value) -> Response<foldgate::body::Body> {
    if body.pointer("/messages/0/content").and_then(Value::as_str) == Some(SYSTEM_PROMPT) {
        return mock::json(
            StatusCode::OK,
            &json!({"choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": LOSSY_SUMMARY}}]}),
        );
    }
    seen.lock().unwrap().push(body.clone());
    let text = if body.to_string().contains("teal") {
        "The favourite colour is teal."
    } else {
        "I cannot see that."
    };
    if uri.ends_with("/messages") {
        if let Some(violation) = common::agents::anthropic_violation(body) {
            return mock::json(
                StatusCode::BAD_REQUEST,
                &json!({"type": "error", "error": {"type": "invalid_request_error", "message": violation}}),
            );
        }
        return mock::json(
            StatusCode::OK,
            &json!({"id": "msg_i", "type": "message", "role": "assistant", "model": body["model"],
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}),
        );
    }
    if uri.ends_with("/responses") {
        return mock::json(
            StatusCode::OK,
            &json!({"id": "resp_i", "object": "response", "status": "completed", "model": body["model"],
                "output": [{"type": "message", "id": "msg_i", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}]}),
        );
    }
    mock::json(
        StatusCode::OK,
        &json!({"id": "chatcmpl-i", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": text}}]}),
    )
}

/// A conversation that folds on its first request: the fact in its first
/// user message (folded), `tail` after the short turns, then `question`.
fn conversation(tail: &[Value], question: &str) -> Vec<Value> {
    let mut convo = Convo::with_turns(0);
    convo
        .messages
        .push(json!({"role": "user", "content": format!("note that {FACT}")}));
    convo.assistant("noted");
    for i in 0..60 {
        convo
            .user(&format!("question {i}"))
            .assistant(&format!("answer {i}"));
    }
    convo.messages.extend(tail.iter().cloned());
    convo
        .messages
        .push(json!({"role": "user", "content": question}));
    convo.messages
}

/// `messages` with ~8 KB of survey logs after the fact, every line
/// matching two of the question's three words.
fn with_logs(mut messages: Vec<Value>) -> Vec<Value> {
    let words = [
        "red", "blue", "green", "amber", "violet", "ochre", "umber", "cyan",
    ];
    for part in 0..5 {
        let lines: Vec<String> = (0..28)
            .map(|i| {
                let (a, b) = (words[(i + part) % 8], words[(i * 3 + part) % 8]);
                format!("survey: a favourite colour of the panel was {a} then {b}")
            })
            .collect();
        let log = json!({"role": "user", "content": format!("survey log:\n{}", lines.join("\n"))});
        messages.insert(3, json!({"role": "assistant", "content": "logged"}));
        messages.insert(3, log);
    }
    messages
}

/// The API's route and request body for `messages` (a system prompt first).
fn request(api: &str, messages: &[Value], max_tokens: u32) -> (&'static str, Value) {
    let system = messages[0]["content"].clone();
    let rest = &messages[1..];
    match api {
        "anthropic" => (
            "/v1/messages",
            json!({"model": "tiny-model", "max_tokens": max_tokens, "system": system, "messages": rest}),
        ),
        "responses" => (
            "/v1/responses",
            json!({"model": "tiny-model", "max_output_tokens": max_tokens, "instructions": system,
                   "input": rest, "store": false}),
        ),
        _ => (
            "/v1/chat/completions",
            json!({"model": "tiny-model", "max_tokens": max_tokens, "messages": messages}),
        ),
    }
}

async fn ask(
    fg: &Foldgate,
    api: &str,
    conversation: &str,
    messages: &[Value],
    max_tokens: u32,
) -> Reply {
    let (path, body) = request(api, messages, max_tokens);
    let reply = post_json(
        &format!("{}{path}", fg.url),
        &[
            ("x-conversation-id", conversation),
            ("authorization", "Bearer sk-tenant-a"),
        ],
        &body,
    )
    .await;
    reply.assert_ok();
    reply
}

/// The answer's text in any of the three APIs.
fn answer_text(reply: &Reply) -> String {
    let v = reply.json();
    [
        v.pointer("/choices/0/message/content"),
        v.pointer("/content/0/text"),
        v.pointer("/output/0/content/0/text"),
    ]
    .into_iter()
    .flatten()
    .find_map(Value::as_str)
    .unwrap_or_default()
    .to_string()
}

/// The forwarded conversation: `messages`, or Responses' `input`.
fn forwarded(body: &Value) -> Vec<Value> {
    body.get("messages")
        .or_else(|| body.get("input"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap()
}

fn counter() -> TokenCounter {
    TokenCounter::new(&Config::default())
}

fn text_tokens(text: &str) -> u32 {
    counter().message_tokens("tiny-model", &json!({"role": "user", "content": text}))
}

#[tokio::test]
async fn a_folded_fact_is_injected_before_the_last_user_message_on_every_api() {
    let upstream = Upstream::start().await;
    let fg =
        Foldgate::start(&upstream.config("[archive]\nrecall = \"inject\"\ninject_tokens = 120\n"))
            .await;
    let messages = conversation(&[], QUESTION);
    for api in ["chat", "anthropic", "responses"] {
        let reply = ask(&fg, api, &format!("inject-{api}"), &messages, 200).await;
        assert_eq!(reply.header("x-foldgate-fold"), "new", "{api}");
        assert_eq!(reply.header("x-foldgate-recall-injected"), "1", "{api}");
        assert_eq!(
            answer_text(&reply),
            "The favourite colour is teal.",
            "{api}"
        );
        let sent = upstream.last();
        assert!(sent.get("tools").is_none(), "{api}: no tool offered");
        assert!(
            !sent.to_string().contains("foldgate_recall"),
            "{api}: the summary names no tool"
        );
        let items = forwarded(&sent);
        let last = items.last().unwrap();
        let block = if api == "anthropic" {
            // One user message: the block first, then the question, as sent.
            assert_eq!(
                last["content"][1],
                json!({"type": "text", "text": QUESTION})
            );
            assert_eq!(last["content"].as_array().unwrap().len(), 2);
            last["content"][0]["text"].as_str().unwrap().to_string()
        } else {
            assert_eq!(last, &json!({"role": "user", "content": QUESTION}), "{api}");
            let block = &items[items.len() - 2];
            assert_eq!(block["role"], "user", "{api}");
            content_text(block)
        };
        assert!(block.starts_with(HEADING), "{api}: {block}");
        assert!(block.contains(FACT), "{api}: {block}");
        assert!(
            text_tokens(&block) <= 120 + 8,
            "{api}: bounded by inject_tokens: {block}"
        );
        // Nothing else of the client's changed: every other forwarded
        // message that is not foldgate's summary is one the client sent.
        let client: Vec<&Value> = messages.iter().collect();
        let others = items.iter().filter(|m| {
            let text = content_text(m);
            !text.starts_with(HEADING) && !text.contains("[foldgate] Summary")
        });
        for m in others {
            if api == "anthropic" && m == last {
                continue;
            }
            assert!(
                client
                    .iter()
                    .any(|c| c["content"] == m["content"] && c["role"] == m["role"]),
                "{api}: {m} is not the client's"
            );
        }
    }
    let metrics = fg.metrics().await;
    assert_eq!(metric(&metrics, "foldgate_recall_injections_total"), 3.0);
    assert_eq!(metric(&metrics, "foldgate_recall_offers_total"), 0.0);
}

#[tokio::test]
async fn nothing_is_injected_when_nothing_scores_or_the_hit_is_in_view() {
    let upstream = Upstream::start().await;
    let fg = Foldgate::start(&upstream.config("[archive]\nrecall = \"inject\"\n")).await;
    // A question the archive has nothing for.
    let reply = ask(
        &fg,
        "chat",
        "nothing",
        &conversation(&[], "how is the weather on mars today?"),
        200,
    )
    .await;
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    assert_eq!(reply.header("x-foldgate-recall-injected"), "");
    assert!(!upstream.last().to_string().contains(HEADING));
    // The fact is said again in the recent messages: it is in the view.
    let again = [
        json!({"role": "user", "content": format!("note that {FACT}")}),
        json!({"role": "assistant", "content": "noted again"}),
    ];
    let reply = ask(&fg, "chat", "again", &conversation(&again, QUESTION), 200).await;
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    assert_eq!(reply.header("x-foldgate-recall-injected"), "");
    assert!(!upstream.last().to_string().contains(HEADING));
    assert_eq!(answer_text(&reply), "The favourite colour is teal.");
    assert_eq!(
        metric(&fg.metrics().await, "foldgate_recall_injections_total"),
        0.0
    );
}

#[tokio::test]
async fn auto_injects_for_a_model_without_tools_and_beside_the_tool_on_a_chat_without_tools() {
    let upstream = Upstream::start().await;
    let toml = upstream.config(&format!(
        "tools = false\n[models.\"big-*\"]\ncontext_window = {WINDOW}\n"
    ));
    let fg = Foldgate::start(&toml).await;
    let messages = conversation(&[], QUESTION);
    let reply = ask(&fg, "chat", "auto-tiny", &messages, 200).await;
    assert_eq!(reply.header("x-foldgate-recall-injected"), "1");
    let sent = upstream.last();
    assert!(
        sent.get("tools").is_none(),
        "a model without tools gets no tool"
    );
    assert!(sent.to_string().contains(HEADING));

    // A model that calls tools: on a chat without tools of its own, the
    // tool and the block; in an agent loop (the client's tools), the tool
    // alone, so the loop's prefix stays as it was.
    let client_tool =
        json!([{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]);
    // A loop whose history holds a tool call and its result, without a
    // `tools` field, is an agent loop too.
    let mut called = messages.clone();
    let last = called.pop().unwrap();
    called.push(
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "ls", "arguments": "{}"}}]}),
    );
    called.push(json!({"role": "tool", "tool_call_id": "c1", "content": "README.md"}));
    called.push(last);
    for (conversation_id, tools, messages) in [
        ("auto-big", None, &messages),
        ("auto-big-agent", Some(client_tool), &messages),
        ("auto-big-calls", None, &called),
    ] {
        let (path, mut body) = request("chat", messages, 200);
        body["model"] = json!("big-model");
        if let Some(tools) = &tools {
            body["tools"] = tools.clone();
        }
        let reply = post_json(
            &format!("{}{path}", fg.url),
            &[
                ("x-conversation-id", conversation_id),
                ("authorization", "Bearer sk-tenant-a"),
            ],
            &body,
        )
        .await;
        reply.assert_ok();
        let sent = upstream.last();
        assert!(
            sent["tools"].to_string().contains("foldgate_recall"),
            "{conversation_id}: the tool is offered"
        );
        let injected = conversation_id == "auto-big";
        assert_eq!(
            reply.header("x-foldgate-recall-injected"),
            if injected { "1" } else { "" },
            "{conversation_id}"
        );
        assert_eq!(
            sent.to_string().contains(HEADING),
            injected,
            "{conversation_id}"
        );
    }
}

#[tokio::test]
async fn an_injection_is_bounded_by_the_room_left() {
    let upstream = Upstream::start().await;
    let fg =
        Foldgate::start(&upstream.config("[archive]\nrecall = \"inject\"\ninject_tokens = 2000\n"))
            .await;
    // Fold first without injecting, to learn the view's size.
    let first = ask(
        &fg,
        "chat",
        "room",
        &with_logs(conversation(&[], "how is the weather on mars today?")),
        200,
    )
    .await;
    let view = first.tokens_out();
    // Leave about 80 tokens beyond the reserve and the margin.
    let reserve = WINDOW - view - WINDOW / 20 - 80;
    let reply = ask(
        &fg,
        "chat",
        "room",
        &with_logs(conversation(&[], QUESTION)),
        reserve,
    )
    .await;
    assert_eq!(reply.header("x-foldgate-fold"), "reused");
    assert_ne!(reply.header("x-foldgate-recall-injected"), "");
    let sent = upstream.last();
    let items = forwarded(&sent);
    let block = content_text(&items[items.len() - 2]);
    assert!(block.contains(FACT), "{block}");
    assert!(
        block.contains("survey:"),
        "the logs match too, as room allows: {block}"
    );
    assert!(
        text_tokens(&block) <= 100,
        "{} tokens: {block}",
        text_tokens(&block)
    );
    let need = counter()
        .estimate("tiny-model", sent.as_object().unwrap())
        .input_tokens
        + reserve;
    assert!(need <= WINDOW, "the request needs {need} of {WINDOW}");
}
