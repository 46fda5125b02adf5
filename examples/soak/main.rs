//! Soak test: starts a real `redis-server` (the state backend and the
//! archive) and a foldgate binary on 127.0.0.1 in front of a faulty mock
//! upstream (resets, 500s, aborted and slow bodies, bad summaries, a
//! scripted model that calls `foldgate_recall`), drives mixed traffic at
//! it for a bounded time (turns of chat, Anthropic Messages and Responses
//! conversations with tool results that fold and compress, streams the
//! client hangs up on, passthrough, admin reads) while Redis is killed and
//! restarted, and reports requests, outcomes by kind, recall rounds and
//! fallbacks, archive rows against the messages folded and stubbed, and
//! the foldgate process's RSS and open file descriptors at start, after
//! warm-up, and at the end.
//!
//! Exits non-zero when foldgate panicked (its log says `panicked`), died,
//! failed its health check or a clean shutdown, grew beyond the bounds in
//! `run.rs`, when more than 0.5% of requests timed out or could not reach
//! it, when a client saw `foldgate_recall`, or when the archive rows Redis
//! stored differ from the rows of messages foldgate folded and stubbed
//! once the spool drained. Run it through `scripts/soak`, which builds the
//! release binary.
//!
//!   cargo run --example soak -- --foldgate target/release/foldgate --seconds 600

mod answers;
mod cluster;
mod convo;
mod redis;
mod rng;
mod run;
mod tiers;
mod traffic;
mod upstream;

use clap::Parser;

#[tokio::main]
async fn main() {
    let args = run::Args::parse();
    match run::run(args).await {
        Ok(true) => println!("soak: PASS"),
        Ok(false) => {
            println!("soak: FAIL");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("soak: error: {e}");
            std::process::exit(2);
        }
    }
}
