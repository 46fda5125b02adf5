//! Folding's token savings and cost on a scripted 500-turn conversation,
//! and the added latency of a turn that reuses a summary.
//!
//! Run: `cargo bench --bench folding`. Everything runs in-process on
//! loopback: a mock upstream (chat model + summarizer) and foldgate.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a benchmark fails loudly; the no-panic rule is for the request path"
)]

#[allow(dead_code, reason = "a bench uses a part of the test harness")]
#[path = "../tests/common/mod.rs"]
mod common;

/// The binary's allocator, so the in-process server costs what it costs
/// when run as `foldgate serve`.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use common::llm::Llm;
use common::{Foldgate, metric, post_json};
use serde_json::json;
use std::time::{Duration, Instant};

const TURNS: usize = 500;
const WINDOW: u32 = 16_000;
const FILLER: &str = "we compare the parser, the tokenizer and the cache layer, measure again, and write down what changed in the benchmark notes";

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n[models.\"bench-*\"]\ncontext_window = {WINDOW}\n\
         [summarizer]\nmax_summary_tokens = 1000\n",
        llm.url()
    ))
    .await;
    let url = format!("{}/v1/chat/completions", fg.url);
    let mut messages =
        vec![json!({"role": "system", "content": "You are a careful coding assistant."})];
    let (mut sent_total, mut full_total) = (0u64, 0u64);
    let mut rows = Vec::new();
    let mut max_out = 0u32;
    for turn in 0..TURNS {
        messages.push(
            json!({"role": "user", "content": format!("[m{}] step {turn}: {FILLER}", 2 * turn)}),
        );
        let body = json!({"model": "bench-model", "messages": messages, "max_tokens": 500});
        let reply = post_json(&url, &[("x-conversation-id", "bench")], &body).await;
        assert_eq!(reply.status, 200);
        let header = |name: &str| -> u32 { reply.headers[name].to_str().unwrap().parse().unwrap() };
        let (tokens_in, tokens_out) = (
            header("x-foldgate-tokens-in"),
            header("x-foldgate-tokens-out"),
        );
        sent_total += u64::from(tokens_out);
        full_total += u64::from(tokens_in);
        max_out = max_out.max(tokens_out);
        if (turn + 1) % 50 == 0 {
            let fold = reply.headers["x-foldgate-fold"]
                .to_str()
                .unwrap()
                .to_string();
            rows.push((turn + 1, tokens_in, tokens_out, fold));
        }
        messages.push(json!({"role": "assistant", "content": format!("[m{}] done with step {turn}: {FILLER}", 2 * turn + 1)}));
    }
    let summarizer_tokens: u64 = llm
        .summarizer_requests()
        .iter()
        .map(|r| r["messages"][1]["content"].as_str().unwrap_or("").len() as u64 / 4 + 50)
        .sum();
    let metrics = fg.metrics().await;
    let reported = metric(&metrics, "foldgate_summarizer_tokens_total") as u64;

    println!(
        "## Folding a {TURNS}-turn conversation (window {WINDOW}, trigger 0.80 = {} tokens)\n",
        WINDOW * 8 / 10
    );
    println!("| turn | full history tokens | forwarded tokens | fold |");
    println!("|---:|---:|---:|---|");
    for (turn, tin, tout, fold) in &rows {
        println!("| {turn} | {tin} | {tout} | {fold} |");
    }
    println!();
    println!("| total over {TURNS} turns | tokens |");
    println!("|---|---:|");
    println!("| full history every turn (would overflow after the window) | {full_total} |");
    println!("| forwarded by foldgate | {sent_total} |");
    println!(
        "| summarizer tokens ({} calls) | {reported} (mock-reported; ~{summarizer_tokens} by prompt size) |",
        llm.summarizer_calls()
    );
    println!(
        "| foldgate total / full history | {:.3} |",
        (sent_total + reported) as f64 / full_total as f64
    );
    println!(
        "\nlargest forwarded prompt: {max_out} tokens (trigger {})\n",
        WINDOW * 8 / 10
    );

    // Latency: the next turn reuses the stored summary; compare with the
    // same body sent straight to the upstream.
    messages.push(json!({"role": "user", "content": "[m99999] one more question"}));
    let body = json!({"model": "bench-model", "messages": messages, "max_tokens": 500});
    let direct = format!("{}/v1/chat/completions", llm.url());
    let view_body = json!({"model": "bench-model", "messages": llm.chat_requests().last().unwrap()["messages"], "max_tokens": 500});
    let targets = [
        ("direct to upstream (full history)", &direct, &body, "x"),
        ("direct to upstream (folded view)", &direct, &view_body, "x"),
        ("foldgate, reusing the summary", &url, &body, "bench"),
    ];
    // Interleaved, one request of each row per round, so the machine's
    // noise falls on every row alike; the added time is the median of the
    // per-round differences.
    let mut samples = vec![Vec::new(); targets.len()];
    let mut added = Vec::new();
    for _ in 0..300 {
        let mut round = Vec::new();
        for (row, (_, url, body, conv)) in targets.iter().enumerate() {
            let started = Instant::now();
            let reply = post_json(url, &[("x-conversation-id", *conv)], body).await;
            round.push(started.elapsed());
            samples[row].push(started.elapsed());
            assert_eq!(reply.status, 200);
            if *conv == "bench" {
                assert_eq!(reply.headers["x-foldgate-fold"], "reused");
            }
        }
        added.push(ms(round[2]) - ms(round[0]));
    }
    let rows: Vec<_> = targets
        .iter()
        .zip(&mut samples)
        .map(|((name, ..), samples)| {
            samples.sort();
            (
                *name,
                samples[samples.len() / 2],
                samples[samples.len() * 99 / 100],
            )
        })
        .collect();
    added.sort_by(f64::total_cmp);
    println!(
        "## Latency of a reuse turn ({} messages in the client's history, 300 interleaved rounds)\n",
        messages.len()
    );
    println!("| path | p50 ms | p99 ms |");
    println!("|---|---:|---:|");
    for (name, p50, p99) in &rows {
        println!("| {name} | {:.3} | {:.3} |", ms(*p50), ms(*p99));
    }
    println!(
        "\nadded p50 vs direct with the full history: {:+.3} ms (median of the per-round differences: {:+.3} ms)",
        ms(rows[2].1) - ms(rows[0].1),
        added[added.len() / 2]
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
