//! Fold economy: a scripted 40-step coding-agent loop (tool outputs of
//! 1–3 KB) replayed through a real foldgate (mock upstream and mock
//! summarizer) in a 32k, a 16k and a 6k window, beside the
//! full history sent directly (where it fits the window). Eight loops: each
//! of chat completions, Anthropic Messages, Responses and Gemini, with one
//! tool call per step and with 2–3 parallel calls per step (one assistant
//! turn calling several tools, then all their results), each sent in its
//! API's wire shape to a mock that enforces that API's pairing rules.
//!
//! Per window and mode it prints summarizer calls, folds, compression
//! rewrites (requests whose stubs differ from the previous request's while
//! no fold happened), cache-stable requests (the forwarded `messages` start
//! with every message of the previous request's, byte for byte: a prompt
//! cache serves all of that prefix) and the billed input cost of the loop
//! under two price sheets with prompt caching (see [`prices`]), summarizer
//! input included. A request's prefix is its system part (`system`,
//! `instructions`, `systemInstruction`) and its items (`messages`,
//! `input`, `contents`): a summary in the system part breaks all of it.
//! On chat completions the mock model calls `foldgate_recall` on every 5th
//! request that offers it (asking for an early step's port); the table
//! counts those recall rounds and the ones foldgate shortened or refused
//! because the window had too little room left for the excerpts. A recall
//! round's second upstream request is not billed here (the costs compare
//! folding, not the model's choice to look something up).
//!
//! Modes: *defaults* (the shipped configuration: background folding — a
//! fold runs after the answer that triggered it and the next request
//! reuses it — a rewrite brings the view down to the reset target, stubs
//! ride on folds, a restub stubs the older steps without a summarizer
//! call when that leaves nearly the fold's room); *inline* (the same with
//! `mode = "inline"`: the request that triggers a fold waits for it); and
//! *every trigger* (inline, the behaviour before the economy work:
//! `reset_ratio = 0.7`, compression batches on their own, no stubs in the
//! tail at a fold). In background mode the loop waits `AGENT_THINK_MS`
//! (default 300 ms) after each answer, as a real model's next turn would
//! take seconds: the fold the answer started lands before the next
//! request. Folds are counted from `foldgate_folds_total`; a restub
//! answers `x-foldgate-fold: reused`, so it counts as a compression
//! rewrite.
//!
//! The mocks report each request's prompt tokens as a tokenizer counts the
//! body's text (see `agents::text_tokens`), so foldgate calibrates its
//! estimate by a real-looking usage on every API; `AGENT_USAGE=bytes`
//! makes them report one token per 3 bytes of JSON instead (1.5–1.8×
//! that count: a provider that bills more than foldgate estimates).
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
#[path = "agent/wire.rs"]
mod wire;

use common::gemini::GeminiMock;
use common::llm::Llm;
use common::tooloop::{ToolLoop, output_lines};
use common::{Foldgate, metric, post_json};
use foldgate::fold::compress::STUB_PREFIX;
use prices::{Request, SHEETS};
use serde_json::Value;
use std::fmt::Write as _;
use wire::Wire;

const STEPS: usize = 40;
/// The model windows.
const WINDOWS: [u32; 3] = [32_000, 16_000, 6_000];
/// The direct row's window: everything fits, nothing is folded.
const DIRECT_WINDOW: u32 = 1_000_000;
/// The request's `max_tokens` (the loop's output reserve).
const MAX_TOKENS: u32 = 200;
/// The mock model calls `foldgate_recall` on every this-many requests.
const RECALL_EVERY: usize = 5;
const MODEL: &str = "agent-model";

/// One loop: an API, and one call per step or 2–3 parallel calls.
#[derive(Clone, Copy)]
struct Loop {
    wire: Wire,
    parallel: bool,
}

impl Loop {
    fn name(&self) -> String {
        let calls = if self.parallel {
            "2–3 parallel calls per step"
        } else {
            "one call per step"
        };
        format!("{}, {calls}", self.wire.name())
    }

    /// Step `k` of the loop.
    fn step(&self, l: &mut ToolLoop, k: usize) {
        if self.parallel {
            l.bench_parallel_step(k);
        } else {
            l.step(output_lines(k));
        }
    }
}

