//! The official `openai` Python package talks to foldgate through a
//! 50-turn conversation (streamed and not); the mock upstream's view of
//! every request is checked against what the client sent.

use crate::common;

use common::Foldgate;
use common::llm::{self, Llm};
use serde_json::Value;

#[tokio::test]
async fn openai_python_client_through_a_folding_conversation() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n[models.\"tiny-*\"]\ncontext_window = 3000\n\
         [policy]\nreset_ratio = 0.45\n[summarizer]\nmax_summary_tokens = 300\n",
        llm.url()
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("log.json");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/openai_chat.py");
    let base = format!("{}/v1", fg.url);
    let output = tokio::process::Command::new("python3")
        .arg(script)
        .arg(&base)
        .arg(&out)
        .output()
        .await
        .expect("python3 must be installed (.ci/run installs the openai package)");
    assert!(
        output.status.success(),
        "python client failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let log: Vec<Value> = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(log.len(), 50);
    let chats = llm.chat_requests();
    assert_eq!(chats.len(), 50, "one upstream request per client request");
    for (i, (entry, upstream)) in log.iter().zip(&chats).enumerate() {
        let sent = entry["sent"].as_array().unwrap();
        let view = upstream["messages"].as_array().unwrap();
        llm::assert_view_covers(sent, view);
        assert_eq!(
            upstream["stream"].as_bool().unwrap_or(false),
            i % 2 == 1,
            "request {i}"
        );
        assert!(
            entry["tokens_out"].as_u64().unwrap() + 100 <= 3000,
            "request {i} overflows"
        );
    }
    // Default (background) mode: folds happen off the request path, so the
    // client sees summaries reused, never a request waiting on a new one.
    let folds: Vec<&str> = log.iter().map(|e| e["fold"].as_str().unwrap()).collect();
    assert!(!folds.contains(&"new"), "{folds:?}");
    let reused = folds.iter().filter(|f| **f == "reused").count();
    assert!(reused > 10, "{folds:?}");
    let calls = llm.summarizer_calls();
    assert!(calls >= 1 && calls * 5 < 50, "{calls} summarizer calls");
}

#[tokio::test]
async fn curl_streams_through_foldgate_with_fold_headers() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n",
        llm.url()
    ))
    .await;
    let body = r#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"[m1] hello"}]}"#;
    let output = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "-N",
            "-i",
            "-H",
            "content-type: application/json",
            "-H",
            "authorization: Bearer sk-curl",
            "-d",
            body,
        ])
        .arg(format!("{}/v1/chat/completions", fg.url))
        .output()
        .await
        .expect("curl must be installed");
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(output.status.success(), "{text}");
    let lower = text.to_lowercase();
    assert!(
        lower.contains("x-foldgate-fold: none")
            && lower.contains("content-type: text/event-stream"),
        "{text}"
    );
    assert_eq!(text.matches("data: {").count(), 3, "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    assert_eq!(
        llm.mock.received()[0].body,
        body.as_bytes(),
        "forwarded byte for byte"
    );
    assert_eq!(
        llm.mock.received()[0].header("authorization"),
        Some("Bearer sk-curl")
    );
}
