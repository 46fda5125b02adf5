//! Headroom's compress contract through LiteLLM's own proxy: the pinned
//! `litellm` package's `headroom` guardrail (`mode: pre_call`,
//! `api_base` = foldgate), in front of a mock upstream. A long
//! conversation reaches the upstream folded (the summary and hashed
//! markers on the rows LiteLLM let foldgate fold, the recent rows
//! verbatim), the model's `headroom_retrieve` call is answered from
//! foldgate's archive, a short conversation passes unchanged, and with
//! foldgate down LiteLLM's calls go through unfolded.

use crate::common;

use common::mock::{self, Mock, Recorded};
use common::{Foldgate, free_port, post_json, send};
use foldgate::fold::summary::HEADING_PREFIX;
use foldgate::summarize::prompt::SYSTEM_PROMPT;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The key LiteLLM's guardrail sends foldgate (foldgate's tenant).
const GUARDRAIL_KEY: &str = "sk-litellm-guardrail";
const MODEL: &str = "mid-model";
/// LiteLLM's master key (its clients' credential).
const MASTER_KEY: &str = "sk-foldgate-test-7f3a9c2e5b8d41f6a0c3e9b7d2f5a8c1";

/// The upstream: foldgate's summarizer and the model behind LiteLLM. The
/// model calls `headroom_retrieve` for the first marker's hash it sees
/// when the tool is offered, once per conversation turn.
struct Upstream {
    mock: Mock,
    chats: Arc<Mutex<Vec<Value>>>,
}

fn hash_in(text: &str) -> Option<String> {
    let at = text.find("hash=")? + "hash=".len();
    let hash: String = text[at..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    (hash.len() >= 12).then_some(hash)
}

fn text(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn reply(model: &Value, message: Value, finish: &str) -> Value {
    json!({"id": "chatcmpl-mock", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}})
}

async fn answer(
    chats: Arc<Mutex<Vec<Value>>>,
    r: Recorded,
) -> http::Response<foldgate::body::Body> {
    let body: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    if body.pointer("/messages/0/content").and_then(Value::as_str) == Some(SYSTEM_PROMPT) {
        let summary = json!({"summary": "The agent ran the build steps one by one.",
            "facts": ["steps ran"], "goals": ["finish the build"], "decisions": [],
            "open_items": [], "artifacts": []});
        let message = json!({"role": "assistant", "content": summary.to_string()});
        return mock::json(StatusCode::OK, &reply(&body["model"], message, "stop"));
    }
    if !r.uri.ends_with("/chat/completions") {
        let missing = json!({"error": {"message": format!("mock: no {}", r.uri)}});
        return mock::json(StatusCode::NOT_FOUND, &missing);
    }
    chats.lock().unwrap().push(body.clone());
    let offered = body["tools"].as_array().is_some_and(|tools| {
        tools
            .iter()
            .any(|t| t.pointer("/function/name") == Some(&json!("headroom_retrieve")))
    });
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let answered = messages
        .iter()
        .any(|m| m["tool_call_id"].as_str() == Some("call_retrieve_1"));
    let hash = messages.iter().find_map(|m| hash_in(&text(m)));
    if let (true, false, Some(hash)) = (offered, answered, hash) {
        let call = json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_retrieve_1", "type": "function",
            "function": {"name": "headroom_retrieve", "arguments": json!({"hash": hash}).to_string()}}]});
        return mock::json(StatusCode::OK, &reply(&body["model"], call, "tool_calls"));
    }
    let done = json!({"role": "assistant", "content": "Sure, done."});
    mock::json(StatusCode::OK, &reply(&body["model"], done, "stop"))
}

impl Upstream {
    async fn start() -> Self {
        let chats = Arc::new(Mutex::new(Vec::new()));
        let shared = chats.clone();
        let mock = Mock::start(move |r: Recorded| answer(shared.clone(), r)).await;
        Self { mock, chats }
    }

    fn chats(&self) -> Vec<Value> {
        self.chats.lock().unwrap().clone()
    }
}

/// foldgate before the upstream: a small window for `mid-*`, inline folds.
async fn foldgate(upstream: &Upstream) -> Foldgate {
    Foldgate::start(&format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n\
         [models.\"mid-*\"]\ncontext_window = 3000\n\
         [policy]\nreset_ratio = 0.45\nmode = \"inline\"\n\
         [summarizer]\nmax_summary_tokens = 300\ntimeout = \"5s\"\n",
        upstream.mock.url
    ))
    .await
}

