//! Recall that fits: a recall round's excerpts are bounded by the room the
//! window has left (window − the request so far − the output reserve − a
//! margin). Through the real server, against a scripted model that calls
//! `foldgate_recall` when asked about a fact it cannot see, in a 4k window
//! whose view is near the trigger, with ~8 KB of archived matches: every
//! request the upstream sees fits the window, counted with foldgate's own
//! token counter, and the client still gets the fact.

use crate::common;

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

/// What the scripted model saw: each request and its estimated tokens
/// plus its output reserve.
#[derive(Default)]
struct Seen {
    requests: Vec<Value>,
    /// `estimate + max_tokens` of each request.
    needs: Vec<u32>,
}

struct Upstream {
    mock: Mock,
    seen: Arc<Mutex<Seen>>,
}

impl Upstream {
    async fn start() -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let state = seen.clone();
        let counter = Arc::new(TokenCounter::new(&Config::default()));
        let mock = Mock::start(move |r: Recorded| {
            let (state, counter) = (state.clone(), counter.clone());
            async move { answer(&state, &counter, &r.json()) }
        })
        .await;
        Self { mock, seen }
    }

    fn config(&self) -> String {
        format!(
            "[providers.mock]\nbase_url = \"{}/v1\"\n\
             [models.\"tiny-*\"]\ncontext_window = {WINDOW}\n\
             [policy]\nreset_ratio = 0.7\nmode = \"inline\"\n\
             [summarizer]\nmax_summary_tokens = 300\nretries = 0\ntimeout = \"5s\"\n\
             [archive]\nrecall = \"tool\"\n",
            self.mock.url
        )
    }

    fn seen(&self) -> (Vec<Value>, Vec<u32>) {
        let s = self.seen.lock().unwrap();
        (s.requests.clone(), s.needs.clone())
    }
}

/// The model: a summarizer call gets a summary that keeps no fact; a chat
/// request that offers the tool, asks the question and shows neither the
/// fact nor a recall result gets a recall call; anything else an answer
/// from what the request shows. Usage reports foldgate's own estimate, so
/// calibration stays at 1.
fn answer(
    seen: &Mutex<Seen>,
    counter: &TokenCounter,
    body: &Value,
) -> Response<foldgate::body::Body> {
    if body.pointer("/messages/0/content").and_then(Value::as_str) == Some(SYSTEM_PROMPT) {
        return mock::json(
            StatusCode::OK,
            &json!({"choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": LOSSY_SUMMARY}}]}),
        );
    }
    let estimate = counter.estimate("tiny-model", body.as_object().unwrap());
    let reserve = body["max_tokens"].as_u64().unwrap() as u32;
    {
        let mut s = seen.lock().unwrap();
        s.requests.push(body.clone());
        s.needs.push(estimate.input_tokens + reserve);
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let sees_fact = body["messages"].to_string().contains("teal");
    let answered = messages.iter().any(|m| m["role"] == "tool");
    let offered = body["tools"].to_string().contains("foldgate_recall");
    let usage = json!({"prompt_tokens": estimate.input_tokens, "completion_tokens": 7,
                       "total_tokens": estimate.input_tokens + 7});
    let mut message = json!({"role": "assistant"});
    let finish = if offered && !sees_fact && !answered {
        message["content"] = Value::Null;
        message["tool_calls"] = json!([{"id": "call_r", "type": "function",
            "function": {"name": "foldgate_recall", "arguments": "{\"query\": \"favourite colour\"}"}}]);
        "tool_calls"
    } else {
        message["content"] = json!(if sees_fact {
            "The favourite colour is teal."
        } else {
            "I cannot see that."
        });
        "stop"
    };
    mock::json(
        StatusCode::OK,
        &json!({"id": "chatcmpl-r", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}),
    )
}

