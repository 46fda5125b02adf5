//! Three foldgate replicas on a real Redis Cluster (three masters, a
//! replica each) and on a real Sentinel set (primary, replica, three
//! sentinels), all started here on loopback: conversations spread across
//! the replicas fold once; the master holding a conversation is killed
//! mid-conversation; every request is still answered, every fold costs one
//! summarizer call, no archive row is lost, and afterwards every replica
//! reads the shared state. A foldgate replica (a real process) killed
//! mid-fold leaves its fold lock to expire. Each test is bounded and its
//! processes die with it.

use crate::common;

use common::convo::{Convo, chat, config, label};
use common::llm::Llm;
use common::redis::{Cluster, SentinelSet};
use common::{Foldgate, Reply, metric};
use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The most a whole scenario may take, failover included.
const BOUND: Duration = Duration::from_secs(150);

const CONVERSATIONS: usize = 6;

fn replica_config(llm: &Llm, url: &str) -> String {
    config(
        llm,
        &format!(
            "[state]\nbackend = \"redis\"\nurl = \"{url}\"\nrefresh = \"200ms\"\ntimeout = \"500ms\"\nlock_wait = \"10s\"\n"
        ),
    )
}

/// What the replicas answered, for the checks at the end.
#[derive(Default)]
struct Tally {
    replies: usize,
    folds: usize,
}

impl Tally {
    /// Every request is answered; a fold is counted.
    fn take(&mut self, reply: &Reply) {
        reply.assert_ok();
        self.replies += 1;
        if label(reply) == "new" {
            self.folds += 1;
        }
    }
}

/// Rows handed to the archive by every replica, once their spools are empty.
async fn rows_handed(replicas: &[Foldgate]) -> f64 {
    let mut handed = 0.0;
    for fg in replicas {
        let mut waited = Duration::ZERO;
        loop {
            let metrics = fg.metrics().await;
            if metric(&metrics, "foldgate_archive_spool_rows") == 0.0 {
                handed += metric(&metrics, "foldgate_archive_rows_total{by=\"fold\"}");
                break;
            }
            assert!(
                waited < Duration::from_secs(20),
                "a spool never drained:\n{metrics}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            waited += Duration::from_millis(100);
        }
    }
    handed
}

/// The scenario on any deployment: `fail` kills the master holding the
/// first conversation and returns once Redis has failed over; `archived`
/// counts the archive rows in Redis; `stored` lists the state keys.
async fn scenario<F: Future<Output = ()> + Send + 'static>(
    url: String,
    fail: impl FnOnce(String) -> F,
    archived: impl Fn() -> usize,
    stored: impl Fn() -> Vec<String>,
) {
    let llm = Llm::start().await;
    // A slow summarizer keeps a fold in flight while the other replicas'
    // requests for the same conversation arrive.
    llm.state.summarizer_delay_ms.store(300, Ordering::Relaxed);
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(Foldgate::start(&replica_config(&llm, &url)).await);
    }
    let mut tally = Tally::default();
    let mut convos: Vec<Convo> = (0..CONVERSATIONS).map(|_| Convo::with_turns(55)).collect();
    let id = |i: usize| format!("spread-{i}");

    // Every conversation from all three replicas at once: one fold each.
    for (i, convo) in convos.iter().enumerate() {
        let conversation = id(i);
        let (a, b, c) = tokio::join!(
            chat(&replicas[0], &conversation, convo),
            chat(&replicas[1], &conversation, convo),
            chat(&replicas[2], &conversation, convo),
        );
        let mut labels = [label(&a), label(&b), label(&c)].map(str::to_string);
        labels.sort();
        assert_eq!(
            labels,
            ["new", "reused", "reused"],
            "conversation {i}: one fold across replicas"
        );
        for r in [&a, &b, &c] {
            tally.take(r);
        }
    }
    assert_eq!(
        llm.summarizer_calls(),
        CONVERSATIONS,
        "one summarizer call per conversation"
    );
    let keys = stored();
    assert_eq!(
        keys.len(),
        CONVERSATIONS,
        "one shared state per conversation: {keys:?}"
    );
    let first = keys.iter().find(|k| k.contains(&id(0))).unwrap().clone();

    // Mid-conversation: the master holding the first conversation dies
    // while turns keep coming, each conversation on the next replica.
    let failing = tokio::spawn(fail(first));
    let mut turn = 0;
    while !failing.is_finished() || turn < 2 {
        for (i, convo) in convos.iter_mut().enumerate() {
            convo.next_turn(&format!("turn {turn} during the failover"));
            let reply = chat(&replicas[(i + turn) % 3], &id(i), convo).await;
            tally.take(&reply);
        }
        turn += 1;
    }
    failing.await.unwrap();

    // After it: the replicas notice Redis answers (their probe runs every
    // 500 ms), then each conversation, asked on every replica in turn, is
    // served from the shared state with no fold.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (i, convo) in convos.iter_mut().enumerate() {
        convo.next_turn("after the failover");
        let reply = chat(&replicas[i % 3], &id(i), convo).await;
        tally.take(&reply);
    }
    let settled = llm.summarizer_calls();
    for fg in &replicas {
        for (i, convo) in convos.iter().enumerate() {
            let reply = chat(fg, &id(i), convo).await;
            tally.take(&reply);
            assert_eq!(
                label(&reply),
                "reused",
                "conversation {i} on every replica reads the shared state"
            );
        }
    }
    assert_eq!(
        llm.summarizer_calls(),
        settled,
        "no replica folds a shared state again"
    );
    assert_eq!(
        llm.summarizer_calls(),
        tally.folds,
        "one summarizer call per fold, through the failover ({} replies)",
        tally.replies
    );
    assert_eq!(stored().len(), CONVERSATIONS, "the shared states converged");
    let handed = rows_handed(&replicas).await;
    assert!(handed > 0.0, "folds archived rows");
    assert_eq!(
        archived() as f64,
        handed,
        "archive rows in Redis = rows handed"
    );
}

