//! A Redis outage is told once: the real binary on a real redis-server,
//! which is killed while requests keep coming (conversations that fold,
//! so their state writes and archive writes fail, and a conversation
//! asking about what it folded, so the archive is searched on every
//! request), then started again. The log holds one WARN when the outage
//! starts and one when it ends (with its counts), nothing else at WARN.

use crate::common;

use common::convo::{Convo, config, label};
use common::llm::Llm;
use common::redis::Redis;
use common::{metric, post_json, send};
use http::Method;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Requests sent while Redis is down.
const DURING: usize = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_logs_one_warning_when_it_starts_and_one_when_it_ends() {
    let llm = Llm::start().await;
    let mut redis = Redis::start();
    let port = common::free_port();
    let toml = config(
        &llm,
        &format!(
            "[state]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"200ms\"\nrefresh = \"100ms\"\n",
            redis.url()
        ),
    )
    .replace(
        "[providers.mock]",
        &format!("[server]\nlisten = \"127.0.0.1:{port}\"\n[providers.mock]"),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foldgate.toml");
    std::fs::write(&path, toml).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_foldgate"))
        .args(["serve", "--config"])
        .arg(&path)
        .env("FOLDGATE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    common::wait_listening(port).await;
    let base = format!("http://127.0.0.1:{port}");
    let chat = |conversation: String, convo: &Convo| {
        let body = convo.body();
        let url = format!("{base}/v1/chat/completions");
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
    };
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
    tokio::time::sleep(Duration::from_millis(800)).await;

    let log = common::terminate_and_read_log(&mut child).await;
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
