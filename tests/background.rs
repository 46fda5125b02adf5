//! Background folding: summaries are prepared off the request path, so a
//! request only waits for a summarizer in an emergency.

use crate::common;

use common::llm::{self, Llm};
use common::{Foldgate, Reply, post_json};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const FILLER: &str = "we look at the parser, the tokenizer and the cache layer, then decide on the next step together";

fn config(llm: &Llm, extra: &str) -> String {
    format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n[models.\"tiny-*\"]\ncontext_window = 4000\n\
         [policy]\nreset_ratio = 0.5\n{extra}\n[summarizer]\nmax_summary_tokens = 300\n",
        llm.url()
    )
}

/// A conversation of `turns` tagged user/assistant pairs, ending with a user message.
fn history(turns: usize) -> Vec<Value> {
    let mut messages =
        vec![json!({"role": "system", "content": "You are a careful coding assistant."})];
    for i in 0..turns {
        messages.push(
            json!({"role": "user", "content": format!("[m{}] question {i}: {FILLER}", 2 * i)}),
        );
        if i + 1 < turns {
            messages.push(json!({"role": "assistant", "content": format!("[m{}] answer {i}: {FILLER}", 2 * i + 1)}));
        }
    }
    messages
}

async fn send(fg: &Foldgate, messages: &[Value]) -> (Reply, Duration) {
    let body = json!({"model": "tiny-model", "messages": messages, "max_tokens": 100});
    let started = Instant::now();
    let reply = post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[("x-conversation-id", "bg"), ("authorization", "Bearer k")],
        &body,
    )
    .await;
    (reply, started.elapsed())
}

