//! A 15-second run of the soak (`examples/soak`, full runs through
//! `scripts/soak`) against this build's foldgate binary: faulty upstream,
//! folding chat turns, hung-up streams, passthrough; it must end with no
//! panic, a healthy server, a clean shutdown and bounded RSS and fds.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly; the no-panic rule is for the request path"
)]

#[path = "../examples/soak/rng.rs"]
mod rng;
#[path = "../examples/soak/run.rs"]
mod run;
#[path = "../examples/soak/traffic.rs"]
mod traffic;
#[path = "../examples/soak/upstream.rs"]
mod upstream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_passes_its_checks() {
    let args = run::Args {
        foldgate: env!("CARGO_BIN_EXE_foldgate").into(),
        seconds: 15,
        workers: 4,
        seed: 0x50a4,
        dir: None,
        cache_bytes: 8 * 1024 * 1024,
    };
    let passed = run::run(args).await.unwrap();
    assert!(passed, "the soak's checks failed (its report is above)");
}
