//! Archive benchmark: `cargo bench --bench archive` (needs `redis-server`
//! on PATH; it starts its own on a free loopback port).
//!
//! Prints, in one run:
//! 1. the latency of a turn that folds, through a real foldgate on SQLite,
//!    with the archive on against off (interleaved rounds): what archiving
//!    adds to the request (its write is queued, so it should be ~nothing);
//! 2. search latency over 20 conversations of 2,000 archived messages each
//!    (~700 bytes of text), per backend, for 200 queries looking for a
//!    planted message, with hit@1, beside a naive in-process substring
//!    scan of the same conversation as the baseline;
//! 3. messages stored per second and bytes per archived message.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a benchmark fails loudly; the no-panic rule is for the request path"
)]

#[allow(dead_code, reason = "a bench uses a part of the test harness")]
#[path = "../tests/common/mod.rs"]
mod common;

use common::Foldgate;
use common::convo::{Convo, chat, config, label};
use common::llm::Llm;
use common::redis::Redis;
use foldgate::archive::{Archive, Row};
use foldgate::config::{Config, Secret, StateBackend};
use foldgate::state::ConvKey;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

const CONVERSATIONS: usize = 20;
const MESSAGES: usize = 2000;
const PLANTED: usize = 10;
const BATCH: usize = 100;
const FOLD_ROUNDS: usize = 6;
const FOLDS_PER_ROUND: usize = 30;

/// A deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

const SYLLABLES: [&str; 16] = [
    "ka", "lo", "mi", "ner", "po", "qua", "ri", "sel", "tan", "vo", "wex", "yor", "zim", "bra",
    "cu", "dex",
];

/// A vocabulary of 2,000 made-up words, used with a skew (common words
/// repeat, like real text).
fn vocabulary() -> Vec<String> {
    let mut rng = Rng(42);
    (0..2000)
        .map(|_| {
            (0..2 + rng.below(3))
                .map(|_| SYLLABLES[rng.below(SYLLABLES.len())])
                .collect()
        })
        .collect()
}

/// The text of message `position` of conversation `c`; planted ones carry
/// a unique marker a query looks for.
fn text(rng: &mut Rng, vocab: &[String], c: usize, position: usize) -> String {
    let mut words: Vec<&str> = (0..110)
        .map(|_| {
            let skewed = rng.below(vocab.len()).min(rng.below(vocab.len()));
            vocab[skewed].as_str()
        })
        .collect();
    let marker = planted_marker(c, position);
    if let Some(m) = &marker {
        words.insert(40, "deploy key rotation moved to");
        words.insert(41, m);
    }
    words.join(" ")
}

fn planted_marker(c: usize, position: usize) -> Option<String> {
    (position % (MESSAGES / PLANTED) == 7).then(|| format!("vault-{c}-{position}.internal"))
}

fn key(c: usize) -> ConvKey {
    ConvKey {
        tenant: "bench".into(),
        conversation: format!("conv-{c}"),
    }
}

