//! One fold decision for both paths: a request the fast path reads (its
//! raw JSON) and the same request read by the decoder (a field named
//! twice, which the shallow reader declines) must be decided alike — the
//! same view forwarded, the same `x-foldgate-fold`, the same summaries
//! started (a background prefold included) — over generated conversations
//! on the chat and Anthropic APIs, under policies where each trigger,
//! the prefold and older-turn compression come into play.
//!
//! Two foldgates with one configuration, each before its own mock LLM:
//! `fast` gets the compact body, `full` the decoder's. Seeded for
//! reproducible CI; explore others with `PROPTEST_RNG_SEED=<u64>`.

use crate::common::llm::Llm;
use crate::common::mock::Recorded;
use crate::common::{Foldgate, Reply, send};
use crate::props_support;
use foldgate::summarize::prompt::SYSTEM_PROMPT;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use serde_json::{Value, json};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Models whose policies exercise the decision's parts: a small window in
/// background mode (token trigger, prefold), the same inline, the overflow
/// and safety triggers, and compression of tool results and answers.
const MODELS: [&str; 4] = ["bg-m", "in-m", "ov-m", "cp-m"];

fn config(llm: &Llm) -> String {
    format!(
        "{}\
         [models.\"bg-*\"]\ncontext_window = 5000\n\
         [models.\"in-*\"]\ncontext_window = 5000\nmode = \"inline\"\n\
         [models.\"ov-*\"]\ncontext_window = 60000\nmode = \"inline\"\noverflow_buffer = 6\nsafety_user_turns = 4\n\
         [models.\"cp-*\"]\ncontext_window = 60000\n\
         [models.\"cp-*\".compress]\nmin_tokens = 150\nafter_turns = 1\nbatch = 2\nassistant = true\n\
         [policy]\nreset_ratio = 0.45\n\
         [summarizer]\nmax_summary_tokens = 300\ntimeout = \"5s\"\n",
        crate::common::providers(llm.url())
    )
}

/// One user turn: the user's text, tool rounds (each output's length in
/// sentences) and the assistant's closing answer (its length).
#[derive(Debug, Clone)]
struct Turn {
    user: usize,
    tools: Vec<usize>,
    answer: usize,
}

#[derive(Debug, Clone)]
struct Case {
    anthropic: bool,
    model: &'static str,
    turns: Vec<Turn>,
    last_user: usize,
}

fn case() -> impl Strategy<Value = Case> {
    let sentences = prop_oneof![3 => 1usize..4, 1 => 20usize..60];
    let turn = (
        sentences.clone(),
        prop::collection::vec(sentences.clone(), 0..4),
        sentences.clone(),
    )
        .prop_map(|(user, tools, answer)| Turn {
            user,
            tools,
            answer,
        });
    (
        any::<bool>(),
        prop::sample::select(&MODELS[..]),
        prop::collection::vec(turn, 0..9),
        sentences,
    )
        .prop_map(|(anthropic, model, turns, last_user)| Case {
            anthropic,
            model,
            turns,
            last_user,
        })
}

fn text(tag: usize, sentences: usize) -> String {
    format!(
        "[m{tag}] {}",
        " the parser, the tokenizer and the cache were compared.".repeat(sentences)
    )
}

/// The case's route and body (`n`: the case's number, so each case is a
/// conversation of its own).
fn body(case: &Case, n: usize) -> (&'static str, Value) {
    let mut tag = 0;
    let mut next = |sentences: usize| {
        tag += 1;
        text(tag, sentences)
    };
    let mut ms = Vec::new();
    let first = format!("case {n}: fix the build");
    ms.push(json!({"role": "user", "content": first}));
    for (t, turn) in case.turns.iter().enumerate() {
        if t > 0 {
            ms.push(json!({"role": "user", "content": next(turn.user)}));
        }
        for (s, &len) in turn.tools.iter().enumerate() {
            let id = format!("call_{t}_{s}");
            if case.anthropic {
                ms.push(json!({"role": "assistant", "content": [
                    {"type": "tool_use", "id": id, "name": "bash", "input": {"cmd": format!("make {s}")}}]}));
                ms.push(json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": id, "content": next(len)}]}));
            } else {
                ms.push(json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": id, "type": "function", "function": {"name": "bash", "arguments": format!("{{\"cmd\":\"make {s}\"}}")}}]}));
                ms.push(json!({"role": "tool", "tool_call_id": id, "content": next(len)}));
            }
        }
        ms.push(json!({"role": "assistant", "content": next(turn.answer)}));
    }
    if !case.turns.is_empty() {
        ms.push(json!({"role": "user", "content": next(case.last_user)}));
    }
    let model = format!(
        "{}-{}",
        case.model,
        if case.anthropic { "claude" } else { "gpt" }
    );
    if case.anthropic {
        let body = json!({"model": model, "max_tokens": 100, "system": "You are an agent.", "messages": ms});
        ("/v1/messages", body)
    } else {
        ms.insert(0, json!({"role": "system", "content": "You are an agent."}));
        (
            "/v1/chat/completions",
            json!({"model": model, "messages": ms}),
        )
    }
}