/// A conversation that folds on its first request: the fact, then ~8 KB
/// of survey logs whose every line matches the recall query (the rarer
/// word is the fact's alone, so the fact ranks first), then short turns,
/// then the question.
fn conversation() -> Vec<Value> {
    let mut m = vec![json!({"role": "system", "content": "You are a careful assistant."})];
    m.push(json!({"role": "user", "content": format!("note that {FACT}")}));
    m.push(json!({"role": "assistant", "content": "noted"}));
    // Short turns, so `colour` is in fewer than a third of the archived
    // messages (a word in more is too common to search by).
    for i in 0..12 {
        m.push(json!({"role": "user", "content": format!("check {i}")}));
        m.push(json!({"role": "assistant", "content": "fine"}));
    }
    let words = [
        "red", "blue", "green", "amber", "violet", "ochre", "umber", "cyan",
    ];
    for part in 0..5 {
        let lines: Vec<String> = (0..28)
            .map(|i| {
                format!(
                    "survey answer: the colour of the panel was {} then {}",
                    words[(i + part) % 8],
                    words[(i * 3 + part) % 8]
                )
            })
            .collect();
        m.push(json!({"role": "user", "content": format!("survey log:\n{}", lines.join("\n"))}));
        m.push(json!({"role": "assistant", "content": "logged"}));
    }
    for i in 0..60 {
        m.push(json!({"role": "user", "content": format!("question {i}: how does the parser treat the next token in this case?")}));
        m.push(json!({"role": "assistant", "content": format!("answer {i}: it reads the token, checks the table and moves on.")}));
    }
    m.push(json!({"role": "user", "content": QUESTION}));
    m
}

async fn ask(fg: &Foldgate, max_tokens: u32) -> Reply {
    post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[
            ("x-conversation-id", "room"),
            ("authorization", "Bearer sk-tenant-a"),
        ],
        &json!({"model": "tiny-model", "max_tokens": max_tokens, "messages": conversation()}),
    )
    .await
}

#[tokio::test]
async fn a_recall_round_is_shortened_to_the_room_left_and_still_finds_the_fact() {
    let upstream = Upstream::start().await;
    let fg = Foldgate::start(&upstream.config()).await;
    let reply = ask(&fg, 300).await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    let view = reply.tokens_out();
    assert!(
        view > WINDOW * 6 / 10,
        "the view is near the trigger: {view} tokens"
    );
    assert_eq!(
        reply.json()["choices"][0]["message"]["content"],
        "The favourite colour is teal."
    );
    let (requests, needs) = upstream.seen();
    assert_eq!(requests.len(), 2, "one recall round");
    for need in &needs {
        assert!(
            *need <= WINDOW,
            "a request needs {need} of {WINDOW} tokens: {needs:?}"
        );
    }
    let result = requests[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(result["role"], "tool");
    let text = content_text(&result);
    assert!(text.contains(FACT), "the best hit comes first: {text}");
    assert!(
        text.len() < 2000 * 4,
        "shortened below recall_tokens ({} bytes)",
        text.len()
    );
    let metrics = fg.metrics().await;
    assert_eq!(metric(&metrics, "foldgate_recall_shortened_total"), 1.0);
    assert_eq!(metric(&metrics, "foldgate_recall_refused_total"), 0.0);
}

#[tokio::test]
async fn a_recall_round_without_room_is_answered_no_room() {
    let upstream = Upstream::start().await;
    let fg = Foldgate::start(&upstream.config()).await;
    // The first request folds; the second reuses the fold and leaves the
    // window no room beyond its own output reserve.
    let first = ask(&fg, 300).await;
    first.assert_ok();
    let view = first.tokens_out();
    let reserve = WINDOW - view - WINDOW / 20 - 10;
    let reply = ask(&fg, reserve).await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "reused");
    assert_eq!(
        reply.json()["choices"][0]["message"]["content"],
        "I cannot see that."
    );
    let (requests, needs) = upstream.seen();
    assert_eq!(requests.len(), 4, "two requests, one recall round each");
    let result = requests[3]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let text = content_text(&result);
    assert!(text.starts_with("No room is left"), "{text}");
    assert!(!text.contains('\n'), "one line: {text}");
    assert!(needs[3] <= WINDOW, "{needs:?}");
    let metrics = fg.metrics().await;
    assert_eq!(metric(&metrics, "foldgate_recall_refused_total"), 1.0);
}
