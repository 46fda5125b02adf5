//! A scripted 60-step coding-agent loop with large tool outputs, replayed
//! through a real foldgate (mock upstream and mock summarizer) in a 32k
//! and a 16k window three ways: summary only (`[compress] enabled =
//! false`), compression only (folds only in an emergency: `trigger_ratio =
//! 1.0`) and both (the defaults); beside the baseline, neither, in a window
//! that holds everything.
//!
//! Prints, per mode: prompt tokens forwarded (the sum of
//! `x-foldgate-tokens-out` over the turns) and bytes forwarded, the
//! largest prompt, summarizer calls, messages shown as stubs, and prompt
//! prefix stability:
//!
//! - *stable turns*: turns whose forwarded `messages` start with every
//!   message of the previous turn's, byte for byte (what a provider's
//!   prompt cache serves entirely from cache but the new messages);
//! - *cacheable share*: over turns 2..60, the longest common byte prefix
//!   of a turn's serialized `messages` with the previous turn's, divided
//!   by the turn's size, summed over turns (bytes a prefix cache could
//!   serve / bytes sent).
//!
//! Run: `cargo bench --bench agent`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a benchmark fails loudly; the no-panic rule is for the request path"
)]

#[path = "../tests/common/mod.rs"]
mod common;

use common::llm::Llm;
use common::tooloop::ToolLoop;
use common::{Foldgate, post_json};
use foldgate::config::Compress;
use foldgate::fold::Compression;
use foldgate::fold::compress::STUB_PREFIX;
use foldgate::fold::compress::StubCache;
use serde_json::Value;
use std::time::{Duration, Instant};

const STEPS: usize = 60;
/// Lines of each tool output (~1,400 tokens).
const LINES: usize = 100;
/// The model's windows: the whole loop (~90k tokens) fits neither; with
/// compression alone it fits the first.
const WINDOWS: [u32; 2] = [32_000, 16_000];
/// The baseline's window: everything fits, nothing is folded.
const BASELINE_WINDOW: u32 = 1_000_000;

struct Mode {
    name: &'static str,
    toml: &'static str,
}

const BASELINE: Mode = Mode {
    name: "baseline: neither",
    toml: "[compress]\nenabled = false\n",
};

const MODES: [Mode; 3] = [
    Mode {
        name: "summary only",
        toml: "[compress]\nenabled = false\n",
    },
    Mode {
        name: "compression only",
        toml: "[policy]\ntrigger_ratio = 1.0\nreset_ratio = 0.7\nmode = \"inline\"\n",
    },
    Mode {
        name: "both",
        toml: "",
    },
];

#[derive(Default)]
struct Figures {
    /// Client-observed time of all turns (mock upstream and summarizer
    /// answer at once).
    elapsed: Duration,
    tokens: u64,
    bytes: u64,
    largest: u32,
    summarizer_calls: usize,
    stubs: usize,
    stable: usize,
    common_bytes: u64,
    later_bytes: u64,
}

