//! Soak test: starts a foldgate binary on 127.0.0.1 in front of a faulty
//! mock upstream (resets, 500s, aborted and slow bodies, bad summaries),
//! drives mixed traffic at it for a bounded time (chat turns that fold,
//! streams the client hangs up on, passthrough, admin reads), and reports
//! requests, outcomes by kind, and the foldgate process's RSS and open file
//! descriptors at start, after warm-up, and at the end.
//!
//! Exits non-zero when foldgate panicked (its log says `panicked`), died,
//! failed its health check or a clean shutdown, grew beyond the bounds
//! below, or when more than 0.5% of requests timed out or could not reach
//! it. Run it through `scripts/soak`, which builds the release binary.
//!
//!   cargo run --example soak -- --foldgate target/release/foldgate --seconds 600

mod rng;
mod run;
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
