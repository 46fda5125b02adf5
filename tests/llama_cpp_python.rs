//! foldgate in front of llama-cpp-python's server (`python -m
//! llama_cpp.server --n_ctx 2048`), played by a mock that answers as
//! llama-cpp-python 0.3.36 does (bodies captured from the real server):
//! `/props` is a 404, `/v1/models` names no window, `/openapi.json` names
//! the server, and a prompt longer than the window gets the 400 whose text
//! names `n_ctx`. Discovery probes for it; a window learned from a
//! context-length error survives a restart with SQLite state; a local model
//! without a window gets a WARN naming the config line.

use crate::common;

use common::convo::{Convo, label};
use common::llm::Llm;
use common::mock::{self, Mock, Recorded};
use common::{Foldgate, Reply, post_json, send};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The model id llama-cpp-python lists without `--model_alias`: the path.
const MODEL: &str = "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const N_CTX: usize = 2048;

/// Tokens of a prompt as the mock counts them: one per word.
fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

/// llama-cpp-python's answer to `r`, or `None` for a chat completion that
/// fits (passed on to the summarizing [`Llm`] behind it).
fn llama_cpp_python(
    r: &Recorded,
    probe_window: bool,
) -> Option<http::Response<foldgate::body::Body>> {
    let not_found = || mock::json(StatusCode::NOT_FOUND, &json!({"detail": "Not Found"}));
    let answer = match (r.method.clone(), r.uri.as_str()) {
        (Method::GET, "/v1/models") => mock::json(
            StatusCode::OK,
            &json!({"object": "list", "data": [
                {"id": MODEL, "object": "model", "owned_by": "me", "permissions": []}]}),
        ),
        (Method::GET, "/openapi.json") if probe_window => mock::json(
            StatusCode::OK,
            &json!({"openapi": "3.1.0", "info": {"title": "🦙 llama.cpp Python API", "version": "0.3.36"},
                    "paths": {"/v1/completions": {}, "/v1/embeddings": {}, "/v1/chat/completions": {},
                              "/v1/models": {}, "/extras/tokenize": {}, "/extras/tokenize/count": {},
                              "/extras/detokenize": {}}}),
        ),
        (Method::POST, "/v1/completions") => {
            let body = r.json();
            let prompt = words(body["prompt"].as_str().unwrap());
            let max_tokens = body["max_tokens"].as_u64().unwrap();
            assert!(prompt >= N_CTX, "only the probe is expected here");
            mock::json(
                StatusCode::BAD_REQUEST,
                &json!({"error": {
                    "message": format!("This model's maximum context length is {N_CTX} tokens, however you requested {} tokens ({prompt} in your prompt; {max_tokens} for the completion). Please reduce your prompt; or completion length.", prompt as u64 + max_tokens),
                    "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
            )
        }
        (Method::POST, "/v1/chat/completions") => {
            let body = r.json();
            let prompt: usize = body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| words(m["content"].as_str().unwrap_or("")) + 4)
                .sum();
            if prompt < N_CTX {
                return None;
            }
            let completion = body["max_tokens"]
                .as_u64()
                .map_or("None".into(), |n| n.to_string());
            let requested = prompt as u64 + body["max_tokens"].as_u64().unwrap_or(0);
            mock::json(
                StatusCode::BAD_REQUEST,
                &json!({"error": {
                    "message": format!("This model's maximum context length is {N_CTX} tokens. However, you requested {requested} tokens ({prompt} in the messages, {completion} in the completion). Please reduce the length of the messages or completion."),
                    "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
            )
        }
        _ => not_found(),
    };
    Some(answer)
}

/// The mock server: llama-cpp-python's answers, with the chat completions
/// that fit answered by `llm` (which also plays the summarizer).
struct Server {
    mock: Mock,
    _llm: Arc<Llm>,
}

impl Server {
    async fn start(probe_window: bool) -> Self {
        let llm = Arc::new(Llm::start().await);
        let behind = llm.url().to_string();
        let mock = Mock::start(move |r: Recorded| {
            let behind = behind.clone();
            async move {
                if let Some(answer) = llama_cpp_python(&r, probe_window) {
                    return answer;
                }
                let reply = send(
                    r.method.clone(),
                    &format!("{behind}{}", r.uri),
                    &[("content-type", "application/json")],
                    r.body.clone(),
                )
                .await;
                let mut answer = http::Response::new(foldgate::body::full(reply.body));
                *answer.status_mut() = reply.status;
                *answer.headers_mut() = reply.headers;
                answer
            }
        })
        .await;
        Self { mock, _llm: llm }
    }

    fn refused(&self) -> usize {
        self.mock
            .received()
            .iter()
            .filter(|r| {
                r.uri == "/v1/chat/completions"
                    && r.json()["messages"][0]["content"]
                        != foldgate::summarize::prompt::SYSTEM_PROMPT
            })
            .filter(|r| {
                let m = r.json()["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| words(m["content"].as_str().unwrap_or("")) + 4)
                    .sum::<usize>();
                m >= N_CTX
            })
            .count()
    }
}

fn config(server: &Server, extra: &str) -> String {
    format!(
        "[providers.local]\nbase_url = \"{}/v1\"\nmodels = [\"*\"]\n\
         [policy]\nreset_ratio = 0.45\nmode = \"inline\"\n\
         [summarizer]\nmax_summary_tokens = 300\nretries = 0\ntimeout = \"5s\"\n{extra}",
        server.mock.url
    )
}

async fn chat(fg: &Foldgate, conversation: &str, turns: usize) -> Reply {
    post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[("x-conversation-id", conversation)],
        &Convo::with_turns(turns).body_for(MODEL, false),
    )
    .await
}

async fn windows(fg: &Foldgate) -> Value {
    send(
        Method::GET,
        &format!("{}/foldgate/windows", fg.url),
        &[],
        "",
    )
    .await
    .json()
}

/// Polls `/foldgate/windows` until `model` has a window.
async fn window_of(fg: &Foldgate, model: &str) -> Value {
    for _ in 0..300 {
        let w = windows(fg).await;
        if let Some(found) = w["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["model"] == model)
        {
            return found.clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no window for {model}: {}", windows(fg).await);
}

#[tokio::test]
async fn discovery_probes_llama_cpp_python_for_its_window() {
    let server = Server::start(true).await;
    let fg = Foldgate::start(&config(&server, "[tokens]\ndiscover = true\n")).await;
    let found = window_of(&fg, MODEL).await;
    assert_eq!(found["context_window"], 2048, "{found}");
    assert_eq!(found["source"], "discovered");
    assert_eq!(
        found["origin"],
        "discovered via a one-token probe (llama-cpp-python)"
    );
    assert_eq!(
        windows(&fg).await["missing"],
        json!([]),
        "nothing left unknown"
    );

    let probes: Vec<Value> = server
        .mock
        .received()
        .iter()
        .filter(|r| r.uri == "/v1/completions")
        .map(Recorded::json)
        .collect();
    assert_eq!(probes.len(), 1, "one probe for the one model");
    assert_eq!(probes[0]["model"], MODEL);
    assert_eq!(probes[0]["max_tokens"], 1);
    assert!(words(probes[0]["prompt"].as_str().unwrap()) > 1_000_000);
    let asked: Vec<String> = server
        .mock
        .received()
        .iter()
        .map(|r| format!("{} {}", r.method, r.uri))
        .collect();
    assert!(asked.contains(&"GET /props".to_string()), "{asked:?}");

    // A history of about 3,000 tokens folds at once in the 2,048 window:
    // the server never sees it whole.
    let reply = chat(&fg, "probe", 55).await;
    reply.assert_ok();
    assert_eq!(label(&reply), "new");
    assert_eq!(
        server.refused(),
        0,
        "no context-length error reached the server's chat"
    );
}

#[tokio::test]
async fn a_server_that_is_not_llama_cpp_python_is_not_probed() {
    // Same answers but no OpenAPI title: no probe is sent.
    let server = Server::start(false).await;
    let fg = Foldgate::start(&config(&server, "[tokens]\ndiscover = true\n")).await;
    for _ in 0..300 {
        if !windows(&fg).await["missing"].as_array().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let w = windows(&fg).await;
    assert_eq!(
        w["missing"],
        json!([{"provider": "local", "model": MODEL,
                "config": format!("[models.\"{MODEL}\"] context_window = N")}]),
        "{w}"
    );
    assert!(
        server
            .mock
            .received()
            .iter()
            .all(|r| r.uri != "/v1/completions")
    );
}

/// Stops foldgate and waits until it has let go of the database.
async fn stop(mut fg: Foldgate) {
    fg.begin_shutdown();
    if let Some(task) = fg.task.take() {
        task.await.unwrap();
    }
}

#[tokio::test]
async fn a_window_learned_from_an_error_survives_a_restart_with_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    // No discovery: the window is learned from the first turn's error.
    let server = Server::start(false).await;
    let toml = config(
        &server,
        &format!(
            "[state]\nbackend = \"sqlite\"\npath = {:?}\n",
            db.display().to_string()
        ),
    );
    let fg = Foldgate::start(&toml).await;
    let reply = chat(&fg, "first", 55).await;
    reply.assert_ok();
    assert_eq!(
        server.refused(),
        1,
        "the whole history was refused once, then folded"
    );
    let learned = window_of(&fg, MODEL).await;
    assert_eq!(
        (
            learned["context_window"].as_u64(),
            learned["source"].as_str()
        ),
        (Some(2048), Some("learned"))
    );
    stop(fg).await;

    let fg = Foldgate::start(&toml).await;
    let learned = window_of(&fg, MODEL).await;
    assert_eq!(learned["origin"], "learned from a context-length error");
    assert_eq!(learned["context_window"], 2048);
    // A new conversation folds before sending: no second refusal.
    let reply = chat(&fg, "second", 55).await;
    reply.assert_ok();
    assert_eq!(label(&reply), "new");
    assert_eq!(
        server.refused(),
        1,
        "the restarted foldgate knew the window"
    );
}

#[tokio::test]
async fn start_up_warns_with_the_config_line_for_a_local_model_without_a_window() {
    let server = Server::start(false).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("local.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:{}\"\n[state]\nbackend = \"memory\"\n{}",
            common::free_port(),
            config(
                &server,
                "[tokens]\ndiscover = true\n[models.\"gpt-4o*\"]\ncontext_window = 64000\n"
            )
        ),
    )
    .unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_foldgate"))
        .args(["serve", "--config"])
        .arg(&path)
        .env("FOLDGATE_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let warn = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            seen.push(line.clone());
            if line.contains("no context window known") {
                return line;
            }
        }
        panic!("foldgate exited");
    })
    .await
    .unwrap_or_else(|_| panic!("no WARN in: {seen:#?}"));
    child.start_kill().unwrap();
    assert!(warn.contains("WARN"), "{warn}");
    assert!(
        warn.contains(&format!(
            "Add to the config: [models.\"{MODEL}\"] context_window = N"
        )),
        "{warn}"
    );
    assert!(warn.contains("of local provider local"), "{warn}");
    // No window is guessed: its requests go up unfolded until the server's
    // first context-length error names it.
    assert!(
        warn.contains(
            "its requests go upstream unfolded until the upstream's first context-length error"
        ),
        "{warn}"
    );
    assert!(
        seen.iter()
            .any(|l| l.contains("model window: gpt-4o* = 64000 tokens (config)")),
        "start-up names the configured window: {seen:#?}"
    );
}

#[tokio::test]
async fn the_catch_all_pattern_is_missing_only_while_no_window_is_configured() {
    let server = Server::start(false).await;
    let missing = |fg: Foldgate| async move {
        // The report is made once, just after start-up.
        for _ in 0..100 {
            let w = windows(&fg).await;
            if w["missing"].as_array().is_some_and(|m| !m.is_empty()) {
                return w["missing"].clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        windows(&fg).await["missing"].clone()
    };
    let bare = Foldgate::start(&config(&server, "[tokens]\ndiscover = false\n")).await;
    assert_eq!(
        missing(bare).await,
        json!([{"provider": "local", "model": "*",
                "config": "[models.\"*\"] context_window = N"}])
    );
    let configured = Foldgate::start(&config(
        &server,
        "[tokens]\ndiscover = false\n[models.\"demo-*\"]\ncontext_window = 4000\n",
    ))
    .await;
    assert_eq!(missing(configured).await, json!([]));
}