/// Runs `scenario` under [`BOUND`].
async fn bounded(f: impl Future<Output = ()>) {
    tokio::time::timeout(BOUND, f)
        .await
        .expect("the scenario outlived its bound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_on_a_cluster_fold_once_through_a_master_failover() {
    let cluster = std::sync::Arc::new(std::sync::Mutex::new(Cluster::start()));
    let url = cluster.lock().unwrap().url();
    let failing = cluster.clone();
    let fail = |key: String| async move {
        tokio::task::spawn_blocking(move || {
            let mut cluster = failing.lock().unwrap();
            cluster.kill_master_of(&key);
            cluster.wait_healthy();
        })
        .await
        .unwrap();
    };
    let archived = || {
        let cluster = cluster.lock().unwrap();
        cluster
            .keys("foldgate:archive:*")
            .iter()
            .map(|k| {
                cluster
                    .on_key(k, &["LLEN", k])
                    .trim()
                    .parse::<usize>()
                    .unwrap()
            })
            .sum()
    };
    let stored = || cluster.lock().unwrap().keys("foldgate:state:*");
    bounded(scenario(url, fail, archived, stored)).await;
    assert!(
        cluster.lock().unwrap().keys("foldgate:lock:*").is_empty(),
        "every fold lock released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_on_sentinel_fold_once_through_a_failover() {
    let set = std::sync::Arc::new(std::sync::Mutex::new(SentinelSet::start()));
    let url = set.lock().unwrap().url();
    let failing = set.clone();
    let fail = |_key: String| async move {
        tokio::task::spawn_blocking(move || failing.lock().unwrap().fail_over())
            .await
            .unwrap();
    };
    let primary = || set.lock().unwrap().primary_port();
    let archived = || {
        let port = primary();
        common::redis::cli(port, &["--scan", "--pattern", "foldgate:archive:*"])
            .lines()
            .map(|k| {
                common::redis::cli(port, &["LLEN", k])
                    .trim()
                    .parse::<usize>()
                    .unwrap()
            })
            .sum()
    };
    let stored = || {
        common::redis::cli(primary(), &["--scan", "--pattern", "foldgate:state:*"])
            .lines()
            .map(str::to_string)
            .collect()
    };
    bounded(scenario(url, fail, archived, stored)).await;
}

/// A foldgate replica (a real process) killed by SIGKILL while it holds a
/// conversation's fold lock on the cluster: it never releases the lock,
/// which expires after `state.lock_ttl` (no one renews it), so another
/// replica folds the conversation well before its `lock_wait` runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_fold_leaves_its_lock_to_expire() {
    let cluster = Cluster::start();
    let llm = Llm::start().await;
    // Long enough that the kill lands while the fold is in flight.
    llm.state.summarizer_delay_ms.store(3000, Ordering::Relaxed);
    let state = format!(
        "[state]\nbackend = \"redis\"\nurl = \"{}\"\nrefresh = \"200ms\"\ntimeout = \"500ms\"\n\
         lock_ttl = \"2s\"\nlock_wait = \"60s\"\n",
        cluster.url()
    );
    let port = common::free_port();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replica.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n{}",
            config(&llm, &state)
        ),
    )
    .unwrap();
    let mut doomed = std::process::Command::new(env!("CARGO_BIN_EXE_foldgate"))
        .args(["serve", "--config"])
        .arg(&path)
        .env("FOLDGATE_LOG", "error")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    common::wait_listening(port).await;
    let survivor = Foldgate::start(&config(&llm, &state)).await;

    let convo = Convo::with_turns(55);
    let body = convo.body();
    let doomed_url = format!("http://127.0.0.1:{port}/v1/chat/completions");
    let in_flight = tokio::spawn(async move {
        common::post_json(
            &doomed_url,
            &[
                ("x-conversation-id", "orphaned"),
                ("authorization", "Bearer sk-tenant-a"),
            ],
            &body,
        )
        .await
    });
    let waited = std::time::Instant::now();
    while llm.summarizer_calls() == 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "the doomed replica never folded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The client gives up first, so only the replica's death is seen.
    in_flight.abort();
    doomed.kill().unwrap();
    doomed.wait().unwrap();
    assert_eq!(
        cluster.keys("foldgate:lock:*").len(),
        1,
        "the dead replica's lock is left behind"
    );

    // Bounded well below lock_wait (60 s): only the lock's expiry lets
    // the survivor fold this soon.
    let reply = tokio::time::timeout(Duration::from_secs(20), chat(&survivor, "orphaned", &convo))
        .await
        .expect("the survivor waited for a dead replica's lock");
    reply.assert_ok();
    assert_eq!(
        label(&reply),
        "new",
        "the survivor folds the orphaned conversation"
    );
    assert_eq!(
        llm.summarizer_calls(),
        2,
        "the dead replica's call, then the survivor's one fold"
    );
    assert!(
        cluster.keys("foldgate:lock:*").is_empty(),
        "the survivor released its lock"
    );
    assert_eq!(cluster.keys("foldgate:state:*").len(), 1);
}