/// LiteLLM's proxy (`litellm --config`), its model on the upstream, the
/// `headroom` guardrail on every call with `api_base` = `foldgate`.
struct LiteLlm {
    url: String,
    child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

impl LiteLlm {
    async fn start(upstream: &str, foldgate: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "model_list:\n\
                 \x20 - model_name: {MODEL}\n\
                 \x20   litellm_params:\n\
                 \x20     model: openai/{MODEL}\n\
                 \x20     api_base: {upstream}/v1\n\
                 \x20     api_key: sk-upstream\n\
                 guardrails:\n\
                 \x20 - guardrail_name: foldgate\n\
                 \x20   litellm_params:\n\
                 \x20     guardrail: headroom\n\
                 \x20     mode: pre_call\n\
                 \x20     api_base: {foldgate}\n\
                 \x20     api_key: {GUARDRAIL_KEY}\n\
                 \x20     default_on: true\n\
                 \x20     unreachable_fallback: fail_open\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("litellm.log")).unwrap();
        let child = tokio::process::Command::new("python3")
            .args(["-m", "litellm.proxy.proxy_cli", "--config"])
            .arg(&config)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .env("LITELLM_MASTER_KEY", MASTER_KEY)
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .env("LITELLM_TELEMETRY", "False")
            .env("DISABLE_SCHEMA_UPDATE", "True")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .expect("python3 with the litellm proxy (tests/e2e/requirements.txt)");
        let mut me = Self {
            url: format!("http://127.0.0.1:{port}"),
            child,
            _dir: dir,
        };
        // Its startup takes tens of seconds on a busy machine.
        for _ in 0..240 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return me;
            }
            if let Ok(Some(status)) = me.child.try_wait() {
                panic!(
                    "LiteLLM's proxy exited ({status}); tests/e2e/requirements.txt installs it:\n{}",
                    me.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!("LiteLLM did not listen:\n{}", me.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("litellm.log")).unwrap_or_default()
    }

    async fn chat(&self, messages: &[Value]) -> Value {
        let reply = post_json(
            &format!("{}/v1/chat/completions", self.url),
            &[
                ("authorization", format!("Bearer {MASTER_KEY}").as_str()),
                ("x-litellm-session-id", "session-42"),
            ],
            &json!({"model": MODEL, "messages": messages}),
        )
        .await;
        assert_eq!(
            reply.status,
            200,
            "{}\n--- LiteLLM's log:\n{}",
            String::from_utf8_lossy(&reply.body),
            self.log()
        );
        reply.json()
    }
}

impl Drop for LiteLlm {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Messages without their null fields (LiteLLM drops an assistant tool
/// call's `"content": null` on the way).
fn without_nulls(messages: &Value) -> Value {
    let strip = |m: &Value| match m {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    };
    Value::Array(
        messages
            .as_array()
            .map(|ms| ms.iter().map(strip).collect())
            .unwrap_or_default(),
    )
}

/// A build agent's conversation: `turns` user requests, each answered
/// with two tool exchanges (long outputs) and a word, then the user's new
/// question.
fn agent(turns: usize) -> Vec<Value> {
    let mut ms = vec![json!({"role": "system", "content": "You are a build agent."})];
    for t in 1..=turns {
        ms.push(json!({"role": "user", "content": format!("[u{t}] Build part {t} and fix what fails.")}));
        for s in 1..=2 {
            let i = t * 10 + s;
            let id = format!("call_{i}");
            ms.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
                "function": {"name": "run", "arguments": json!({"cmd": format!("make step{i}")}).to_string()}}]}));
            let lines: Vec<String> = (0..25)
                .map(|l| {
                    format!("step{i} line {l}: compiled module_{i}_{l}.o in {l}ms, 0 warnings")
                })
                .collect();
            ms.push(json!({"role": "tool", "tool_call_id": id, "content": format!("[m{i}] {}", lines.join("\n"))}));
        }
        ms.push(json!({"role": "assistant", "content": format!("Part {t} builds.")}));
    }
    ms.push(json!({"role": "user", "content": "What did step 11 print on its last line?"}));
    ms
}

