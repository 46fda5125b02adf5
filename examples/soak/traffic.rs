//! The soak's clients: each worker loops until the deadline over a mix of
//! turns in growing conversations of the three folded APIs (chat
//! completions, Anthropic Messages, Responses; folding under a small
//! window, with tool results compressed to stubs and recall rounds the
//! upstream scripts), streams it hangs up on after the first chunk,
//! passthrough requests and admin reads. Every outcome is counted by kind;
//! an answer that shows the client `foldgate_recall` counts as
//! `recall_leaked`.

use super::answers::Api;
use super::convo::{Convo, user_text};
use super::rng::Rng;
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

/// Outcomes by kind (`ok`, `status_500`, `body_error`, ...).
pub type Outcomes = BTreeMap<String, u64>;

/// Runs one worker until `deadline`; returns its outcomes and how many
/// distinct conversations it started (each restarts past `max_items`).
/// It keeps `per_api` conversations of each API live at once and gives
/// each turn to one of them at random (1: the same traffic as always).
pub async fn worker(
    base: String,
    id: usize,
    seed: u64,
    deadline: Instant,
    (max_items, per_api): (usize, usize),
) -> (Outcomes, u64) {
    let client: Client<HttpConnector, Body> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let mut rng = Rng::new(seed);
    let mut outcomes = Outcomes::new();
    let per_api = per_api.max(1);
    let mut convos: Vec<Convo> = (0..per_api)
        .flat_map(|j| {
            let slot = id * per_api + j;
            [Api::Chat, Api::Anthropic, Api::Responses].map(|api| Convo::new(api, slot, max_items))
        })
        .collect();
    while Instant::now() < deadline {
        let dice = rng.below(100);
        // Which of the live sets of three: no draw with one, so the
        // default run's traffic is what it always was.
        let set = if per_api > 1 {
            3 * rng.below(per_api as u64) as usize
        } else {
            0
        };
        let kind = match dice {
            0..60 => {
                let convo = &mut convos[set
                    + match dice {
                        0..30 => 0,
                        30..45 => 1,
                        _ => 2,
                    }];
                convo.turn(&mut rng);
                let stream = rng.below(2) == 0;
                let req = post(&base, convo.path(), &convo.id(), &convo.body(stream));
                let (kind, _) = exchange(&client, req, false, true).await;
                convo.answered(kind == "ok");
                kind
            }
            60..70 => {
                let convo = &convos[set + (dice % 3) as usize];
                let body = convo.body_with_question(&mut rng, true);
                let req = post(&base, convo.path(), &convo.id(), &body);
                exchange(&client, req, true, true).await.0
            }
            _ => passthrough(&client, &base, dice, &mut rng).await,
        };
        *outcomes.entry(kind).or_default() += 1;
    }
    let started = convos.iter().map(|c| c.round as u64 + 1).sum();
    (outcomes, started)
}

/// One request foldgate passes through untouched, by `dice` (70 to 99):
/// the model list, an embedding, foldgate's metrics.
async fn passthrough(
    client: &Client<HttpConnector, Body>,
    base: &str,
    dice: u64,
    rng: &mut Rng,
) -> String {
    match dice {
        70..82 => {
            exchange(
                client,
                plain(Method::GET, &format!("{base}/v1/models"), Bytes::new()),
                false,
                false,
            )
            .await
            .0
        }
        82..92 => {
            let body = json!({"model": "soak-model", "input": user_text(rng)}).to_string();
            exchange(
                client,
                plain(Method::POST, &format!("{base}/v1/embeddings"), body.into()),
                false,
                false,
            )
            .await
            .0
        }
        _ => {
            exchange(
                client,
                plain(
                    Method::GET,
                    &format!("{base}/foldgate/metrics"),
                    Bytes::new(),
                ),
                false,
                false,
            )
            .await
            .0
        }
    }
}

fn post(base: &str, path: &str, conversation: &str, body: &Value) -> Request<Body> {
    let mut req = plain(
        Method::POST,
        &format!("{base}{path}"),
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
/// first frame); returns the outcome's kind and the status. With
/// `model_answer`, an answer naming `foldgate_recall` is `recall_leaked`.
async fn exchange(
    client: &Client<HttpConnector, Body>,
    req: Request<Body>,
    hang_up: bool,
    model_answer: bool,
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
                Some(Ok(f)) if model_answer && f.data_ref().is_some_and(|d| leaks(d)) => {
                    ("recall_leaked".to_string(), Some(status))
                }
                Some(Ok(_)) => ("client_hang_up".to_string(), Some(status)),
                _ => ("body_error".to_string(), Some(status)),
            };
        }
        let collected = body.collect().await.map(|c| c.to_bytes());
        let leaked = model_answer && collected.as_ref().is_ok_and(|b| leaks(b));
        let complete = collected.is_ok();
        let kind = match (status.as_u16(), complete) {
            _ if leaked => "recall_leaked".to_string(),
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

/// Whether a body shows the client foldgate's own tool.
fn leaks(body: &[u8]) -> bool {
    body.windows(15).any(|w| w == b"foldgate_recall")
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
