//! The soak's mock upstream: a hyper HTTP/1.1 server on 127.0.0.1:0 that
//! answers chat completions, Anthropic Messages and Responses (JSON or
//! SSE, see [`answers`](super::answers)), `/models`, `/embeddings` and the
//! summarizer, and injects faults: connections reset as soon as they are
//! accepted, 500s, bodies aborted midway, slow SSE bodies, and summaries
//! that are not JSON. A request that offers `foldgate_recall` is answered
//! with a call to it one time in four (a recall round); the round after
//! it, normally.

use super::answers::{self, Api};
use super::rng::Rng;
use bytes::Bytes;
use foldgate::body::{self, Body, BoxError};
use foldgate::summarize::prompt::SYSTEM_PROMPT;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Faults injected, by kind.
#[derive(Default)]
pub struct Injected {
    pub resets: AtomicU64,
    pub errors_500: AtomicU64,
    pub aborted_bodies: AtomicU64,
    pub slow_bodies: AtomicU64,
    pub bad_summaries: AtomicU64,
    pub summaries: AtomicU64,
    pub requests: AtomicU64,
    /// Answers that called `foldgate_recall`, whole and streamed.
    pub recall_calls: AtomicU64,
    pub recall_calls_streamed: AtomicU64,
    /// Requests that offered the recall tool.
    pub recall_offers: AtomicU64,
    /// Anthropic Messages and Responses requests (summarizer excluded).
    pub anthropic: AtomicU64,
    pub responses: AtomicU64,
}

