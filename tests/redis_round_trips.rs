//! Redis round trips per request, counted by the server itself (`INFO
//! commandstats` deltas on a real redis-server), on two foldgate replicas:
//! an untouched turn, a fold, a reuse turn on the replica that folded (warm)
//! and on one that never saw the conversation (cold). The goal: none on a
//! warm replica however long since it last asked Redis, one on a cold one;
//! and a state another replica folds reaches a warm replica at once.

use crate::common;

use common::Foldgate;
use common::convo::{Convo, chat, config, label};
use common::llm::Llm;
use common::redis::{Cluster, Redis, SentinelSet, cli};
use hyper::Method;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `refresh` short (10 ms) and each counted turn sent after it passed, so a
/// warm replica that still asked Redis once `refresh` is over would show it.
/// Recall by the tool alone: these turns count the fold state's round
/// trips. Under the default `recall = "auto"` a folded chat without tools
/// (these turns' shape) also searches its archive once a turn to inject
/// excerpts, one `LRANGE` of its list on Redis: the injection's cost,
/// stated in docs/architecture.md, not the state's.
fn redis_config(llm: &Llm, url: &str, refresh: &str) -> String {
    config(
        llm,
        &format!(
            "[state]\nbackend = \"redis\"\nurl = \"{url}\"\nrefresh = \"{refresh}\"\ntimeout = \"2s\"\nlock_wait = \"10s\"\n[archive]\nrecall = \"tool\"\n"
        ),
    )
}

/// Starts two replicas on `url` and waits until both are subscribed to
/// state changes (`PUBSUB NUMSUB`, summed over the servers on `ports`).
async fn two_replicas(llm: &Llm, url: &str, refresh: &str, ports: &[u16]) -> (Foldgate, Foldgate) {
    let a = Foldgate::start(&redis_config(llm, url, refresh)).await;
    let b = Foldgate::start(&redis_config(llm, url, refresh)).await;
    // Started: each has read the learned windows (`HGETALL`, once at start).
    for fg in [&a, &b] {
        let health = format!("{}/foldgate/health", fg.url);
        assert_eq!(
            common::send(Method::GET, &health, &[], "").await.status,
            200
        );
    }
    let subscribed = || -> u64 {
        ports
            .iter()
            .map(|&port| {
                let out = cli(port, &["PUBSUB", "NUMSUB", "foldgate:folded"]);
                out.lines()
                    .nth(1)
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(0)
            })
            .sum()
    };
    for _ in 0..100 {
        if subscribed() >= 2 {
            return (a, b);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the replicas did not subscribe to foldgate:folded within 5 s");
}

/// Every command the replicas send, as Redis's `MONITOR` shows them: the
/// name of each command a client sent (the commands a Lua script runs
/// inside are not round trips and are left out; a `MULTI`…`EXEC`
/// transaction is one pipeline and counts as one, `multi`). `ping` (the
/// replicas' liveness probes) and `cluster` (the cluster client's topology
/// reads) run on timers and after failures, not per request.
struct Monitor {
    seen: Arc<Mutex<Vec<String>>>,
}

impl Monitor {
    /// Watches the servers on `ports` (every master of a cluster: a
    /// replica would show its master's commands again).
    fn start(ports: &[u16]) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        for &port in ports {
            Self::watch(port, seen.clone());
        }
        Self { seen }
    }

    fn watch(port: u16, sink: Arc<Mutex<Vec<String>>>) {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.write_all(b"*1\r\n$7\r\nMONITOR\r\n").unwrap();
        std::thread::spawn(move || {
            let mut in_multi = false;
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { return };
                // +1732630000.123456 [0 127.0.0.1:54321] "GETEX" "key" …
                let Some((source, rest)) = line.split_once("] ") else {
                    continue;
                };
                // A script's own commands, and Sentinel's hello messages.
                if source.ends_with(" lua") || rest.contains("\"__sentinel__:hello\"") {
                    continue;
                }
                let name = rest.split('"').nth(1).unwrap_or("").to_lowercase();
                match name.as_str() {
                    "ping" | "cluster" => continue,
                    "multi" => in_multi = true,
                    "exec" | "discard" => {
                        in_multi = false;
                        continue;
                    }
                    _ if in_multi => continue,
                    _ => {}
                }
                sink.lock().unwrap().push(name);
            }
        });
    }

    fn len(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Waits until Redis has seen nothing new for 200 ms; returns the count.
    async fn settle(&self) -> usize {
        let mut last = self.len();
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let now = self.len();
            if now == last {
                return now;
            }
            last = now;
        }
    }

    /// The commands Redis got for one request, including the writes it
    /// caused after its reply (the archive's writer), by name.
    async fn commands_of<F: std::future::Future<Output = common::Reply>>(
        &self,
        request: F,
    ) -> (common::Reply, BTreeMap<String, u64>) {
        let from = self.settle().await;
        // Past `refresh`: what a warm replica does is not the refresh bound's.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let reply = request.await;
        reply.assert_ok();
        let to = self.settle().await;
        let mut counts = BTreeMap::new();
        for name in &self.seen.lock().unwrap()[from..to] {
            *counts.entry(name.clone()).or_insert(0) += 1;
        }
        (reply, counts)
    }
}

