//! A Redis outage is told once: the real binary on a real redis-server,
//! which is killed while requests keep coming (conversations that fold,
//! so their state writes and archive writes fail, and a conversation
//! asking about what it folded, so the archive is searched on every
//! request), then started again. The log holds one WARN when the outage
//! starts and one when it ends (with its counts), nothing else at WARN.

use crate::common;

use common::convo::{Convo, config, label};
use common::llm::Llm;
use common::redis::{Cluster, Redis, SentinelSet};
use common::{Reply, metric, post_json, send};
use http::Method;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Requests sent while Redis is down.
const DURING: usize = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_logs_one_warning_when_it_starts_and_one_when_it_ends() {
    let llm = Llm::start().await;
    let mut redis = Redis::start();
    let mut fg = Served::start(&llm, &redis.url()).await;
    let base = fg.base.clone();
    let chat = |conversation: String, convo: &Convo| fg.chat(conversation, convo);
    let mut asked = Convo::with_turns(55);
    let reply = chat("quiet-asked".into(), &asked).await;
    reply.assert_ok();
    assert_eq!(label(&reply), "new");

    redis.kill();
    for i in 0..DURING {
        let reply = if i % 2 == 0 {
            asked
                .assistant("ok")
                .user(&format!("what did we say about turn {i}?"));
            chat("quiet-asked".into(), &asked).await
        } else {
            chat(format!("quiet-{i}"), &Convo::with_turns(55)).await
        };
        reply.assert_ok();
    }
    redis.restart();
    // Until the spooled archive rows are in Redis again.
    let started = Instant::now();
    loop {
        let metrics = send(Method::GET, &format!("{base}/foldgate/metrics"), &[], "").await;
        if metric(&metrics.text(), "foldgate_archive_spool_rows") == 0.0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the spool never drained"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    chat("quiet-after".into(), &Convo::with_turns(55))
        .await
        .assert_ok();
    // The outage ends once Redis answered for 2 s without a failure.
    tokio::time::sleep(Duration::from_millis(3000)).await;

    let log = common::terminate_and_read_log(&mut fg.child).await;
    assert_told_once(&log);
}

/// At most two WARN lines: the outage's start, and its end with counts.
fn assert_told_once(log: &str) {
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
    assert!(
        warnings.len() <= 2,
        "{} WARN lines for one outage:\n{}",
        warnings.len(),
        warnings.join("\n")
    );
    assert!(
        warnings
            .first()
            .is_some_and(|w| w.contains("Redis unavailable")),
        "the outage was not told:\n{log}"
    );
    let ended = warnings
        .iter()
        .find(|w| w.contains("Redis answers again"))
        .unwrap_or_else(|| panic!("the outage's end was not told:\n{log}"));
    assert!(
        ended.contains("failed_commands=") && ended.contains("lasted_ms="),
        "{ended}"
    );
}

/// The real binary on Redis at `url`, its log piped.
struct Served {
    child: tokio::process::Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Served {
    async fn start(llm: &Llm, url: &str) -> Self {
        let port = common::free_port();
        let toml = config(
            llm,
            &format!(
                "[state]\nbackend = \"redis\"\nurl = \"{url}\"\ntimeout = \"200ms\"\nrefresh = \"100ms\"\n"
            ),
        )
        .replace(
            "[providers.mock]",
            &format!("[server]\nlisten = \"127.0.0.1:{port}\"\n[providers.mock]"),
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("foldgate.toml");
        std::fs::write(&path, toml).unwrap();
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_foldgate"))
            .args(["serve", "--config"])
            .arg(&path)
            .env("FOLDGATE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        common::wait_listening(port).await;
        Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        }
    }

    fn chat(&self, conversation: String, convo: &Convo) -> impl Future<Output = Reply> + use<> {
        let body = convo.body();
        let url = format!("{}/v1/chat/completions", self.base);
        async move {
            post_json(
                &url,
                &[
                    ("x-conversation-id", &conversation),
                    ("authorization", "Bearer sk-tenant-a"),
                ],
                &body,
            )
            .await
        }
    }
}

/// A master of a Redis Cluster killed while requests keep coming: some
/// slots fail, others answer, the client logs its own connection errors;
/// one outage all the same, told once when it starts and once when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_logs_one_warning_when_it_starts_and_one_when_it_ends() {
    let llm = Llm::start().await;
    let cluster = Arc::new(Mutex::new(Cluster::start()));
    let url = cluster.lock().unwrap().url();
    let mut fg = Served::start(&llm, &url).await;
    let mut convos: Vec<Convo> = (0..6).map(|_| Convo::with_turns(55)).collect();
    for (i, convo) in convos.iter().enumerate() {
        fg.chat(format!("failover-{i}"), convo).await.assert_ok();
    }
    let key = cluster.lock().unwrap().keys("foldgate:state:*")[0].clone();
    let failing = cluster.clone();
    let failover = tokio::task::spawn_blocking(move || {
        let mut cluster = failing.lock().unwrap();
        cluster.kill_master_of(&key);
        cluster.wait_healthy();
    });
    let mut sent = 0;
    while !failover.is_finished() || sent < 24 {
        for (i, convo) in convos.iter_mut().enumerate() {
            convo.user(&format!("and then {sent}?"));
            let reply = tokio::time::timeout(
                Duration::from_secs(10),
                fg.chat(format!("failover-{i}"), convo),
            )
            .await
            .expect("a request outlived 10 s");
            reply.assert_ok();
            convo.assistant("ok");
            sent += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    failover.await.unwrap();
    for (i, convo) in convos.iter_mut().enumerate() {
        convo.user("one more");
        fg.chat(format!("failover-{i}"), convo).await.assert_ok();
    }
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let log = common::terminate_and_read_log(&mut fg.child).await;
    assert_told_once(&log);
}

/// The primary of a Sentinel service killed while conversations that
/// recall (an archive search on every request) keep coming: one outage,
/// told once when it starts and once when it ends; no line per search.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_logs_one_warning_when_it_starts_and_one_when_it_ends() {
    let llm = Llm::start().await;
    let set = Arc::new(Mutex::new(SentinelSet::start()));
    let url = set.lock().unwrap().url();
    let mut fg = Served::start(&llm, &url).await;
    let mut convos: Vec<Convo> = (0..4).map(|_| Convo::with_turns(55)).collect();
    for (i, convo) in convos.iter().enumerate() {
        fg.chat(format!("sentinel-{i}"), convo).await.assert_ok();
    }
    let failing = set.clone();
    let failover = tokio::task::spawn_blocking(move || failing.lock().unwrap().fail_over());
    let mut sent = 0;
    while !failover.is_finished() || sent < 16 {
        for (i, convo) in convos.iter_mut().enumerate() {
            convo.user(&format!("what did we say about question {sent}?"));
            let reply = tokio::time::timeout(
                Duration::from_secs(10),
                fg.chat(format!("sentinel-{i}"), convo),
            )
            .await
            .expect("a request outlived 10 s");
            reply.assert_ok();
            convo.assistant("ok");
            sent += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    failover.await.unwrap();
    for (i, convo) in convos.iter_mut().enumerate() {
        convo.user("one more");
        fg.chat(format!("sentinel-{i}"), convo).await.assert_ok();
    }
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let log = common::terminate_and_read_log(&mut fg.child).await;
    assert_told_once(&log);
}