/// Waits until the mock has answered `n` summarizer calls and foldgate has
/// had a moment to store the result.
async fn summarizer_calls_reach(llm: &Llm, n: usize, limit: Duration) {
    let started = Instant::now();
    while llm.summarizer_calls() < n {
        assert!(
            started.elapsed() < limit,
            "summarizer called {} times, expected {n}",
            llm.summarizer_calls()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn no_request_waits_for_a_slow_summarizer() {
    let llm = Llm::start().await;
    llm.state.summarizer_delay_ms.store(2000, Ordering::Relaxed);
    let fg = Foldgate::start(&config(&llm, "")).await;
    let mut labels = Vec::new();
    for turns in 1..=90 {
        let messages = history(turns);
        let (reply, took) = send(&fg, &messages).await;
        reply.assert_ok();
        assert!(
            took < Duration::from_millis(1000),
            "turn {turns} waited {took:?} (summarizer takes 2 s)"
        );
        assert!(reply.tokens_out() + 100 <= 4000, "turn {turns} overflows");
        llm::assert_view_covers(
            &messages,
            llm.chat_requests().last().unwrap()["messages"]
                .as_array()
                .unwrap(),
        );
        labels.push(reply.header("x-foldgate-fold"));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert!(!labels.contains(&"new".to_string()), "{labels:?}");
    let reused = labels.iter().filter(|l| *l == "reused").count();
    assert!(reused > 10, "{labels:?}");
    let calls = llm.summarizer_calls();
    assert!(
        (1..=6).contains(&calls),
        "{calls} summarizer calls for 90 turns"
    );
}

#[tokio::test]
async fn a_ready_fold_is_applied_on_the_first_request_over_the_trigger() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    // ~3000 tokens: over the prefold ratio (2800), under the trigger (3200).
    let messages = history(48);
    let (reply, _) = send(&fg, &messages).await;
    assert_eq!(reply.header("x-foldgate-fold"), "none");
    let before = reply.tokens_out();
    assert!((2800..3200).contains(&before), "{before}");
    summarizer_calls_reach(&llm, 1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Over the trigger now: the ready fold applies at once, nothing new runs.
    let messages = history(56);
    let (reply, took) = send(&fg, &messages).await;
    assert_eq!(reply.header("x-foldgate-fold"), "reused");
    let tokens_in = reply.header("x-foldgate-tokens-in").parse::<u32>().unwrap();
    assert!(tokens_in >= 3200);
    // The fold cuts the view to the reset target (2000), but this chat
    // (no tools, the recall block on) is filled back up with the newest
    // folded messages (docs/folding.md, *A folded chat is filled back up*)
    // as far as the window leaves room beside the output reserve (100),
    // the estimate margin (a twentieth: 200) and the block's whole budget
    // (`archive.inject_tokens`, 600): at most 3100, under the whole
    // history (over the trigger, 3200). The block, when the archive has
    // its hits by now, takes at most that budget: 3700.
    let out = reply.tokens_out();
    let block = if reply.header("x-foldgate-recall-injected").is_empty() {
        0
    } else {
        600
    };
    assert!(out <= 4000 - 100 - 200 - 600 + block, "{out} ({block})");
    assert!(took < Duration::from_millis(500));
    llm::assert_view_covers(
        &messages,
        llm.chat_requests().last().unwrap()["messages"]
            .as_array()
            .unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(llm.summarizer_calls(), 1);
}

#[tokio::test]
async fn a_burst_runs_at_most_two_folds() {
    let llm = Llm::start().await;
    // Requests must not wait for the fold: the summarizer takes far longer
    // than any request may (a wide margin for a loaded machine).
    llm.state.summarizer_delay_ms.store(2000, Ordering::Relaxed);
    let fg = Arc::new(Foldgate::start(&config(&llm, "")).await);
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let fg = fg.clone();
            tokio::spawn(async move { send(&fg, &history(48 + i)).await })
        })
        .collect();
    for t in tasks {
        let (reply, took) = t.await.unwrap();
        assert_eq!(reply.status, 200);
        assert!(took < Duration::from_millis(1500), "{took:?}");
    }
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let calls = llm.summarizer_calls();
    assert!((1..=2).contains(&calls), "{calls} folds for one burst");
}

#[tokio::test]
async fn a_client_that_hangs_up_does_not_cancel_its_fold() {
    let llm = Llm::start().await;
    llm.state.summarizer_delay_ms.store(800, Ordering::Relaxed);
    // Inline mode: the fold runs while the request waits, then the client leaves.
    let fg = Arc::new(Foldgate::start(&config(&llm, "mode = \"inline\"")).await);
    let messages = history(56);
    let (fg2, m2) = (fg.clone(), messages.clone());
    let client = tokio::spawn(async move { send(&fg2, &m2).await });
    summarizer_calls_reach(&llm, 1, Duration::from_secs(3)).await;
    client.abort();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (reply, _) = send(&fg, &messages).await;
    assert_eq!(
        reply.header("x-foldgate-fold"),
        "reused",
        "the abandoned fold was stored"
    );
    assert_eq!(llm.summarizer_calls(), 1);
}

#[tokio::test]
async fn an_emergency_waits_for_the_running_fold() {
    let llm = Llm::start().await;
    llm.state.summarizer_delay_ms.store(800, Ordering::Relaxed);
    let fg = Foldgate::start(&config(&llm, "")).await;
    let (reply, _) = send(&fg, &history(48)).await;
    assert_eq!(reply.header("x-foldgate-fold"), "none");
    summarizer_calls_reach(&llm, 1, Duration::from_secs(3)).await;
    // A jump past the window while the background fold runs.
    let messages = history(66);
    let (reply, took) = send(&fg, &messages).await;
    reply.assert_ok();
    assert!(
        took >= Duration::from_millis(300),
        "an emergency waits: {took:?}"
    );
    assert!(reply.tokens_out() + 100 <= 4000);
    llm::assert_view_covers(
        &messages,
        llm.chat_requests().last().unwrap()["messages"]
            .as_array()
            .unwrap(),
    );
}

#[tokio::test]
async fn inline_mode_makes_the_trigger_request_wait() {
    let llm = Llm::start().await;
    llm.state.summarizer_delay_ms.store(500, Ordering::Relaxed);
    let fg = Foldgate::start(&config(&llm, "mode = \"inline\"")).await;
    let (reply, took) = send(&fg, &history(56)).await;
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    assert!(took >= Duration::from_millis(500), "{took:?}");
}

#[tokio::test]
async fn shutdown_waits_for_a_running_background_fold() {
    let llm = Llm::start().await;
    llm.state.summarizer_delay_ms.store(1000, Ordering::Relaxed);
    let mut fg = Foldgate::start(&config(&llm, "[server]\nshutdown_timeout = \"10s\"")).await;
    send(&fg, &history(48)).await;
    summarizer_calls_reach(&llm, 1, Duration::from_secs(3)).await;
    let started = Instant::now();
    fg.begin_shutdown();
    tokio::time::timeout(Duration::from_secs(8), fg.task.take().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "shutdown returned after {:?}",
        started.elapsed()
    );
}