/// Starts the upstream; returns its base URL (`http://127.0.0.1:PORT`).
pub async fn start(injected: Arc<Injected>, seed: u64) -> std::io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let mut rng = Rng::new(seed);
        while let Ok((stream, _)) = listener.accept().await {
            // 1 connection in 25 is reset as soon as it is accepted.
            if rng.below(25) == 0 {
                injected.resets.fetch_add(1, Ordering::Relaxed);
                let _ = stream.set_zero_linger();
                drop(stream);
                continue;
            }
            let injected = injected.clone();
            let conn_seed = rng.next();
            tokio::spawn(async move {
                let rng = Arc::new(std::sync::Mutex::new(Rng::new(conn_seed)));
                let service = service_fn(move |req| {
                    let (injected, rng) = (injected.clone(), rng.clone());
                    async move { Ok::<_, Infallible>(answer(req, &injected, &rng).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(url)
}

async fn answer(
    req: Request<Incoming>,
    injected: &Injected,
    rng: &std::sync::Mutex<Rng>,
) -> Response<Body> {
    injected.requests.fetch_add(1, Ordering::Relaxed);
    let path = req.uri().path().to_string();
    let Ok(bytes) = req.into_body().collect().await.map(|c| c.to_bytes()) else {
        return json_reply(StatusCode::BAD_REQUEST, &json!({"error": "unreadable"}));
    };
    let dice = rng.lock().map(|mut r| r.below(100)).unwrap_or(50);
    if path.ends_with("/models") {
        return json_reply(
            StatusCode::OK,
            &json!({"object": "list", "data": [{"id": "soak-model", "object": "model"}]}),
        );
    }
    if path.ends_with("/embeddings") {
        return json_reply(
            StatusCode::OK,
            &json!({"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}]}),
        );
    }
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if body.pointer("/messages/0/content").and_then(Value::as_str) == Some(SYSTEM_PROMPT)
        || body["system"] == SYSTEM_PROMPT
    {
        return summary(injected, dice, path.ends_with("/messages")).await;
    }
    let api = if path.ends_with("/messages") {
        injected.anthropic.fetch_add(1, Ordering::Relaxed);
        Api::Anthropic
    } else if path.ends_with("/responses") {
        injected.responses.fetch_add(1, Ordering::Relaxed);
        Api::Responses
    } else {
        Api::Chat
    };
    if dice < 6 {
        injected.errors_500.fetch_add(1, Ordering::Relaxed);
        return json_reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            &json!({"error": {"message": "injected failure", "type": "server_error"}}),
        );
    }
    if answers::offers_recall(&body) {
        injected.recall_offers.fetch_add(1, Ordering::Relaxed);
        if !answers::after_recall(api, &body) && (20..45).contains(&dice) {
            let n = injected.recall_calls.fetch_add(1, Ordering::Relaxed);
            if body["stream"] == json!(true) {
                injected
                    .recall_calls_streamed
                    .fetch_add(1, Ordering::Relaxed);
            }
            return answers::answer(api, &body, true, n);
        }
    }
    if api != Api::Chat {
        return answers::answer(api, &body, false, 0);
    }
    let prompt_tokens = bytes.len() as u64 / 4;
    let (abort, slow) = (dice < 10, (10..20).contains(&dice));
    if abort {
        injected.aborted_bodies.fetch_add(1, Ordering::Relaxed);
    }
    if slow {
        injected.slow_bodies.fetch_add(1, Ordering::Relaxed);
    }
    if body["stream"] == json!(true) || abort {
        return sse(prompt_tokens, abort, slow);
    }
    json_reply(
        StatusCode::OK,
        &json!({
            "id": "chatcmpl-soak", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Done: edited src/main.rs on port 8080."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 9, "total_tokens": prompt_tokens + 9},
        }),
    )
}

async fn summary(injected: &Injected, dice: u64, anthropic: bool) -> Response<Body> {
    injected.summaries.fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(20 + dice)).await;
    let content = if dice < 8 {
        injected.bad_summaries.fetch_add(1, Ordering::Relaxed);
        "I am sorry, here is a summary: the user edits files.".to_string()
    } else {
        json!({"summary": "The user works on the soak project.", "facts": ["port 8080"],
               "goals": ["finish the task"], "decisions": [], "open_items": [], "artifacts": ["src/main.rs"]})
        .to_string()
    };
    if anthropic {
        return json_reply(
            StatusCode::OK,
            &json!({"id": "msg_sum", "type": "message", "role": "assistant", "model": "soak-model",
                "content": [{"type": "text", "text": content}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 500, "output_tokens": 60}}),
        );
    }
    json_reply(
        StatusCode::OK,
        &json!({"id": "sum", "object": "chat.completion", "model": "soak-model",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 500, "completion_tokens": 60, "total_tokens": 560}}),
    )
}

/// An SSE answer streamed chunk by chunk; `abort` breaks it off after two
/// chunks (the connection is cut), `slow` spaces the chunks out.
fn sse(prompt_tokens: u64, abort: bool, slow: bool) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Result<Bytes, BoxError>>(4);
    tokio::spawn(async move {
        let gap = Duration::from_millis(if slow { 150 } else { 5 });
        for (i, word) in ["Done", ": edited", " src/main.rs", " on port", " 8080."]
            .iter()
            .enumerate()
        {
            if abort && i == 2 {
                let _ = tx.send(Err("injected abort".into())).await;
                return;
            }
            let chunk = json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": word}}]});
            if tx
                .send(Ok(Bytes::from(format!("data: {chunk}\n\n"))))
                .await
                .is_err()
            {
                return;
            }
            tokio::time::sleep(gap).await;
        }
        let usage = json!({"object": "chat.completion.chunk", "choices": [],
                           "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 5, "total_tokens": prompt_tokens + 5}});
        let _ = tx.send(Ok(Bytes::from(format!("data: {usage}\n\n")))).await;
        let _ = tx.send(Ok(Bytes::from_static(b"data: [DONE]\n\n"))).await;
    });
    channel_reply(rx)
}

/// A 200 event stream fed by `rx`; an `Err` item aborts it.
pub fn channel_reply(rx: mpsc::Receiver<Result<Bytes, BoxError>>) -> Response<Body> {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .body(body::boxed(Channel(rx)))
        .unwrap_or_else(|_| Response::new(body::empty()))
}

use answers::json_reply;

/// A body fed by a channel; an `Err` item aborts the response.
struct Channel(mpsc::Receiver<Result<Bytes, BoxError>>);

impl http_body::Body for Channel {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0
            .poll_recv(cx)
            .map(|item| item.map(|r| r.map(Frame::data)))
    }
}
