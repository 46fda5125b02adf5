//! Fold economy: a scripted 40-step coding-agent loop (tool outputs of
//! 1–3 KB) replayed through a real foldgate (mock upstream and mock
//! summarizer, inline folds) in a 32k, a 16k and a 6k window, beside the
//! full history sent directly (where it fits the window).
//!
//! Per window and mode it prints summarizer calls, folds, compression
//! rewrites (requests whose stubs differ from the previous request's while
//! no fold happened), cache-stable requests (the forwarded `messages` start
//! with every message of the previous request's, byte for byte: a prompt
//! cache serves all of that prefix) and the billed input cost of the loop
//! under two price sheets with prompt caching (see [`prices`]), summarizer
//! input included. The mock model calls `foldgate_recall` on every 5th
//! request that offers it (asking for an early step's port); the table
//! counts those recall rounds and the ones foldgate shortened or refused
//! because the window had too little room left for the excerpts. A recall
//! round's second upstream request is not billed here (the costs compare
//! folding, not the model's choice to look something up).
//!
//! Modes: *economy* (the defaults: a rewrite brings the view down to the
//! reset target, stubs ride on folds) and *every trigger* (the behaviour
//! before: `reset_ratio = 0.7`, compression batches on their own, no stubs
//! in the tail at a fold).
//!
//! Run: `cargo bench --bench agent` (`--profile dev` is fine: these
//! columns are counts, not timings).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a benchmark fails loudly; the no-panic rule is for the request path"
)]

#[allow(dead_code, reason = "a bench uses a part of the test harness")]
#[path = "../tests/common/mod.rs"]
mod common;

#[path = "agent/prices.rs"]
mod prices;

use common::llm::Llm;
use common::tooloop::ToolLoop;
use common::{Foldgate, metric, post_json};
use foldgate::fold::compress::STUB_PREFIX;
use prices::{Request, SHEETS};
use serde_json::Value;

const STEPS: usize = 40;
/// The model windows.
const WINDOWS: [u32; 3] = [32_000, 16_000, 6_000];
/// The direct row's window: everything fits, nothing is folded.
const DIRECT_WINDOW: u32 = 1_000_000;
/// The request's `max_tokens` (the loop's output reserve).
const MAX_TOKENS: u32 = 200;
/// The mock model calls `foldgate_recall` on every this-many requests.
const RECALL_EVERY: usize = 5;

/// Lines of step `k`'s output: 12 to 36 lines of 85 bytes, 1–3 KB.
fn lines(k: usize) -> usize {
    12 + (k * 7) % 25
}

struct Mode {
    name: &'static str,
    /// Keys of `[policy]`.
    policy: &'static str,
    /// Other sections.
    toml: &'static str,
}

const DIRECT: Mode = Mode {
    name: "direct (full history)",
    policy: "",
    toml: "[compress]\nenabled = false\n",
};

const MODES: [Mode; 2] = [
    Mode {
        name: "every trigger (before)",
        policy: "reset_ratio = 0.7\n",
        toml: "[compress]\nwith_fold = false\n",
    },
    Mode {
        name: "economy (defaults)",
        policy: "",
        toml: "",
    },
];

#[derive(Default)]
struct Figures {
    summarizer_calls: usize,
    folds: usize,
    compress_rewrites: usize,
    stable: usize,
    largest: u32,
    requests: Vec<Request>,
    /// Recall rounds: answered, shortened for room, refused for room.
    recalls: [f64; 3],
}