async fn post(fg: &Foldgate, path: &str, body: String) -> Reply {
    let headers = [
        ("content-type", "application/json"),
        ("anthropic-version", "2023-06-01"),
    ];
    send(
        http::Method::POST,
        &format!("{}{path}", fg.url),
        &headers,
        body.into_bytes(),
    )
    .await
}

fn is_summarizer(body: &Value) -> bool {
    body.pointer("/messages/0/content").and_then(Value::as_str) == Some(SYSTEM_PROMPT)
        || body["system"] == SYSTEM_PROMPT
}

/// The last request the upstream got from a client (not the summarizer),
/// as JSON.
fn forwarded(received: &[Recorded]) -> Value {
    received
        .iter()
        .map(Recorded::json)
        .rfind(|b| !is_summarizer(b))
        .expect("a forwarded request")
}

/// One foldgate before its own mock.
struct Side {
    llm: Llm,
    fg: Foldgate,
}

impl Side {
    async fn start() -> Self {
        let llm = Llm::start().await;
        let fg = Foldgate::start(&config(&llm)).await;
        Self { llm, fg }
    }
}

/// Waits until both mocks have answered as many summarizer calls since
/// `before` (their counts then), that number unchanged for a while (a
/// background fold starts after the answer); the calls since.
async fn settled(fast: &Llm, full: &Llm, before: (usize, usize)) -> (usize, usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = (usize::MAX, usize::MAX);
    let mut since = Instant::now();
    loop {
        let now = (
            fast.summarizer_calls() - before.0,
            full.summarizer_calls() - before.1,
        );
        if now != seen {
            seen = now;
            since = Instant::now();
        }
        let quiet = since.elapsed() >= Duration::from_millis(300);
        if (quiet && now.0 == now.1) || Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn the_fast_path_and_the_full_path_decide_alike() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (fast, full) = rt.block_on(async { (Side::start().await, Side::start().await) });
    let mut runner = TestRunner::new(props_support::config(40, 39));
    // Each case its own conversation; how many changed the view.
    let (n, folds) = (Cell::new(0), Cell::new(0));
    let result = runner.run(&case(), |case| {
        n.set(n.get() + 1);
        let (path, body) = body(&case, n.get());
        // The same body twice, as long (the mock's usage follows the
        // length, and foldgate calibrates by it): spaced for the fast
        // path, with a field named twice for the decoder (the shallow
        // reader declines it; the decoder keeps the last value).
        let rest = &body.to_string()[1..];
        let compact = format!("{{{:14}\"stream\":false,{rest}", "");
        let decoded = format!("{{\"stream\":true,\"stream\":false,{rest}");
        let before = (fast.llm.summarizer_calls(), full.llm.summarizer_calls());
        let (a, b, calls) = rt.block_on(async {
            let a = post(&fast.fg, path, compact).await;
            let b = post(&full.fg, path, decoded).await;
            (a, b, settled(&fast.llm, &full.llm, before).await)
        });
        prop_assert_eq!(a.status, b.status, "{}\n{}", a.text(), b.text());
        a.assert_ok();
        // The same measure: the prompt as sent, estimated alike.
        prop_assert_eq!(
            a.header("x-foldgate-tokens-in"),
            b.header("x-foldgate-tokens-in")
        );
        let fold = a.header("x-foldgate-fold");
        prop_assert_eq!(&fold, &b.header("x-foldgate-fold"));
        prop_assert_eq!(
            a.header("x-foldgate-warning"),
            b.header("x-foldgate-warning")
        );
        let (sent_a, sent_b) = (
            forwarded(&fast.llm.mock.received()),
            forwarded(&full.llm.mock.received()),
        );
        prop_assert!(
            sent_a == sent_b,
            "forwarded views differ:\n{sent_a}\n{sent_b}"
        );
        prop_assert_eq!(calls.0, calls.1, "summaries started");
        let changed = sent_a["messages"] != body["messages"];
        folds.set(folds.get() + usize::from(fold == "new" || changed));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // The cases reached the folding side of the decision too.
    let (folds, summaries) = (folds.get(), fast.llm.summarizer_calls());
    assert!(
        folds > 0 && summaries > 0,
        "{folds} views changed, {summaries} summaries"
    );
    rt.block_on(async move { drop((fast, full)) });
}