fn archive_config(backend: StateBackend, dir: &Path, redis: &Redis) -> Config {
    let mut config = Config::default();
    config.state.backend = backend;
    config.state.path = dir.join("archive.db");
    config.state.url = Some(Secret::new(redis.url()));
    config.state.timeout = Duration::from_secs(5);
    config.archive.max_messages = MESSAGES;
    config
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Fold-turn latencies with the archive on or off (a fresh SQLite file).
async fn fold_turns(llm: &Llm, archive: bool) -> Vec<Duration> {
    let dir = tempfile::tempdir().unwrap();
    let toml = config(
        llm,
        &format!(
            "[state]\nbackend = \"sqlite\"\npath = {:?}\n[archive]\nenabled = {archive}\n",
            dir.path().join("f.db").display().to_string()
        ),
    );
    let fg = Foldgate::start(&toml).await;
    let convo = Convo::with_turns(55);
    let mut times = Vec::new();
    for i in 0..FOLDS_PER_ROUND {
        let started = Instant::now();
        let reply = chat(&fg, &format!("fold-{i}"), &convo).await;
        times.push(started.elapsed());
        assert_eq!(label(&reply), "new");
    }
    times
}

/// Rows of every conversation, in fold-sized batches.
fn corpus() -> Vec<(usize, Vec<Row>)> {
    let vocab = vocabulary();
    let mut rng = Rng(7);
    let mut batches = Vec::new();
    for c in 0..CONVERSATIONS {
        for start in (0..MESSAGES).step_by(BATCH) {
            let rows = (start..start + BATCH)
                .map(|p| {
                    let message = json!({"role": "user", "content": text(&mut rng, &vocab, c, p)});
                    let id = twox_hash::XxHash3_128::oneshot(message.to_string().as_bytes());
                    Row::of(p, &message, id, "fold", "chat", 0)
                })
                .collect();
            batches.push((c, rows));
        }
    }
    batches
}

/// Stores the corpus; returns messages stored per second.
async fn fill(archive: &Archive, batches: &[(usize, Vec<Row>)]) -> f64 {
    let started = Instant::now();
    for (c, rows) in batches {
        archive.store(&key(*c), rows.clone()).unwrap();
    }
    archive.flush().await;
    // Redis writes are spooled for a writer task: wait until all have landed.
    while archive.spool_depth().0 > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for c in 0..CONVERSATIONS {
        while archive.count(&key(c)).await < MESSAGES as u64 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    (CONVERSATIONS * MESSAGES) as f64 / started.elapsed().as_secs_f64()
}

/// Search latencies and the share of queries whose planted message ranks first.
async fn searches(archive: &Archive) -> (Vec<Duration>, f64) {
    let mut times = Vec::new();
    let mut first = 0;
    let mut rng = Rng(99);
    for _ in 0..200 {
        let c = rng.below(CONVERSATIONS);
        let position = rng.below(PLANTED) * (MESSAGES / PLANTED) + 7;
        let marker = planted_marker(c, position).unwrap();
        let query = format!("deploy key rotation {marker}");
        let started = Instant::now();
        let hits = archive.hits(&key(c), &query, 10).await;
        times.push(started.elapsed());
        first += usize::from(hits.first().is_some_and(|h| h.row.position == position));
    }
    times.sort();
    (times, first as f64 / 200.0)
}

/// The baseline: every row of the conversation in memory, the first whose
/// lowercased text contains the marker.
fn naive(batches: &[(usize, Vec<Row>)]) -> Vec<Duration> {
    let mut rng = Rng(99);
    let mut times = Vec::new();
    for _ in 0..200 {
        let c = rng.below(CONVERSATIONS);
        let position = rng.below(PLANTED) * (MESSAGES / PLANTED) + 7;
        let marker = planted_marker(c, position).unwrap();
        let started = Instant::now();
        let found = batches
            .iter()
            .filter(|(bc, _)| *bc == c)
            .flat_map(|(_, rows)| rows)
            .find(|r| r.text.to_lowercase().contains(&marker));
        times.push(started.elapsed());
        assert_eq!(found.map(|r| r.position), Some(position));
    }
    times.sort();
    times
}

fn bytes_per_message(config: &Config, redis: &Redis) -> Option<f64> {
    let total = (CONVERSATIONS * MESSAGES) as f64;
    match config.state.backend {
        StateBackend::Sqlite => {
            let path = config.archive.path_for(&config.state);
            let conn = rusqlite::Connection::open(path).unwrap();
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                .unwrap();
            let pages = conn
                .query_row("PRAGMA page_count", [], |r| r.get::<_, i64>(0))
                .unwrap() as f64;
            let size = conn
                .query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0))
                .unwrap() as f64;
            Some(pages * size / total)
        }
        StateBackend::Redis => {
            let used: f64 = (0..CONVERSATIONS)
                .filter_map(|c| {
                    let reply = redis.command(&[
                        "MEMORY",
                        "USAGE",
                        &format!("foldgate:archive:{{bench:conv-{c}}}"),
                        "SAMPLES",
                        "0",
                    ])?;
                    reply.trim().trim_start_matches(':').parse::<f64>().ok()
                })
                .sum();
            Some(used / total)
        }
        StateBackend::Memory => None,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let redis = Redis::start();
    let llm = Llm::start().await;

    println!(
        "1. turns that fold, SQLite state, {FOLD_ROUNDS} interleaved rounds of {FOLDS_PER_ROUND}"
    );
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for _ in 0..FOLD_ROUNDS {
        off.extend(fold_turns(&llm, false).await);
        on.extend(fold_turns(&llm, true).await);
    }
    off.sort();
    on.sort();
    println!("| archive | p50 ms | p99 ms |\n|---|---:|---:|");
    for (name, t) in [("off (baseline)", &off), ("on", &on)] {
        println!(
            "| {name} | {:.3} | {:.3} |",
            ms(percentile(t, 0.5)),
            ms(percentile(t, 0.99))
        );
    }
    println!(
        "added p50: {:+.3} ms",
        ms(percentile(&on, 0.5)) - ms(percentile(&off, 0.5))
    );
    // The part of it the request itself pays: building the rows of a fold.
    let convo = Convo::with_turns(55);
    let started = Instant::now();
    for _ in 0..100 {
        let rows: Vec<Row> = convo
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| Row::of(i, m, i as u128, "fold", "chat", 0))
            .collect();
        std::hint::black_box(rows);
    }
    println!(
        "building the rows of a {}-message fold: {:.3} ms\n",
        convo.messages.len(),
        ms(started.elapsed()) / 100.0
    );

    let batches = corpus();
    println!(
        "2./3. {CONVERSATIONS} conversations x {MESSAGES} archived messages, 200 searches (limit 10)"
    );
    println!(
        "| backend | search p50 ms | search p99 ms | hit@1 | stored msgs/s | bytes per message |\n|---|---:|---:|---:|---:|---:|"
    );
    let base = naive(&batches);
    println!(
        "| naive substring scan (baseline) | {:.3} | {:.3} | 1.00 | - | - |",
        ms(percentile(&base, 0.5)),
        ms(percentile(&base, 0.99))
    );
    for (name, backend) in [
        ("sqlite (FTS5)", StateBackend::Sqlite),
        ("memory (scan)", StateBackend::Memory),
        ("redis (scan)", StateBackend::Redis),
    ] {
        let dir = tempfile::tempdir().unwrap();
        redis.command(&["FLUSHALL"]);
        let config = archive_config(backend, dir.path(), &redis);
        let archive = Archive::open(&config, Default::default()).unwrap();
        let rate = fill(&archive, &batches).await;
        let (times, hit1) = searches(&archive).await;
        drop(archive);
        let bytes = bytes_per_message(&config, &redis)
            .map_or_else(|| "-".to_string(), |b| format!("{b:.0}"));
        println!(
            "| {name} | {:.3} | {:.3} | {hit1:.2} | {rate:.0} | {bytes} |",
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.99))
        );
    }
}
