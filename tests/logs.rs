//! What the log says: every event a request causes, the fold included,
//! carries the request's id, read from the real binary's output.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly; the no-panic rule is for the request path"
)]

mod common;

use common::convo::{self, Convo, label};
use common::llm::Llm;
use common::post_json;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncReadExt;

#[tokio::test]
async fn fold_events_carry_the_request_id() {
    let llm = Llm::start().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foldgate.toml");
    let toml = convo::config(&llm, "[state]\nbackend = \"memory\"\n").replace(
        "[providers.mock]",
        &format!("[server]\nlisten = \"127.0.0.1:{port}\"\n[providers.mock]"),
    );
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
    let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
    let body = Convo::with_turns(55).body();
    let headers = [
        ("x-conversation-id", "logged"),
        ("x-request-id", "req-fold-42"),
    ];
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let reply = post_json(&url, &headers, &body).await;
    reply.assert_ok();
    assert_eq!(label(&reply), "new");
    child.start_kill().unwrap();
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .await
        .unwrap();
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
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a piped log:\n{log}"
    );
}
