//! Added latency per turn, inline against background folding, with a mock
//! summarizer that takes 2 s. The same scripted conversation is replayed
//! in both modes in one run; each turn is also sent straight to the mock
//! upstream as the plain-passthrough baseline.
//!
//! Run: `cargo bench --bench background`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a benchmark fails loudly; the no-panic rule is for the request path"
)]

#[allow(dead_code, reason = "a bench uses a part of the test harness")]
#[path = "../tests/common/mod.rs"]
mod common;

use common::llm::Llm;
use common::{Foldgate, post_json};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const TURNS: usize = 150;
const FILLER: &str = "we look at the parser, the tokenizer and the cache layer, then decide on the next step together";

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let inline = replay("inline").await;
        let background = replay("background").await;
        let triggers: Vec<usize> = inline
            .iter()
            .enumerate()
            .filter(|(_, t)| t.label == "new")
            .map(|(i, _)| i)
            .collect();
        println!(
            "## Added latency per turn, summarizer delay 2 s ({TURNS} turns, {} trigger turns)\n",
            triggers.len()
        );
        println!("| mode | turns | added p50 ms | added p99 ms | added max ms |");
        println!("|---|---|---:|---:|---:|");
        for (name, turns) in [("inline", &inline), ("background", &background)] {
            let all: Vec<f64> = turns.iter().map(Turn::added).collect();
            let trig: Vec<f64> = triggers.iter().map(|&i| turns[i].added()).collect();
            for (which, samples) in [("all", all), ("trigger turns", trig)] {
                let (p50, p99, max) = stats(samples);
                println!("| {name} | {which} | {p50:.3} | {p99:.3} | {max:.3} |");
            }
        }
        let direct: Vec<f64> = background.iter().map(|t| t.direct * 1e3).collect();
        let (p50, p99, _) = stats(direct);
        println!(
            "\nplain passthrough baseline (direct to the mock): p50 {p50:.3} ms, p99 {p99:.3} ms"
        );
        let labels = |turns: &[Turn]| turns.iter().filter(|t| t.label == "reused").count();
        println!(
            "reused views: inline {}, background {}",
            labels(&inline),
            labels(&background)
        );
    });
}

struct Turn {
    label: String,
    through: f64,
    direct: f64,
}

impl Turn {
    /// Added latency in ms: through foldgate minus straight to the upstream.
    fn added(&self) -> f64 {
        (self.through - self.direct) * 1e3
    }
}

async fn replay(mode: &str) -> Vec<Turn> {
    let llm = Llm::start().await;
    llm.state.summarizer_delay_ms.store(2000, Ordering::Relaxed);
    let fg = Foldgate::start(&format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n[models.\"tiny-*\"]\ncontext_window = 4000\n\
         [policy]\nreset_ratio = 0.5\nmode = \"{mode}\"\n[summarizer]\nmax_summary_tokens = 300\n",
        llm.url()
    ))
    .await;
    let through_url = format!("{}/v1/chat/completions", fg.url);
    let direct_url = format!("{}/v1/chat/completions", llm.url());
    let mut messages: Vec<Value> =
        vec![json!({"role": "system", "content": "You are a careful coding assistant."})];
    let mut turns = Vec::new();
    for i in 0..TURNS {
        messages.push(
            json!({"role": "user", "content": format!("[m{}] question {i}: {FILLER}", 2 * i)}),
        );
        let body = json!({"model": "tiny-model", "messages": messages, "max_tokens": 100});
        let started = Instant::now();
        let reply = post_json(&through_url, &[("x-conversation-id", "bench")], &body).await;
        let through = started.elapsed().as_secs_f64();
        assert_eq!(reply.status, 200);
        let started = Instant::now();
        post_json(&direct_url, &[], &body).await;
        let direct = started.elapsed().as_secs_f64();
        let label = reply.headers["x-foldgate-fold"]
            .to_str()
            .unwrap()
            .to_string();
        turns.push(Turn {
            label,
            through,
            direct,
        });
        messages.push(json!({"role": "assistant", "content": format!("[m{}] answer {i}: {FILLER}", 2 * i + 1)}));
        // A user's pace: a fold started in the background has time to finish.
        tokio::time::sleep(Duration::from_millis(120)).await;
    }
    turns
}

fn stats(mut samples: Vec<f64>) -> (f64, f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99), at(1.0))
}