/// The rows LiteLLM lets a compressor touch are the non-assistant ones
/// before the last exchange: each comes back as the summary, a marker, or
/// itself.
#[tokio::test]
async fn litellm_headroom_guardrail_folds_through_foldgate_and_retrieves_from_its_archive() {
    let upstream = Upstream::start().await;
    let fg = foldgate(&upstream).await;
    let litellm = LiteLlm::start(&upstream.mock.url, &fg.url).await;

    // A long conversation: folded.
    let sent = agent(8);
    let answer = litellm.chat(&sent).await;
    assert_eq!(answer["choices"][0]["message"]["content"], "Sure, done.");
    let chats = upstream.chats();
    assert_eq!(
        chats.len(),
        2,
        "the model's call, then the retrieve follow-up: {chats:#?}\n{}",
        litellm.log()
    );
    let first = chats[0]["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("{chats:#?}\n{}", litellm.log()));
    assert_eq!(first.len(), sent.len(), "LiteLLM keeps one row per row");
    let summaries: Vec<usize> = (0..first.len())
        .filter(|&i| text(&first[i]).starts_with(HEADING_PREFIX))
        .collect();
    assert_eq!(summaries.len(), 1, "one summary: {first:#?}");
    let markers: Vec<usize> = (0..first.len())
        .filter(|&i| text(&first[i]).contains("headroom_retrieve hash="))
        .collect();
    assert!(markers.len() >= 5, "rows folded to markers: {markers:?}");
    for (i, (shown, original)) in first.iter().zip(&sent).enumerate() {
        assert_eq!(shown["role"], original["role"], "row {i}");
        if original["role"] == "assistant" || original["role"] == "system" {
            assert_eq!(shown["content"], original["content"], "row {i} verbatim");
        }
    }
    assert_eq!(first.last(), sent.last(), "the question stays");
    let bytes = |ms: &[Value]| ms.iter().map(|m| text(m).len()).sum::<usize>();
    assert!(
        bytes(first) * 2 < bytes(&sent),
        "folded: {} of {} bytes",
        bytes(first),
        bytes(&sent)
    );
    let tools = chats[0]["tools"].as_array().expect("the retrieve tool");
    assert!(
        tools
            .iter()
            .any(|t| t.pointer("/function/name") == Some(&json!("headroom_retrieve")))
    );

    // The model's retrieve call, answered from foldgate's archive.
    let hash = first.iter().find_map(|m| hash_in(&text(m))).unwrap();
    let marked = first
        .iter()
        .position(|m| hash_in(&text(m)).as_deref() == Some(hash.as_str()))
        .unwrap();
    let follow = chats[1]["messages"].as_array().unwrap();
    let result = follow
        .iter()
        .find(|m| m["tool_call_id"] == "call_retrieve_1")
        .expect("the retrieve result");
    assert_eq!(
        result["content"], sent[marked]["content"],
        "the folded row, from the archive"
    );
    let retrieve = |key: &'static str| {
        let url = format!("{}/v1/retrieve/{hash}", fg.url);
        async move {
            let auth = format!("Bearer {key}");
            send(Method::GET, &url, &[("authorization", auth.as_str())], "").await
        }
    };
    let own = retrieve(GUARDRAIL_KEY).await;
    own.assert_ok();
    assert_eq!(own.json()["original_content"], sent[marked]["content"]);
    assert_eq!(
        retrieve("sk-other-tenant").await.status,
        404,
        "tenant-scoped"
    );

    // A short conversation passes unchanged.
    let short = vec![
        json!({"role": "system", "content": "You are terse."}),
        json!({"role": "user", "content": "[m0] hello"}),
        json!({"role": "assistant", "content": "hi"}),
        json!({"role": "user", "content": "[m1] how are you?"}),
    ];
    litellm.chat(&short).await;
    let chats = upstream.chats();
    assert_eq!(chats.len(), 3);
    assert_eq!(chats[2]["messages"], json!(short), "unchanged");
    assert!(chats[2].get("tools").is_none(), "no retrieve tool offered");

    // foldgate down: LiteLLM's calls go through, unfolded.
    drop(fg);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = agent(6);
    let answer = litellm.chat(&sent).await;
    assert_eq!(answer["choices"][0]["message"]["content"], "Sure, done.");
    let chats = upstream.chats();
    assert_eq!(chats.len(), 4);
    assert_eq!(
        without_nulls(&chats[3]["messages"]),
        without_nulls(&json!(sent)),
        "unfolded"
    );
}