async fn replay(mode: &Mode, window: u32) -> Figures {
    let llm = Llm::start().await;
    llm.state
        .recall_every
        .store(RECALL_EVERY, std::sync::atomic::Ordering::Relaxed);
    let toml = format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n[models.\"agent-*\"]\ncontext_window = {window}\n\
         [summarizer]\ntimeout = \"10s\"\n[policy]\nmode = \"inline\"\n{}{}",
        llm.url(),
        mode.policy,
        mode.toml,
    );
    let fg = Foldgate::start(&toml).await;
    let mut l = ToolLoop::new("port the billing service to the new queue and make the tests pass");
    let mut f = Figures::default();
    let mut previous: Option<Vec<Value>> = None;
    let mut previous_stubs = 0;
    let mut summarizer_seen = 0;
    for step in 0..STEPS {
        l.step(lines(step));
        let mut body = l.body("agent-model");
        body["max_tokens"] = MAX_TOKENS.into();
        let before = llm.chat_requests().len();
        let reply = post_json(
            &format!("{}/v1/chat/completions", fg.url),
            &[
                ("x-conversation-id", "bench"),
                ("authorization", "Bearer sk-bench"),
            ],
            &body,
        )
        .await;
        reply.assert_ok();
        let folded = reply.header("x-foldgate-fold") == "new";
        f.folds += usize::from(folded);
        let tokens = reply.tokens_out();
        f.largest = f.largest.max(tokens);
        // The step's first upstream request (a recall round's follow-up
        // adds the call and its result, which the next step does not carry).
        let sent = llm.chat_requests()[before].clone();
        let messages = sent["messages"].as_array().cloned().unwrap();
        let stubs = messages
            .iter()
            .filter(|m| {
                m["content"]
                    .as_str()
                    .is_some_and(|t| t.starts_with(STUB_PREFIX))
            })
            .count();
        if !folded && stubs != previous_stubs {
            f.compress_rewrites += 1;
        }
        previous_stubs = stubs;
        let sizes: Vec<usize> = messages.iter().map(|m| m.to_string().len()).collect();
        let total: usize = sizes.iter().sum::<usize>().max(1);
        let common = previous.as_ref().map_or(0, |before| {
            messages
                .iter()
                .zip(before)
                .take_while(|(a, b)| a == b)
                .count()
        });
        let stable = previous
            .as_ref()
            .is_some_and(|before| common == before.len());
        f.stable += usize::from(stable);
        let common_bytes: usize = sizes[..common].iter().sum();
        let summarized: u64 = llm.summarizer_requests()[summarizer_seen..]
            .iter()
            .map(|r| (r.to_string().len() / 4) as u64)
            .sum();
        summarizer_seen = llm.summarizer_requests().len();
        f.requests.push(Request {
            tokens: u64::from(tokens),
            cached: (u64::from(tokens) as f64 * common_bytes as f64 / total as f64) as u64,
            summarizer: summarized,
        });
        previous = Some(messages);
    }
    f.summarizer_calls = llm.summarizer_calls();
    let metrics = fg.metrics().await;
    f.recalls = [
        "foldgate_recall_calls_total",
        "foldgate_recall_shortened_total",
        "foldgate_recall_refused_total",
    ]
    .map(|name| metric(&metrics, name));
    f
}

fn row(window: u32, mode: &str, f: &Figures) {
    let costs: Vec<String> = SHEETS
        .iter()
        .map(|s| format!("${:.4}", s.cost(&f.requests)))
        .collect();
    println!(
        "| {window} | {mode} | {} | {} | {} | {}/{} ({:.0}%) | {} | {} / {} / {} | {} |",
        f.summarizer_calls,
        f.folds,
        f.compress_rewrites,
        f.stable,
        STEPS - 1,
        100.0 * f.stable as f64 / (STEPS - 1) as f64,
        f.largest,
        f.recalls[0],
        f.recalls[1],
        f.recalls[2],
        costs.join(" | "),
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        println!("## A {STEPS}-step agent loop, tool outputs of 1–3 KB\n");
        let sheets: Vec<&str> = SHEETS.iter().map(|s| s.name).collect();
        println!(
            "| window | mode | summarizer calls | folds | compression rewrites | cache-stable requests | largest prompt | recall rounds / shortened / refused | {} |",
            sheets.join(" | ")
        );
        println!("|---:|---|---:|---:|---:|---:|---:|---|---:|---:|");
        let direct = replay(&DIRECT, DIRECT_WINDOW).await;
        for window in WINDOWS {
            if direct.largest + MAX_TOKENS <= window {
                row(window, DIRECT.name, &direct);
            } else {
                println!(
                    "| {window} | {} | does not fit ({} tokens) | | | | | | | |",
                    DIRECT.name, direct.largest
                );
            }
            for mode in &MODES {
                let f = replay(mode, window).await;
                row(window, mode.name, &f);
            }
        }
        println!("\n{}", prices::NOTE);
    });
}
