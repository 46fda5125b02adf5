//! No eviction touches the archive. The Redis layout of
//! examples/compose.yaml, read from the file (the states' Redis and the
//! archive's, each with the example's `maxmemory-policy`, a small
//! `maxmemory` so a test can fill it), filled past `maxmemory` after
//! conversations were folded: every archived row stays. And the warning
//! when the archive's Redis would evict: `foldgate check-config` and the
//! start-up log say so.

use crate::common;

use common::convo::{Convo, chat, config, label};
use common::llm::Llm;
use common::redis::Redis;
use common::{Foldgate, metric};
use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The flags of the `command: [...]` that follows `anchor` in the file.
fn command_after(compose: &str, anchor: &str) -> Vec<String> {
    let at = compose
        .find(anchor)
        .unwrap_or_else(|| panic!("examples/compose.yaml lost {anchor}"));
    let rest = &compose[at..];
    let open = rest.find("command: [").unwrap() + "command: [".len();
    let close = open + rest[open..].find(']').unwrap();
    rest[open..close]
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .collect()
}

/// The value after `flag` in a command.
fn flag<'a>(command: &'a [String], flag: &str) -> &'a str {
    let i = command
        .iter()
        .position(|s| s == flag)
        .unwrap_or_else(|| panic!("no {flag} in {command:?}"));
    &command[i + 1]
}

/// The example's layout: the states' Redis policy, and the archive's
/// (`None`: the archive shares the states' Redis, as it does when the
/// example names no `FOLDGATE_ARCHIVE__URL`).
fn example() -> (String, Option<String>) {
    let compose = std::fs::read_to_string("examples/compose.yaml").unwrap();
    let states = command_after(&compose, "x-redis: &redis");
    let states = flag(&states, "--maxmemory-policy").to_string();
    let archive = compose
        .contains("FOLDGATE_ARCHIVE__URL: redis://redis-archive:")
        .then(|| {
            let archive = command_after(&compose, "\n  redis-archive:");
            flag(&archive, "--maxmemory-policy").to_string()
        });
    (states, archive)
}

/// Every archive list in `redis` and its length.
async fn archive_rows(redis: &Redis) -> BTreeMap<String, u64> {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("foldgate:archive:*")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut rows = BTreeMap::new();
    for key in keys {
        let n: u64 = redis::cmd("LLEN")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        rows.insert(key, n);
    }
    rows
}

/// Writes `bytes` of junk keys into `redis` (a Redis that refuses them,
/// full under `noeviction`, only refuses them); returns the keys it evicted.
async fn fill(redis: &Redis, bytes: usize) -> u64 {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let value = "x".repeat(10_000);
    for round in 0..bytes / (100 * value.len()) {
        let mut pipe = redis::pipe();
        for i in 0..100 {
            pipe.set(format!("junk:{round}:{i}"), &value).ignore();
        }
        let _refused_when_full: Result<(), _> = pipe.query_async(&mut conn).await;
    }
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("evicted_keys:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filling_the_examples_redis_past_maxmemory_keeps_every_archived_row() {
    let (states_policy, archive_policy) = example();
    assert!(
        states_policy.starts_with("allkeys-"),
        "the example's states' Redis is a cache: {states_policy}"
    );
    let states = Redis::start_with(&["--maxmemory", "8mb", "--maxmemory-policy", &states_policy]);
    let archive = archive_policy
        .as_ref()
        .map(|p| Redis::start_with(&["--maxmemory", "8mb", "--maxmemory-policy", p]));
    let archive_url = archive
        .as_ref()
        .map(|a| format!("url = \"{}\"\n", a.url()))
        .unwrap_or_default();
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(
        &llm,
        &format!(
            "[state]\nbackend = \"redis\"\nurl = \"{}\"\n[archive]\n{archive_url}",
            states.url()
        ),
    ))
    .await;
    for i in 0..6 {
        let reply = chat(&fg, &format!("evict-{i}"), &Convo::with_turns(55)).await;
        reply.assert_ok();
        assert_eq!(label(&reply), "new");
    }
    let started = Instant::now();
    while metric(&fg.metrics().await, "foldgate_archive_spool_rows") != 0.0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "spool never drained"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let archive = archive.as_ref().unwrap_or(&states);
    let before = archive_rows(archive).await;
    assert_eq!(before.len(), 6, "{before:?}");
    assert!(before.values().all(|&n| n > 0), "{before:?}");

    // Past maxmemory, three times over, in both.
    let evicted = fill(&states, 24 << 20).await;
    assert!(evicted > 0, "the states' Redis evicted nothing: not full");
    if !std::ptr::eq(archive, &states) {
        fill(archive, 24 << 20).await;
    }
    let after = archive_rows(archive).await;
    assert_eq!(after, before, "archived rows were evicted");
}

/// A config on Redis at `states` (and the archive at `archive`, if given).
fn redis_config(llm: &Llm, states: &Redis, archive: Option<&Redis>, port: u16) -> String {
    let archive = archive
        .map(|a| format!("[archive]\nurl = \"{}\"\n", a.url()))
        .unwrap_or_default();
    config(
        llm,
        &format!(
            "[state]\nbackend = \"redis\"\nurl = \"{}\"\n{archive}",
            states.url()
        ),
    )
    .replace(
        "[providers.mock]",
        &format!("[server]\nlisten = \"127.0.0.1:{port}\"\n[providers.mock]"),
    )
}

/// `foldgate check-config` on `toml`: what it printed.
fn check_config(toml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foldgate.toml");
    std::fs::write(&path, toml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_foldgate"))
        .args(["check-config", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn check_config_warns_when_the_archives_redis_evicts() {
    let llm = Llm::start().await;
    let lru = Redis::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let keeps = Redis::start_with(&["--maxmemory-policy", "noeviction"]);
    let shared = check_config(&redis_config(&llm, &lru, None, 1));
    assert!(
        shared.contains(
            "# warning: the archive's Redis (state.url) has maxmemory-policy allkeys-lru"
        ),
        "{shared}"
    );
    let apart = check_config(&redis_config(&llm, &lru, Some(&keeps), 1));
    assert!(!apart.contains("maxmemory-policy"), "{apart}");
    // The URL, without a password, printed as it is.
    assert!(
        apart.contains(&format!("url = \"{}\"", keeps.url())),
        "{apart}"
    );
}

/// A Redis that refuses `CONFIG` (as managed ones often do): a note, and
/// the configuration is still valid.
#[tokio::test]
async fn check_config_notes_a_redis_that_refuses_config() {
    let llm = Llm::start().await;
    let managed = Redis::start_with(&["--rename-command", "CONFIG", ""]);
    let out = check_config(&redis_config(&llm, &managed, None, 1));
    assert!(out.starts_with("# configuration is valid"), "{out}");
    assert!(
        out.contains(
            "# note: could not ask the archive's Redis (state.url) for its maxmemory-policy"
        ),
        "{out}"
    );
}

#[tokio::test]
async fn start_up_warns_when_the_archives_redis_evicts() {
    let llm = Llm::start().await;
    let lru = Redis::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foldgate.toml");
    let port = common::free_port();
    std::fs::write(&path, redis_config(&llm, &lru, None, port)).unwrap();
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
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = common::terminate_and_read_log(&mut child).await;
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("maxmemory-policy allkeys-lru"))
        .collect();
    assert_eq!(warned.len(), 1, "{log}");
}