async fn replay(mode: &Mode, window: u32) -> Figures {
    let llm = Llm::start().await;
    let policy = if mode.toml.contains("[policy]") {
        String::new()
    } else {
        "[policy]\nmode = \"inline\"\n".to_string()
    };
    let toml = format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n[models.\"agent-*\"]\ncontext_window = {}\n\
         [summarizer]\ntimeout = \"10s\"\n{policy}{}",
        llm.url(),
        window,
        mode.toml
    );
    let fg = Foldgate::start(&toml).await;
    let mut l = ToolLoop::new("port the billing service to the new queue and make the tests pass");
    let mut f = Figures::default();
    let mut previous: Option<(Vec<Value>, String)> = None;
    for step in 0..STEPS {
        l.step(LINES);
        if step % 20 == 19 {
            l.user("also keep the old endpoint working");
        }
        let started = Instant::now();
        let reply = post_json(
            &format!("{}/v1/chat/completions", fg.url),
            &[
                ("x-conversation-id", "bench"),
                ("authorization", "Bearer sk-bench"),
            ],
            &l.body("agent-model"),
        )
        .await;
        f.elapsed += started.elapsed();
        reply.assert_ok();
        let tokens = reply.tokens_out();
        f.tokens += u64::from(tokens);
        f.largest = f.largest.max(tokens);
        let body = llm.chat_requests().last().cloned().unwrap();
        let messages = body["messages"].as_array().cloned().unwrap();
        let text = serde_json::to_string(&messages).unwrap();
        f.bytes += serde_json::to_vec(&body).unwrap().len() as u64;
        f.stubs += messages
            .iter()
            .filter(|m| {
                m["content"]
                    .as_str()
                    .is_some_and(|t| t.starts_with(STUB_PREFIX))
            })
            .count();
        if let Some((before, before_text)) = &previous {
            if messages.len() >= before.len() && messages[..before.len()] == before[..] {
                f.stable += 1;
            }
            let common = text
                .bytes()
                .zip(before_text.bytes())
                .take_while(|(a, b)| a == b)
                .count();
            f.common_bytes += common as u64;
            f.later_bytes += text.len() as u64;
        }
        previous = Some((messages, text));
    }
    f.summarizer_calls = llm.summarizer_calls();
    f
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        println!("## A {STEPS}-step agent loop, tool outputs of ~1,400 tokens\n");
        println!(
            "| window | mode | prompt tokens forwarded | MB forwarded | largest prompt | summarizer calls | stubs shown | stable turns | cacheable share | ms per turn |"
        );
        println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        let runs = std::iter::once((BASELINE_WINDOW, &BASELINE))
            .chain(WINDOWS.iter().flat_map(|&w| MODES.iter().map(move |m| (w, m))));
        for (window, mode) in runs {
            let f = replay(mode, window).await;
            println!(
                "| {window} | {} | {} | {:.2} | {} | {} | {} | {}/{} | {:.1}% | {:.2} |",
                mode.name,
                f.tokens,
                f.bytes as f64 / 1e6,
                f.largest,
                f.summarizer_calls,
                f.stubs,
                f.stable,
                STEPS - 1,
                100.0 * f.common_bytes as f64 / f.later_bytes.max(1) as f64,
                f.elapsed.as_secs_f64() * 1e3 / STEPS as f64,
            );
        }
        stub_cost();
    });
}

/// What choosing and rendering the stubs of the loop's last turn costs on
/// its own (a byte-length counter): rendered anew, and from the cache of
/// rendered stubs the server keeps.
fn stub_cost() {
    let mut l = ToolLoop::new("port the billing service");
    for _ in 0..STEPS {
        l.step(LINES);
    }
    let raw: Vec<u32> = l
        .messages
        .iter()
        .map(|m| (m.to_string().len() / 4) as u32)
        .collect();
    let ids = foldgate::message::ids_of(&l.messages);
    let count = |m: &Value| (m.to_string().len() / 4) as u32;
    let settings = Compress::default();
    let cache = StubCache::new(32 << 20);
    let rounds = 50;
    let time = |f: &dyn Fn() -> usize| {
        let started = Instant::now();
        let mut stubs = 0;
        for _ in 0..rounds {
            stubs = f();
        }
        (
            stubs,
            started.elapsed().as_secs_f64() * 1e3 / f64::from(rounds),
        )
    };
    let (stubs, fresh) =
        time(&|| Compression::of(&l.messages, &raw, &settings, 6, true, &count).len());
    let (_, cached) = time(&|| {
        Compression::with(&l.messages, &raw, &settings, 6, &mut |i| {
            cache.get(&l.messages, i, (ids[i], raw[i]), ("m", true), &count)
        })
        .len()
    });
    println!(
        "\nchoosing and rendering the {stubs} stubs of a {STEPS}-step history ({:.1} MB): \
         {fresh:.2} ms rendered anew, {cached:.3} ms from the cache",
        l.messages
            .iter()
            .map(|m| m.to_string().len())
            .sum::<usize>() as f64
            / 1e6
    );
}