fn total(commands: &BTreeMap<String, u64>) -> u64 {
    commands.values().sum()
}

/// The four kinds of turn on two replicas of Redis at `url`, counted on
/// the servers on `ports`.
async fn count_round_trips(url: &str, ports: &[u16]) {
    let llm = Llm::start().await;
    let (a, b) = two_replicas(&llm, url, "10ms", ports).await;
    let monitor = Monitor::start(ports);

    let mut short = Convo::with_turns(2);
    let (_, cold) = monitor.commands_of(chat(&a, "short", &short)).await;
    eprintln!("untouched turn, first seen: {cold:?}");
    short.next_turn("more");
    let (_, warm) = monitor.commands_of(chat(&a, "short", &short)).await;
    eprintln!("untouched turn, warm: {warm:?}");

    let mut long = Convo::with_turns(55);
    let (reply, fold) = monitor.commands_of(chat(&a, "long", &long)).await;
    assert_eq!(label(&reply), "new");
    eprintln!("fold turn: {fold:?}");
    long.next_turn("next");
    let (reply, reuse_warm) = monitor.commands_of(chat(&a, "long", &long)).await;
    assert_eq!(label(&reply), "reused");
    eprintln!("reuse turn, warm (the replica that folded): {reuse_warm:?}");
    long.next_turn("next");
    let (reply, reuse_cold) = monitor.commands_of(chat(&b, "long", &long)).await;
    assert_eq!(label(&reply), "reused");
    eprintln!("reuse turn, cold (never saw it): {reuse_cold:?}");
    long.next_turn("next");
    let (reply, reuse_warmed) = monitor.commands_of(chat(&b, "long", &long)).await;
    assert_eq!(label(&reply), "reused");
    eprintln!("reuse turn, warm (after its cold turn): {reuse_warmed:?}");

    // A second fold on the same replica: what a fold costs once the
    // connections are up and the scripts loaded.
    for i in 0..60 {
        long.next_turn(&format!("more {i}"));
        let (reply, fold) = monitor.commands_of(chat(&a, "long", &long)).await;
        if label(&reply) == "new" {
            eprintln!("fold turn, again: {fold:?}");
            break;
        }
    }

    let getex = BTreeMap::from([("getex".to_string(), 1)]);
    assert_eq!(cold, getex, "a conversation first seen: one read");
    assert_eq!(total(&warm), 0, "untouched and warm: {warm:?}");
    assert_eq!(
        total(&reuse_warm),
        0,
        "reuse, warm after folding: {reuse_warm:?}"
    );
    assert_eq!(reuse_cold, getex, "reuse, cold: one read");
    assert_eq!(total(&reuse_warmed), 0, "reuse, warm: {reuse_warmed:?}");
    assert_eq!(llm.summarizer_calls(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reuse_costs_no_round_trip_warm_and_one_cold() {
    let redis = Redis::start();
    count_round_trips(&redis.url(), &[redis.port]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_too() {
    let cluster = Cluster::start();
    let masters: Vec<u16> = cluster
        .nodes
        .iter()
        .map(|n| n.port)
        .filter(|&port| cli(port, &["INFO", "replication"]).contains("role:master"))
        .collect();
    assert_eq!(masters.len(), 3);
    count_round_trips(&cluster.url(), &masters).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sentinel_too() {
    let sentinel = SentinelSet::start();
    count_round_trips(&sentinel.url(), &[sentinel.primary_port()]).await;
}

/// A warm replica trusts its cached state only because it hears every
/// change: when another replica folds the conversation again, its next
/// turn reads the new state (one round trip) and sends the same view the
/// folding replica sent, however long `refresh` is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fold_on_another_replica_reaches_a_warm_one_at_once() {
    let redis = Redis::start();
    let llm = Llm::start().await;
    let (a, b) = two_replicas(&llm, &redis.url(), "1h", &[redis.port]).await;
    let monitor = Monitor::start(&[redis.port]);

    let mut convo = Convo::with_turns(55);
    assert_eq!(label(&chat(&a, "c", &convo).await), "new");
    convo.next_turn("on b");
    assert_eq!(label(&chat(&b, "c", &convo).await), "reused");
    // A folds again; B keeps the first fold cached meanwhile.
    let mut folds = 1;
    for i in 0..60 {
        convo.next_turn(&format!("on a {i}"));
        if label(&chat(&a, "c", &convo).await) == "new" {
            folds += 1;
            break;
        }
    }
    assert_eq!(folds, 2, "a folds a second time");
    let a_view = llm.chat_requests().last().unwrap()["messages"].clone();
    // Pub/sub is asynchronous: give the message time to land.
    tokio::time::sleep(Duration::from_millis(200)).await;
    convo.next_turn("on b again");
    let (reply, commands) = monitor.commands_of(chat(&b, "c", &convo)).await;
    assert_eq!(label(&reply), "reused");
    assert_eq!(
        commands,
        BTreeMap::from([("getex".to_string(), 1)]),
        "b reads the new state once"
    );
    let b_view = llm.chat_requests().last().unwrap()["messages"].clone();
    let b_view = b_view.as_array().unwrap();
    let a_view = a_view.as_array().unwrap();
    assert_eq!(
        &b_view[..b_view.len() - 2],
        &a_view[..],
        "b sends a's view (plus the new turn): a's second fold"
    );
    assert_eq!(llm.summarizer_calls(), 2);
}

/// A Redis 7 ACL user without channel rights (the default for new users)
/// can neither publish nor subscribe: its state writes still land, nothing
/// is marked down (the fold lock is released), and replicas share folds,
/// reading Redis again after `refresh` instead of being told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_channel_rights_writes_land_and_replicas_still_share() {
    let redis = Redis::start();
    let acl = redis
        .command(&["ACL", "SETUSER", "fg", "on", ">pw", "~foldgate:*", "+@all"])
        .unwrap();
    assert!(acl.starts_with("+OK"), "{acl}");
    let url = format!("redis://fg:pw@127.0.0.1:{}/0", redis.port);
    let llm = Llm::start().await;
    let a = Foldgate::start(&redis_config(&llm, &url, "10ms")).await;
    let b = Foldgate::start(&redis_config(&llm, &url, "10ms")).await;
    let mut convo = Convo::with_turns(55);
    assert_eq!(label(&chat(&a, "acl", &convo).await), "new");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let locks = redis.command(&["KEYS", "foldgate:lock:*"]).unwrap();
    assert!(
        locks.starts_with("*0"),
        "the fold lock is released: {locks}"
    );
    let states = redis.command(&["KEYS", "foldgate:state:*"]).unwrap();
    assert!(states.contains("acl"), "the state is written: {states}");
    for fg in [&b, &a, &b] {
        convo.next_turn("next");
        assert_eq!(label(&chat(fg, "acl", &convo).await), "reused");
    }
    assert_eq!(llm.summarizer_calls(), 1);
}