fn loops() -> Vec<Loop> {
    [false, true]
        .into_iter()
        .flat_map(|parallel| Wire::ALL.map(|wire| Loop { wire, parallel }))
        .collect()
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

const MODES: [Mode; 3] = [
    Mode {
        name: "defaults (background)",
        policy: "",
        toml: "",
    },
    Mode {
        name: "defaults, `mode = \"inline\"`",
        policy: "mode = \"inline\"\n",
        toml: "",
    },
    Mode {
        name: "every trigger (before), inline",
        policy: "mode = \"inline\"\nreset_ratio = 0.7\n",
        toml: "[compress]\nwith_fold = false\n",
    },
];

/// The conversation without tools with `recall = "tool"`: no injected
/// recall block and no fill (the recall tool still offered), beside the
/// defaults (`recall = "auto"`: the block and the fill).
const WITHOUT_INJECTION: [Mode; 2] = [
    Mode {
        name: "defaults, injection and fill off (`recall = \"tool\"`)",
        policy: "",
        toml: "[archive]\nrecall = \"tool\"\n",
    },
    Mode {
        name: "inline, injection and fill off",
        policy: "mode = \"inline\"\n",
        toml: "[archive]\nrecall = \"tool\"\n",
    },
];

/// Whether a mode folds in the background (the shipped default).
fn background(mode: &Mode) -> bool {
    !mode.policy.contains("mode = \"inline\"") && mode.name != DIRECT.name
}

/// How long a background-mode loop waits after each answer
/// (`AGENT_THINK_MS`, default 300 ms): a real model's next turn.
fn think() -> std::time::Duration {
    let ms = std::env::var("AGENT_THINK_MS").map_or(300, |v| v.parse().unwrap());
    std::time::Duration::from_millis(ms)
}

/// New folds so far, by the metrics (every trigger, both modes).
fn folds_total(metrics: &str) -> usize {
    metrics
        .lines()
        .filter(|l| l.starts_with("foldgate_folds_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as usize
}

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

/// Whether the mocks report the prompt tokens a tokenizer counts in the
/// body's text (the default: what a provider's usage says, and what
/// foldgate calibrates its estimate by), or, with `AGENT_USAGE=bytes`,
/// one token per 3 bytes of JSON (1.5–1.8× that; the tables before
/// 2026-11-26's evening ran so on every API but chat, whose mock
/// reported no usage).
fn usage_from_text() -> bool {
    std::env::var("AGENT_USAGE").map_or(true, |v| v != "bytes")
}

/// The mock upstream of a loop: one for the OpenAI and Anthropic APIs,
/// Gemini's own.
enum Upstream {
    Llm(Llm),
    Gemini(GeminiMock),
}

impl Upstream {
    async fn start(wire: Wire) -> Self {
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        let from_text = usage_from_text();
        if wire == Wire::Gemini {
            let mock = GeminiMock::start().await;
            mock.state.calls_tools.store(true, relaxed);
            mock.state.usage_from_text.store(from_text, relaxed);
            return Self::Gemini(mock);
        }
        let llm = Llm::start().await;
        llm.state.recall_every.store(RECALL_EVERY, relaxed);
        llm.state.usage_from_text.store(from_text, relaxed);
        Self::Llm(llm)
    }

    fn url(&self) -> &str {
        match self {
            Self::Llm(l) => l.url(),
            Self::Gemini(g) => g.url(),
        }
    }

    /// Conversation requests received, in order.
    fn requests(&self) -> Vec<Value> {
        match self {
            Self::Llm(l) => l.chat_requests(),
            Self::Gemini(g) => g.bodies(),
        }
    }

    /// Summarizer request bodies received, in order.
    fn summarizer(&self) -> Vec<Value> {
        match self {
            Self::Llm(l) => l.summarizer_requests(),
            Self::Gemini(g) => g
                .state
                .summarizer
                .lock()
                .unwrap()
                .iter()
                .map(common::mock::Recorded::json)
                .collect(),
        }
    }

    fn violations(&self) -> Vec<String> {
        match self {
            Self::Llm(l) => l.state.violations.lock().unwrap().clone(),
            Self::Gemini(g) => g.state.violations.lock().unwrap().clone(),
        }
    }
}

/// The windows to replay: `AGENT_WINDOWS=6000,32000` runs fewer.
fn windows() -> Vec<u32> {
    std::env::var("AGENT_WINDOWS").map_or(WINDOWS.to_vec(), |v| {
        v.split(',').map(|w| w.trim().parse().unwrap()).collect()
    })
}

/// `AGENT_TRACE=1`: each request's fold outcome, tokens and stability on
/// standard error.
fn trace() -> bool {
    std::env::var_os("AGENT_TRACE").is_some()
}

/// `AGENT_TRACE=units`: each request's prefix units too, as the first
/// letter of their role or type and their tokens at the request's tokens
/// per byte (`*`: a stub).
fn trace_units() -> bool {
    std::env::var("AGENT_TRACE").is_ok_and(|v| v == "units")
}

fn units_line(units: &[Value], per_byte: f64) -> String {
    let unit = |u: &Value| {
        let text = u.to_string();
        let kind = u["role"].as_str().or(u["type"].as_str()).unwrap_or("-");
        let stub = if text.contains(STUB_PREFIX) { "*" } else { "" };
        let tokens = (text.len() as f64 * per_byte).round();
        format!("{}{tokens}{stub}", kind.chars().next().unwrap_or('-'))
    };
    units.iter().map(unit).collect::<Vec<_>>().join(" ")
}

async fn replay(lp: Loop, mode: &Mode, window: u32) -> Figures {
    let up = Upstream::start(lp.wire).await;
    let toml = format!(
        "{}[models.\"agent-*\"]\ncontext_window = {window}\n\
         [summarizer]\ntimeout = \"10s\"\n[policy]\n{}{}{}",
        lp.wire.provider(up.url()),
        mode.policy,
        std::env::var("AGENT_POLICY").map_or(String::new(), |p| format!("{p}\n")),
        mode.toml,
    );
    let fg = Foldgate::start(&toml).await;
    let mut l = ToolLoop::new("port the billing service to the new queue and make the tests pass");
    let mut f = Figures::default();
    let mut previous: Option<Vec<Value>> = None;
    let mut previous_stubs = 0;
    let mut summarizer_seen = 0;
    let mut previous_at_send = 0;
    let mut per_byte = 0.25;
    for step in 0..STEPS {
        lp.step(&mut l, step);
        let body = lp.wire.body(MODEL, &l.messages, MAX_TOKENS);
        let before = up.requests().len();
        let at_send = up.summarizer().len();
        let reply = post_json(
            &format!("{}{}", fg.url, lp.wire.path(MODEL)),
            &[
                ("x-conversation-id", "bench"),
                ("authorization", "Bearer sk-bench"),
                ("x-api-key", "sk-bench"),
                ("x-goog-api-key", "g-bench"),
            ],
            &body,
        )
        .await;
        assert!(
            reply.status.is_success(),
            "{} step {step}: {} {}; {:?}",
            lp.name(),
            reply.status,
            reply.text(),
            up.violations()
        );
        // A fold changed this view: inline, this request made it; in
        // the background, one landed since the request before was sent.
        let folded = reply.header("x-foldgate-fold") == "new"
            || (background(mode) && at_send > previous_at_send);
        previous_at_send = at_send;
        let tokens = reply.tokens_out();
        f.largest = f.largest.max(tokens);
        // The step's first upstream request (a recall round's follow-up
        // adds the call and its result, which the next step does not carry).
        let sent = up.requests()[before].clone();
        let units: Vec<Value> = lp
            .wire
            .prefix(&sent)
            .into_iter()
            .map(wire::unmarked)
            .collect();
        let stubs = units
            .iter()
            .map(|u| u.to_string().matches(STUB_PREFIX).count())
            .sum::<usize>();
        if !folded && stubs != previous_stubs {
            f.compress_rewrites += 1;
        }
        previous_stubs = stubs;
        let stable = previous.as_ref().is_some_and(|before| {
            units.len() >= before.len() && units[..before.len()] == before[..]
        });
        f.stable += usize::from(stable);
        let bytes: usize = units.iter().map(|u| u.to_string().len()).sum();
        per_byte = f64::from(tokens) / bytes.max(1) as f64;
        let summarizer = up.summarizer();
        let summarized = summarizer_tokens(&summarizer[summarizer_seen..], per_byte);
        summarizer_seen = summarizer.len();
        let mut request = lp.wire.priced(&sent, u64::from(tokens));
        request.summarizer = summarized;
        f.requests.push(request);
        if trace() {
            eprintln!(
                "{} {window} {} step {step:2}: {} tokens in {} -> {} out, stubs {stubs}, summarizer {summarizer_seen}, stable {stable}",
                lp.name(),
                mode.name,
                reply.header("x-foldgate-fold"),
                reply.header("x-foldgate-tokens-in"),
                tokens,
            );
        }
        if trace_units() {
            eprintln!("    units {}", units_line(&units, per_byte));
        }
        previous = Some(units);
        if background(mode) {
            tokio::time::sleep(think()).await;
        }
    }
    // Summarizer calls after the last answer (a background fold) are
    // billed with the last request.
    let summarizer = up.summarizer();
    if let Some(last) = f.requests.last_mut() {
        last.summarizer += summarizer_tokens(&summarizer[summarizer_seen..], per_byte);
    }
    f.summarizer_calls = summarizer.len();
    let metrics = fg.metrics().await;
    f.folds = folds_total(&metrics);
    f.recalls = [
        "foldgate_recall_calls_total",
        "foldgate_recall_shortened_total",
        "foldgate_recall_refused_total",
    ]
    .map(|name| metric(&metrics, name));
    f
}

/// Input tokens of summarizer calls: their bodies' bytes at the
/// conversation's tokens per byte.
fn summarizer_tokens(bodies: &[Value], per_byte: f64) -> u64 {
    bodies
        .iter()
        .map(|r| (r.to_string().len() as f64 * per_byte).round() as u64)
        .sum()
}

/// Each sheet's bill and read share: `$0.1234 (41%)`.
fn bills(requests: &[Request]) -> Vec<String> {
    SHEETS
        .iter()
        .map(|s| {
            let b = s.bill(requests);
            format!("${:.4} ({:.0}%)", b.cost, 100.0 * b.read_share())
        })
        .collect()
}

/// Folded against direct where direct fits the window, else against
/// trimming, under each sheet.
fn against(requests: &[Request], direct: &Figures, window: u32) -> String {
    let fits = direct.largest + MAX_TOKENS <= window;
    let trimmed = prices::trimmed(&direct.requests, u64::from(window - MAX_TOKENS));
    let other = if fits { &direct.requests } else { &trimmed };
    let mut out = String::from(if fits { "direct " } else { "trimming " });
    for (k, s) in SHEETS.iter().enumerate() {
        let ratio = s.bill(requests).cost / s.bill(other).cost;
        let sep = if k == 0 { "" } else { " / " };
        let _ = write!(out, "{sep}{:+.0}%", 100.0 * (ratio - 1.0));
    }
    out
}

/// The cache-stable requests a perfect folder could reach in `window`
/// (the arithmetic bound): the loop's growth per step as the direct run
/// measured it, every request as full as `limit` allows (the window's
/// room, `window − MAX_TOKENS`, or the trigger), and each rewrite leaving
/// only the system prompt and task, a summary of its whole reserve
/// (`summary_ratio` 0.15 of the window, at most 2,000 tokens) and the
/// newest step verbatim. One unstable request per rewrite.
fn bound(direct: &[Request], window: u32, limit: u64) -> usize {
    let room = limit;
    let reserve = (f64::from(window) * 0.15).min(2_000.0) as u64;
    let Some(first) = direct.first() else {
        return 0;
    };
    let head: u64 = first.tokens[..first.steps.first().copied().unwrap_or(0)]
        .iter()
        .sum();
    let mut view = first.total();
    let mut stable = 0;
    for pair in direct.windows(2) {
        let grown = pair[1].total().saturating_sub(pair[0].total());
        if view + grown <= room {
            view += grown;
            stable += 1;
        } else {
            view = head + reserve + grown;
        }
    }
    stable
}

/// [`bound`] up to the window's room and up to the trigger (0.80).
fn bounds(direct: &[Request], window: u32) -> String {
    let pct = |n: usize| {
        format!(
            "{n}/{} ({:.0}%)",
            STEPS - 1,
            100.0 * n as f64 / (STEPS - 1) as f64
        )
    };
    let room = bound(direct, window, u64::from(window - MAX_TOKENS));
    let trigger = bound(direct, window, (f64::from(window) * 0.8) as u64);
    format!("{} / {}", pct(room), pct(trigger))
}

fn share(f: &Figures) -> String {
    format!(
        "{}/{} ({:.0}%)",
        f.stable,
        STEPS - 1,
        100.0 * f.stable as f64 / (STEPS - 1) as f64
    )
}

fn row(window: u32, mode: &str, f: &Figures) {
    let costs = bills(&f.requests);
    println!(
        "| {window} | {mode} | {} | {} | {} | {} | {} | {} / {} / {} | {} |",
        f.summarizer_calls,
        f.folds,
        f.compress_rewrites,
        share(f),
        f.largest,
        f.recalls[0],
        f.recalls[1],
        f.recalls[2],
        costs.join(" | "),
    );
}

/// Turns of the conversation without tools.
const CHAT_TURNS: usize = 60;

/// The user's words of turn `k` (about 60 to 240 tokens), then the
/// answer's (about twice that).
fn chat_turn(k: usize) -> (String, String) {
    const WORDS: &str =
        "we compare the parser and the tokenizer with the cache layer before the release ";
    let user = format!("[q{k}] {}", WORDS.repeat(4 + (k * 5) % 13));
    let answer = format!("[a{k}] {}", WORDS.repeat(8 + (k * 3) % 19));
    (user, answer)
}

/// What a conversation without tool calls keeps verbatim: per request
/// from the first fold on, the client's messages in the view, against
/// trimming (the newest messages that fit the window beside the system
/// prompt and the output reserve), both counted in messages.
struct Verbatim {
    folds: usize,
    summarizer_calls: usize,
    stable: usize,
    /// Mean messages verbatim in the folded view, and with trimming.
    folded: f64,
    trimmed: f64,
    /// Requests where the folded view keeps at least what trimming keeps.
    at_least: usize,
    measured: usize,
    /// The forwarded requests, priced.
    requests: Vec<Request>,
    /// The largest prompt forwarded.
    largest: u32,
}

async fn verbatim(window: u32, mode: &Mode) -> Verbatim {
    let llm = Llm::start().await;
    let toml = format!(
        "{}[models.\"agent-*\"]\ncontext_window = {window}\n\
         [summarizer]\ntimeout = \"10s\"\n[policy]\n{}{}",
        Wire::Chat.provider(llm.url()),
        mode.policy,
        mode.toml,
    );
    let fg = Foldgate::start(&toml).await;
    let mut messages =
        vec![serde_json::json!({"role": "system", "content": "You are a careful assistant."})];
    let mut out = Verbatim {
        folds: 0,
        summarizer_calls: 0,
        stable: 0,
        folded: 0.0,
        trimmed: 0.0,
        at_least: 0,
        measured: 0,
        requests: Vec::new(),
        largest: 0,
    };
    let mut summarizer_seen = 0;
    let mut tokens_per_byte = 0.25;
    let mut previous: Option<Vec<Value>> = None;
    // Tokens per byte of a message, from foldgate's own count of an
    // unfolded request.
    let mut per_byte = 0.0;
    let mut folded_once = false;
    for k in 0..CHAT_TURNS {
        // The answer to the turn before, then this turn's question.
        if k > 0 {
            let (_, answer) = chat_turn(k - 1);
            messages.push(serde_json::json!({"role": "assistant", "content": answer}));
        }
        let (user, _) = chat_turn(k);
        messages.push(serde_json::json!({"role": "user", "content": user}));
        let body = Wire::Chat.body(MODEL, &messages, MAX_TOKENS);
        let before = llm.chat_requests().len();
        let reply = post_json(
            &format!("{}{}", fg.url, Wire::Chat.path(MODEL)),
            &[
                ("x-conversation-id", "chat"),
                ("authorization", "Bearer sk-bench"),
            ],
            &body,
        )
        .await;
        reply.assert_ok();
        let folded = reply.header("x-foldgate-fold") == "new";
        let forwarded = llm.chat_requests()[before].clone();
        let sent = Wire::Chat.prefix(&forwarded);
        let tokens = reply.tokens_out();
        out.largest = out.largest.max(tokens);
        let bytes: usize = sent.iter().map(|u| u.to_string().len()).sum();
        tokens_per_byte = f64::from(tokens) / bytes.max(1) as f64;
        let summarizer = llm.summarizer_requests();
        let mut request = Wire::Chat.priced(&forwarded, u64::from(tokens));
        request.summarizer = summarizer_tokens(&summarizer[summarizer_seen..], tokens_per_byte);
        summarizer_seen = summarizer.len();
        out.requests.push(request);
        if let Some(p) = &previous {
            out.stable += usize::from(sent.len() >= p.len() && sent[..p.len()] == p[..]);
        }
        let client: Vec<&Value> = sent.iter().filter(|m| messages.contains(m)).collect();
        if !folded_once && reply.header("x-foldgate-fold") == "none" {
            let bytes: usize = messages.iter().map(|m| m.to_string().len()).sum();
            per_byte = f64::from(reply.tokens_out()) / bytes as f64;
        }
        folded_once |= folded || reply.header("x-foldgate-fold") == "reused";
        if folded_once {
            let room =
                f64::from(window - MAX_TOKENS) - per_byte * messages[0].to_string().len() as f64;
            let mut used = 0.0;
            let trimmed = messages[1..]
                .iter()
                .rev()
                .take_while(|m| {
                    used += per_byte * m.to_string().len() as f64;
                    used <= room
                })
                .count();
            let kept = client.len() - 1; // the system prompt aside
            out.folded += kept as f64;
            out.trimmed += trimmed as f64;
            out.at_least += usize::from(kept >= trimmed);
            out.measured += 1;
        }
        previous = Some(sent);
        if background(mode) {
            tokio::time::sleep(think()).await;
        }
    }
    let summarizer = llm.summarizer_requests();
    if let Some(last) = out.requests.last_mut() {
        last.summarizer += summarizer_tokens(&summarizer[summarizer_seen..], tokens_per_byte);
    }
    out.summarizer_calls = llm.summarizer_calls();
    out.folds = folds_total(&fg.metrics().await);
    let n = out.measured.max(1) as f64;
    out.folded /= n;
    out.trimmed /= n;
    out
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // `AGENT_LOOPS=chat` (a substring of the loop names) runs fewer loops.
    let only = std::env::var("AGENT_LOOPS").unwrap_or_default();
    rt.block_on(async {
        let sheets: Vec<&str> = SHEETS.iter().map(|s| s.name).collect();
        let mut summary = Vec::new();
        for lp in loops().into_iter().filter(|l| l.name().contains(&only)) {
            println!(
                "## A {STEPS}-step agent loop, {}, tool outputs of 1–3 KB\n",
                lp.name()
            );
            println!(
                "| window | mode | summarizer calls | folds | compression rewrites | cache-stable requests | largest prompt | recall rounds / shortened / refused | {} |",
                sheets.iter().map(|s| format!("{s} $ (read share)")).collect::<Vec<_>>().join(" | ")
            );
            println!("|---:|---|---:|---:|---:|---:|---:|---|---:|---:|");
            let direct = replay(lp, &DIRECT, DIRECT_WINDOW).await;
            let mut economy = Vec::new();
            let mut inline = Vec::new();
            for window in windows() {
                if direct.largest + MAX_TOKENS <= window {
                    row(window, DIRECT.name, &direct);
                } else {
                    println!(
                        "| {window} | {} | does not fit ({} tokens) | | | | | | | |",
                        DIRECT.name, direct.largest
                    );
                }
                let trimmed = prices::trimmed(&direct.requests, u64::from(window - MAX_TOKENS));
                println!(
                    "| {window} | trimming (oldest steps dropped to fit) | | | | | | | {} |",
                    bills(&trimmed).join(" | ")
                );
                println!(
                    "| {window} | bound: a perfect folder (arithmetic; up to the window's room / the trigger) | | | | {} | | | | |",
                    bounds(&direct.requests, window)
                );
                for mode in &MODES {
                    let f = replay(lp, mode, window).await;
                    row(window, mode.name, &f);
                    if std::ptr::eq(mode, &MODES[0]) {
                        economy.push((window, f));
                    } else if std::ptr::eq(mode, &MODES[1]) {
                        inline.push((window, f));
                    }
                }
            }
            println!();
            summary.push((lp, direct, economy, inline));
        }
        if only.is_empty() || only == "without tools" {
            println!("## A {CHAT_TURNS}-turn conversation without tools: verbatim history in view, and the bill\n");
            println!(
                "| window | mode | summarizer calls | cache-stable | messages verbatim in view (mean, from the first fold) | trimming to the window keeps | requests at or above trimming | {} | vs direct, or trimming where direct does not fit |",
                sheets.iter().map(|s| format!("{s} $ per {CHAT_TURNS} turns (read share)")).collect::<Vec<_>>().join(" | ")
            );
            println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---|");
            let direct = verbatim(DIRECT_WINDOW, &DIRECT).await;
            let direct = Figures {
                largest: direct.largest,
                requests: direct.requests,
                ..Figures::default()
            };
            for window in [6_000, 16_000] {
                let trimmed = prices::trimmed(&direct.requests, u64::from(window - MAX_TOKENS));
                if direct.largest + MAX_TOKENS <= window {
                    println!("| {window} | {} | | | | | | {} | |", DIRECT.name, bills(&direct.requests).join(" | "));
                }
                println!("| {window} | trimming (oldest turns dropped to fit) | | | | | | {} | |", bills(&trimmed).join(" | "));
                for mode in [&MODES[0], &WITHOUT_INJECTION[0], &MODES[1], &WITHOUT_INJECTION[1]] {
                    let v = verbatim(window, mode).await;
                    println!(
                        "| {window} | {} | {} | {}/{} | {:.1} | {:.1} | {}/{} | {} | {} |",
                        mode.name,
                        v.summarizer_calls,
                        v.stable,
                        CHAT_TURNS - 1,
                        v.folded,
                        v.trimmed,
                        v.at_least,
                        v.measured,
                        bills(&v.requests).join(" | "),
                        against(&v.requests, &direct, window),
                    );
                }
            }
            println!();
        }
        println!("## Economy, all loops: the defaults (background), inline beside them\n");
        println!(
            "| loop | mode | 6k: summarizer calls | 6k: cache-stable | 6k: bound (room / trigger) | 6k: bill, {} (read share) | 6k: vs | 32k: summarizer calls | 32k: cache-stable | 32k: bill | 32k: vs |",
            sheets.join(" / ")
        );
        println!("|---|---|---:|---:|---:|---:|---|---:|---:|---:|---|");
        for (lp, direct, economy, inline) in &summary {
            for (name, figures) in [("defaults", economy), ("inline", inline)] {
                let at = |w: u32| figures.iter().find(|(window, _)| *window == w).map(|e| &e.1);
                let calls = |w| at(w).map_or("–".into(), |f| f.summarizer_calls.to_string());
                let stable = |w| at(w).map_or("–".into(), share);
                let bill = |w| at(w).map_or("–".into(), |f| bills(&f.requests).join(" / "));
                let vs = |w| at(w).map_or("–".into(), |f| against(&f.requests, direct, w));
                println!(
                    "| {} | {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    lp.name(),
                    calls(6_000),
                    stable(6_000),
                    bounds(&direct.requests, 6_000),
                    bill(6_000),
                    vs(6_000),
                    calls(32_000),
                    stable(32_000),
                    bill(32_000),
                    vs(32_000),
                );
            }
        }
        println!(
            "\nvs: the bill against direct (the whole history) where it fits the window, else against trimming (the client dropping its oldest steps, whole, after the system prompt and the task, until the request fits), OpenAI / Anthropic."
        );
        println!("\n{}", prices::NOTE);
    });
}
