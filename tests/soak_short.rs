//! A 15-second run of the soak (`examples/soak`, full runs through
//! `scripts/soak`) against this build's foldgate binary: faulty upstream,
//! folding turns of the three APIs with compression and recall rounds,
//! hung-up streams, passthrough, Redis as the state backend restarted
//! once in the middle (needs `redis-server`); it must end with no panic, a
//! healthy server, a clean shutdown, bounded RSS and fds, no recall call
//! shown to a client and no archive row lost (list entries in Redis at
//! least the rows of messages folded and stubbed).

#[path = "../examples/soak/answers.rs"]
mod answers;
#[path = "../examples/soak/cluster.rs"]
mod cluster;
#[path = "../examples/soak/convo.rs"]
mod convo;
#[path = "../examples/soak/redis.rs"]
mod redis;
#[path = "../examples/soak/rng.rs"]
mod rng;
#[path = "../examples/soak/run.rs"]
mod run;
#[path = "../examples/soak/tiers.rs"]
mod tiers;
#[path = "../examples/soak/traffic.rs"]
mod traffic;
#[path = "../examples/soak/upstream.rs"]
mod upstream;

/// A short soak of `seconds` (a Redis Cluster with a failover instead of
/// Redis restarts when `cluster`) passes its checks.
async fn short_soak(seconds: u64, cluster: bool) {
    let args = run::Args {
        foldgate: env!("CARGO_BIN_EXE_foldgate").into(),
        seconds,
        workers: 4,
        seed: 0x50a4,
        dir: None,
        conversation_items: convo::MAX_ITEMS,
        conversations: 1,
        cache_bytes: 8 * 1024 * 1024,
        cluster,
        down: None,
    };
    let passed = run::run(args).await.unwrap();
    assert!(passed, "the soak's checks failed (its report is above)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_passes_its_checks() {
    short_soak(15, false).await;
}

/// The same on a Redis Cluster, a master killed in the middle (its replica
/// takes over) instead of a restart (`scripts/soak SECONDS --cluster`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_with_a_cluster_failover_passes_its_checks() {
    short_soak(20, true).await;
}
