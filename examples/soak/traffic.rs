//! The soak's clients: each worker loops until the deadline over a mix of
//! chat turns in a growing conversation (folding under a small window),
//! streams it hangs up on after the first chunk, passthrough requests and
//! admin reads. Every outcome is counted by kind.

use crate::rng::Rng;
use bytes::Bytes;
use foldgate::body::{self, Body};
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Longest a client waits for one whole exchange.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A conversation starts over past this many messages.
const MAX_MESSAGES: usize = 160;

/// Outcomes by kind (`ok`, `status_500`, `body_error`, ...).
pub type Outcomes = BTreeMap<String, u64>;

/// Runs one worker until `deadline`.
pub async fn worker(base: String, id: usize, seed: u64, deadline: Instant) -> Outcomes {
    let client: Client<HttpConnector, Body> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let mut rng = Rng::new(seed);
    let mut outcomes = Outcomes::new();
    let mut conversation = 0usize;
    let mut history: Vec<Value> = vec![
        json!({"role": "system", "content": "You are a coding agent working on the soak project."}),
    ];
    while Instant::now() < deadline {
        let dice = rng.below(100);
        let kind = match dice {
            0..55 => {
                if history.len() > MAX_MESSAGES {
                    history.truncate(1);
                    conversation += 1;
                }
                history.push(json!({"role": "user", "content": user_text(&mut rng)}));
                let stream = rng.below(2) == 0;
                let body = json!({"model": "soak-model", "stream": stream, "messages": history});
                let conv = format!("soak-{id}-{conversation}");
                let (kind, _) = exchange(&client, chat(&base, &conv, &body), false).await;
                let reply = if kind == "ok" {
                    "Done: edited src/main.rs on port 8080."
                } else {
                    "(no answer)"
                };
                history.push(json!({"role": "assistant", "content": reply}));
                kind
            }
            55..70 => {
                let mut messages = history.clone();
                messages.push(json!({"role": "user", "content": user_text(&mut rng)}));
                let body = json!({"model": "soak-model", "stream": true, "messages": messages});
                let conv = format!("soak-{id}-{conversation}");
                exchange(&client, chat(&base, &conv, &body), true).await.0
            }
            70..85 => {
                exchange(
                    &client,
                    plain(Method::GET, &format!("{base}/v1/models"), Bytes::new()),
                    false,
                )
                .await
                .0
            }
            85..95 => {
                let body = json!({"model": "soak-model", "input": user_text(&mut rng)}).to_string();
                exchange(
                    &client,
                    plain(Method::POST, &format!("{base}/v1/embeddings"), body.into()),
                    false,
                )
                .await
                .0
            }
            _ => {
                exchange(
                    &client,
                    plain(
                        Method::GET,
                        &format!("{base}/foldgate/metrics"),
                        Bytes::new(),
                    ),
                    false,
                )
                .await
                .0
            }
        };
        *outcomes.entry(kind).or_default() += 1;
    }
    outcomes
}

/// A user message of 100 to 600 tokens with identifiers in it.
fn user_text(rng: &mut Rng) -> String {
    let n = 100 + rng.below(500);
    let mut text = format!(
        "Task {}: fix ticket SOAK-{} in src/mod_{}.rs.",
        rng.next() % 1000,
        rng.below(10_000),
        rng.below(50)
    );
    while (text.len() as u64) < n * 4 {
        text.push_str(" the build on port 5433 fails after version 1.2.");
        text.push_str(&rng.below(100).to_string());
    }
    text
}

fn chat(base: &str, conversation: &str, body: &Value) -> Request<Body> {
    let mut req = plain(
        Method::POST,
        &format!("{base}/v1/chat/completions"),
        body.to_string().into(),
    );
    if let Ok(v) = conversation.parse() {
        req.headers_mut().insert("x-conversation-id", v);
    }
    req
}

fn plain(method: Method, url: &str, body: Bytes) -> Request<Body> {
    let mut req = Request::new(body::full(body));
    *req.method_mut() = method;
    if let Ok(uri) = url.parse() {
        *req.uri_mut() = uri;
    }
    req.headers_mut().insert(
        "content-type",
        http::HeaderValue::from_static("application/json"),
    );
    req.headers_mut().insert(
        "authorization",
        http::HeaderValue::from_static("Bearer sk-soak"),
    );
    req
}

/// Sends one request and reads the answer (or, with `hang_up`, only its
/// first frame); returns the outcome's kind and the status.
async fn exchange(
    client: &Client<HttpConnector, Body>,
    req: Request<Body>,
    hang_up: bool,
) -> (String, Option<StatusCode>) {
    let run = async {
        let resp = match client.request(req).await {
            Ok(resp) => resp,
            Err(e) => return (format!("transport_error ({})", short(&e)), None),
        };
        let status = resp.status();
        let mut body = resp.into_body();
        if hang_up && status.is_success() {
            return match body.frame().await {
                Some(Ok(_)) => ("client_hang_up".to_string(), Some(status)),
                _ => ("body_error".to_string(), Some(status)),
            };
        }
        let complete = body.collect().await.is_ok();
        let kind = match (status.as_u16(), complete) {
            (200..=299, true) => "ok".to_string(),
            (_, false) => "body_error".to_string(),
            (code, true) => format!("status_{code}"),
        };
        (kind, Some(status))
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, run).await {
        Ok(outcome) => outcome,
        Err(_) => ("client_timeout".to_string(), None),
    }
}

/// The innermost cause of an error, for a low-cardinality label.
fn short(err: &(dyn std::error::Error + 'static)) -> String {
    let mut e = err;
    while let Some(source) = e.source() {
        e = source;
    }
    let text = e.to_string();
    text.split(" (os error").next().unwrap_or(&text).to_string()
}
