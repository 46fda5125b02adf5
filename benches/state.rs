//! State backend benchmark: `cargo bench --bench state` (needs
//! `redis-server` on PATH; it starts its own on a free loopback port).
//!
//! Prints, in one run and beside the memory baseline:
//! 1. per-request latency of a reuse-heavy replay through a real foldgate
//!    (40 conversations fold once, then 10 more turns each, every one a
//!    reuse), and the latency each backend adds over memory at p50/p99;
//! 2. states written per second straight into the store (16 writers);
//! 3. bytes per stored conversation (a chain of 4 folds with 1.5 KB
//!    summaries).
//!
//! Rounds are interleaved (memory, sqlite, redis, redis with refresh = 0)
//! and repeated; the median round is reported.

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
use foldgate::config::{StateBackend, StateConfig};
use foldgate::fold::{FoldChain, FoldState};
use foldgate::state::{self, ConvKey, Store};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CONVERSATIONS: usize = 40;
const TURNS: usize = 10;
const REPEATS: usize = 3;
const WRITES: usize = 4000;

#[derive(Clone, Copy, PartialEq)]
enum Row {
    Memory,
    Sqlite,
    Redis,
    RedisNoRefresh,
}

impl Row {
    const ALL: [Row; 4] = [Row::Memory, Row::Sqlite, Row::Redis, Row::RedisNoRefresh];
    fn name(self) -> &'static str {
        match self {
            Row::Memory => "memory (baseline)",
            Row::Sqlite => "sqlite",
            Row::Redis => "redis (refresh 2s)",
            Row::RedisNoRefresh => "redis (refresh 0)",
        }
    }
    fn toml(self, dir: &Path, redis: &Redis) -> String {
        match self {
            Row::Memory => "[state]\nbackend = \"memory\"\n".into(),
            Row::Sqlite => format!(
                "[state]\nbackend = \"sqlite\"\npath = {:?}\n",
                dir.join("bench.db").display().to_string()
            ),
            Row::Redis => format!("[state]\nbackend = \"redis\"\nurl = \"{}\"\n", redis.url()),
            Row::RedisNoRefresh => format!(
                "[state]\nbackend = \"redis\"\nurl = \"{}\"\nrefresh = \"0s\"\n",
                redis.url()
            ),
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Latencies of the reuse phase; also returns one real chain.
async fn replay(row: Row, llm: &Llm, redis: &Redis) -> (Vec<Duration>, Option<FoldChain>) {
    let dir = tempfile::tempdir().unwrap();
    redis.command(&["FLUSHALL"]);
    let fg = Foldgate::start(&config(llm, &row.toml(dir.path(), redis))).await;
    let mut convos: Vec<Convo> = (0..CONVERSATIONS).map(|_| Convo::with_turns(55)).collect();
    for (i, c) in convos.iter().enumerate() {
        assert_eq!(label(&chat(&fg, &format!("c{i}"), c).await), "new");
    }
    let mut times = Vec::with_capacity(CONVERSATIONS * TURNS);
    for turn in 0..TURNS {
        for (i, c) in convos.iter_mut().enumerate() {
            c.next_turn(&format!("turn {turn}"));
            let started = Instant::now();
            let reply = chat(&fg, &format!("c{i}"), c).await;
            times.push(started.elapsed());
            assert_eq!(label(&reply), "reused", "{}", row.name());
        }
    }
    let admin = common::send(
        http::Method::GET,
        &format!("{}/foldgate/conversations/c0", fg.url),
        &[("authorization", "Bearer sk-tenant-a")],
        "",
    )
    .await;
    let chain = serde_json::from_value(admin.json()["states"][0]["folds"].clone()).ok();
    times.sort();
    (times, chain)
}

/// A chain of 4 folds with 1.5 KB summaries, made from a real fold.
fn realistic(mut base: FoldState) -> FoldChain {
    let mut chain = FoldChain::new();
    for depth in 1..=4 {
        base.depth = depth;
        base.summary.summary = "The user is refactoring the parser module; ".repeat(20);
        base.summary.facts = (0..12)
            .map(|i| format!("fact {i}: src/parser/mod.rs line {}", i * 40))
            .collect();
        base.summary.decisions = (0..6)
            .map(|i| format!("decision {i}: keep the tokenizer streaming"))
            .collect();
        chain.push(base.clone());
    }
    chain
}

fn store_config(row: Row, dir: &Path, redis: &Redis) -> StateConfig {
    let mut c = StateConfig::default();
    match row {
        Row::Memory => c.backend = StateBackend::Memory,
        Row::Sqlite => c.path = dir.join("writes.db"),
        Row::Redis | Row::RedisNoRefresh => {
            c.backend = StateBackend::Redis;
            c.url = Some(foldgate::config::Secret::new(redis.url()));
        }
    }
    c
}

/// States per second, and bytes per stored conversation.
async fn writes(row: Row, chain: &FoldChain, redis: &Redis) -> (f64, Option<f64>) {
    let dir = tempfile::tempdir().unwrap();
    redis.command(&["FLUSHALL"]);
    let config = store_config(row, dir.path(), redis);
    let chain = Arc::new(chain.clone());
    let started = Instant::now();
    {
        let store: Arc<dyn Store> = state::open(&config).unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..16 {
            let (store, chain) = (store.clone(), chain.clone());
            tasks.spawn(async move {
                for i in (w..WRITES).step_by(16) {
                    let key = ConvKey {
                        tenant: "bench".into(),
                        conversation: format!("conv-{i}"),
                    };
                    store.save(&key, chain.clone()).await;
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        drop(store); // SQLite: drains its queue and commits before returning.
    }
    let rate = WRITES as f64 / started.elapsed().as_secs_f64();
    let bytes = match row {
        Row::Sqlite => {
            let conn = rusqlite::Connection::open(&config.path).unwrap();
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                .unwrap();
            let pages: f64 = conn
                .query_row("PRAGMA page_count", [], |r| r.get::<_, i64>(0))
                .unwrap() as f64;
            let size: f64 = conn
                .query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0))
                .unwrap() as f64;
            Some(pages * size / WRITES as f64)
        }
        Row::Redis | Row::RedisNoRefresh => {
            let sample: Vec<f64> = (0..50)
                .filter_map(|i| {
                    let reply = redis.command(&[
                        "MEMORY",
                        "USAGE",
                        &format!("foldgate:state:{{bench:conv-{i}}}"),
                    ])?;
                    reply.trim().trim_start_matches(':').parse().ok()
                })
                .collect();
            (!sample.is_empty()).then(|| sample.iter().sum::<f64>() / sample.len() as f64)
        }
        Row::Memory => None,
    };
    (rate, bytes)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let redis = Redis::start();
    let llm = Llm::start().await;
    let mut p50 = vec![Vec::new(); 4];
    let mut p99 = vec![Vec::new(); 4];
    let mut chain = None;
    for _ in 0..REPEATS {
        for (r, row) in Row::ALL.into_iter().enumerate() {
            let (times, c) = replay(row, &llm, &redis).await;
            p50[r].push(ms(percentile(&times, 0.5)));
            p99[r].push(ms(percentile(&times, 0.99)));
            chain = chain.or(c);
        }
    }
    let base = chain
        .and_then(|c: FoldChain| c.latest().cloned())
        .expect("a real fold to copy");
    let chain = realistic(base);
    let json = serde_json::to_vec(&chain).unwrap().len();
    let mut rates = vec![Vec::new(); 4];
    let mut sizes = [None; 4];
    for _ in 0..REPEATS {
        for (r, row) in Row::ALL.into_iter().enumerate() {
            let (rate, bytes) = writes(row, &chain, &redis).await;
            rates[r].push(rate);
            sizes[r] = sizes[r].or(bytes);
        }
    }
    let (b50, b99) = (median(p50[0].clone()), median(p99[0].clone()));
    println!(
        "reuse-heavy replay: {CONVERSATIONS} conversations x {TURNS} reused turns, median of {REPEATS} interleaved rounds; \
         {WRITES} writes by 16 writers; stored chain = 4 folds, {json} B of JSON\n"
    );
    println!(
        "| backend | p50 ms | p99 ms | added p50 ms | added p99 ms | states written/s | bytes per conversation |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (r, row) in Row::ALL.into_iter().enumerate() {
        let (a, b) = (median(p50[r].clone()), median(p99[r].clone()));
        let size = sizes[r].map_or_else(|| format!("{json} (JSON)"), |s| format!("{s:.0}"));
        println!(
            "| {} | {a:.3} | {b:.3} | {:+.3} | {:+.3} | {:.0} | {size} |",
            row.name(),
            a - b50,
            b - b99,
            median(rates[r].clone())
        );
    }
}
