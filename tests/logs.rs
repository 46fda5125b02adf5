//! What the log says, read from the real binary's output: the start-up
//! line, every event a request causes (the fold included) carrying the
//! request's id, in text or as JSON lines.

use crate::common;

use common::convo::{self, Convo, label};
use common::llm::Llm;
use common::post_json;
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;

/// Runs `foldgate serve` on a config in front of `llm` (plus `extra`
/// sections) written to `path`, sends one folding request with id
/// `request_id`, stops the server (SIGTERM) and returns everything it
/// logged.
async fn serve_one_fold(llm: &Llm, path: &Path, extra: &str, request_id: &str) -> String {
    let port = common::free_port();
    let toml = convo::config(llm, &format!("[state]\nbackend = \"memory\"\n{extra}")).replace(
        "[providers.mock]",
        &format!("[server]\nlisten = \"127.0.0.1:{port}\"\n[providers.mock]"),
    );
    std::fs::write(path, toml).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_foldgate"))
        .args(["serve", "--config"])
        .arg(path)
        .env("FOLDGATE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    common::wait_listening(port).await;
    let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
    let headers = [
        ("x-conversation-id", "logged"),
        ("x-request-id", request_id),
    ];
    let reply = post_json(&url, &headers, &Convo::with_turns(55).body()).await;
    reply.assert_ok();
    assert_eq!(label(&reply), "new");
    common::terminate_and_read_log(&mut child).await
}

#[tokio::test]
async fn fold_events_carry_the_request_id() {
    let llm = Llm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foldgate.toml");
    let log = serve_one_fold(&llm, &path, "", "req-fold-42").await;
    let fold_line = log
        .lines()
        .find(|l| l.contains("foldgate::fold") && l.contains("outcome=\"ok\""))
        .unwrap_or_else(|| panic!("no fold event in:\n{log}"));
    assert!(
        fold_line.contains("request_id=\"req-fold-42\""),
        "the fold event lacks the request id: {fold_line}"
    );
    let access = log
        .lines()
        .find(|l| l.contains("foldgate::access"))
        .unwrap_or_else(|| panic!("no access line in:\n{log}"));
    assert!(access.contains("req-fold-42"), "{access}");
    // Milliseconds to the microsecond, not a float's full expansion.
    for field in ["upstream_ms=", "overhead_ms="] {
        let value = access
            .split(field)
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap();
        let decimals = value.split_once('.').map_or(0, |(_, d)| d.len());
        assert!(decimals <= 3, "{field}{value} in {access}");
    }
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a piped log:\n{log}"
    );
    let start = log
        .lines()
        .find(|l| l.contains("foldgate starting"))
        .unwrap_or_else(|| panic!("no start-up line in:\n{log}"));
    assert!(
        start.contains(&path.display().to_string()) && start.contains("mock →"),
        "{start}"
    );
}

#[tokio::test]
async fn json_logs_are_one_object_per_line_with_the_request_span() {
    let llm = Llm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("json.toml");
    let log = serve_one_fold(&llm, &path, "[log]\nformat = \"json\"\n", "req-json-7").await;
    let events: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let find = |pred: &dyn Fn(&Value) -> bool, what: &str| {
        events
            .iter()
            .find(|e| pred(e))
            .unwrap_or_else(|| panic!("no {what} in:\n{log}"))
            .clone()
    };
    let start = find(&|e| e["message"] == "foldgate starting", "start-up line");
    assert_eq!(start["level"], "INFO");
    assert_eq!(start["config"], path.display().to_string());
    let providers = start["providers"].as_str().unwrap();
    assert!(
        providers.starts_with("mock → ") && providers.contains(&llm.mock.url),
        "{providers}"
    );
    assert_eq!(
        start["summarizer"],
        "the request's own model on the request's own provider"
    );
    let fold = find(
        &|e| e["target"] == "foldgate::fold" && e["outcome"] == "ok",
        "fold event",
    );
    assert_eq!(fold["span"]["request_id"], "req-json-7", "{fold}");
    assert!(
        foldgate::metrics::REASONS.contains(&fold["reason"].as_str().unwrap()),
        "{fold}"
    );
    let access = find(&|e| e["target"] == "foldgate::access", "access line");
    assert_eq!(access["status"], 200);
    // Like every event of the request, in its span: id, method and path.
    assert_eq!(access["span"]["request_id"], "req-json-7", "{access}");
    assert_eq!(access["span"]["method"], "POST", "{access}");
    assert_eq!(access["span"]["path"], "/v1/chat/completions", "{access}");
    assert!(access["overhead_ms"].as_f64().unwrap() > 0.0, "{access}");
}

/// The `workers` field of the start-up line of `foldgate serve` on a
/// config whose `[server]` section adds `server` (the log read after a
/// SIGTERM), with `TOKIO_WORKER_THREADS` set to `env` or unset.
async fn workers_at_start(server: &str, env: Option<&str>) -> String {
    let mut served = common::serve_minimal(server, |command| {
        command.env("FOLDGATE_LOG", "info").stderr(Stdio::piped());
        if let Some(n) = env {
            command.env("TOKIO_WORKER_THREADS", n);
        }
    })
    .await;
    let log = common::terminate_and_read_log(&mut served.child).await;
    let start = log
        .lines()
        .find(|l| l.contains("foldgate starting"))
        .unwrap_or_else(|| panic!("no start-up line in:\n{log}"));
    start
        .split("workers=")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no workers field: {start}"))
        .to_string()
}

#[tokio::test]
async fn server_worker_threads_sets_the_runtime_workers() {
    // 1 and 3: neither is this machine's default (a worker per core)
    // unless it has exactly that many cores, which the unset case shows.
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(workers_at_start("worker_threads = 1", None).await, "1");
    assert_eq!(workers_at_start("worker_threads = 3", None).await, "3");
    assert_eq!(
        workers_at_start("", None).await,
        cores.to_string(),
        "unset: a worker per core"
    );
    // Unset in the file, tokio's environment variable still counts; set,
    // the file wins.
    assert_eq!(workers_at_start("", Some("1")).await, "1");
    assert_eq!(workers_at_start("worker_threads = 3", Some("1")).await, "3");
}
