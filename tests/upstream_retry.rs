//! A pooled upstream connection that the upstream closes just as foldgate
//! reuses it: the request is sent once more on a new connection, so the
//! client gets the answer instead of a 502. An upstream that drops every
//! connection still gets a prompt 502 envelope after one retry, and a body
//! still streaming from the client is forwarded whole and never replayed.
//!
//! The upstream here is a raw HTTP/1.1 server on a TCP socket, so the
//! race is reproduced deterministically: it answers the first request of
//! each connection with keep-alive, then reads the next request on that
//! connection and closes it without a byte of answer.

use crate::common;

use bytes::Bytes;
use common::{Foldgate, config_for, mock, post_json, send};
use http::{Method, Request};
use http_body_util::BodyExt;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const COMPLETION: &str = r#"{"id":"c1","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}"#;

/// What the raw upstream does with each connection.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Answers the connection's first request (keep-alive), then closes
    /// the connection when the next request arrives, answering nothing.
    CloseOnReuse,
    /// Reads each request and closes without answering.
    DropAll,
    /// Resets the first connection as soon as it is accepted; answers on
    /// the others.
    ResetFirst,
}

/// Counts of what the raw upstream saw.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    requests: AtomicUsize,
    answered: AtomicUsize,
    /// Requests that arrived on a reused connection and were dropped.
    dropped_on_reuse: AtomicUsize,
    /// Body bytes of the requests it answered.
    body_bytes: AtomicUsize,
}

struct RawUpstream {
    url: String,
    seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RawUpstream {
    async fn start(behaviour: Behaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Seen::default());
        let counts = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let n = counts.connections.fetch_add(1, Ordering::SeqCst);
                if matches!(behaviour, Behaviour::ResetFirst) && n == 0 {
                    stream.set_zero_linger().unwrap();
                    continue;
                }
                tokio::spawn(connection(stream, behaviour, counts.clone()));
            }
        });
        Self { url, seen, task }
    }

    fn count(&self, field: fn(&Seen) -> &AtomicUsize) -> usize {
        field(&self.seen).load(Ordering::SeqCst)
    }
}

async fn connection(mut stream: TcpStream, behaviour: Behaviour, seen: Arc<Seen>) {
    let mut buf = Vec::new();
    for served in 0.. {
        let Some(body_len) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        seen.requests.fetch_add(1, Ordering::SeqCst);
        match (behaviour, served) {
            (Behaviour::CloseOnReuse, 0) | (Behaviour::ResetFirst, _) => {
                seen.answered.fetch_add(1, Ordering::SeqCst);
                seen.body_bytes.fetch_add(body_len, Ordering::SeqCst);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    COMPLETION.len()
                );
                if stream.write_all(head.as_bytes()).await.is_err()
                    || stream.write_all(COMPLETION.as_bytes()).await.is_err()
                {
                    return;
                }
            }
            (Behaviour::CloseOnReuse, _) => {
                seen.dropped_on_reuse.fetch_add(1, Ordering::SeqCst);
                return;
            }
            (Behaviour::DropAll, _) => return,
        }
    }
}

/// Reads one request (head, then a Content-Length or chunked body) off
/// the connection; `None` at end of stream. Returns the body's length.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        fill(stream, buf).await?;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    buf.drain(..head_end);
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    };
    if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        let mut total = 0;
        loop {
            let line_end = loop {
                if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                    break i;
                }
                fill(stream, buf).await?;
            };
            let size = usize::from_str_radix(String::from_utf8_lossy(&buf[..line_end]).trim(), 16)
                .unwrap();
            while buf.len() < line_end + 2 + size + 2 {
                fill(stream, buf).await?;
            }
            buf.drain(..line_end + 2 + size + 2);
            total += size;
            if size == 0 {
                return Some(total);
            }
        }
    }
    let len: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
    while buf.len() < len {
        fill(stream, buf).await?;
    }
    buf.drain(..len);
    Some(len)
}

async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 4096];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Some(())
        }
    }
}

fn chat_body() -> serde_json::Value {
    json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
}

async fn post_chat(fg: &Foldgate) -> common::Reply {
    post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[],
        &chat_body(),
    )
    .await
}

/// Waits until the answered connection is back in foldgate's pool: the
/// next request then reuses it (asserted through `dropped_on_reuse`).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

#[tokio::test]
async fn chat_request_on_a_connection_closed_at_reuse_gets_the_answer() {
    let upstream = RawUpstream::start(Behaviour::CloseOnReuse).await;
    let fg = Foldgate::start(&config_for(&upstream.url, "")).await;
    let url = format!("{}/v1/chat/completions", fg.url);

    post_json(&url, &[], &chat_body()).await.assert_ok();
    settle().await;
    let reply = post_json(&url, &[], &chat_body()).await;

    reply.assert_ok();
    assert_eq!(reply.json()["choices"][0]["message"]["content"], "ok");
    assert_eq!(
        upstream.count(|s| &s.dropped_on_reuse),
        1,
        "the second request went out on the pooled connection, which the upstream closed"
    );
    assert_eq!(upstream.count(|s| &s.answered), 2);
    assert_eq!(upstream.count(|s| &s.connections), 2);
    // The body sent again is the whole request.
    let body_len = chat_body().to_string().len();
    assert_eq!(upstream.count(|s| &s.body_bytes), 2 * body_len);
}

#[tokio::test]
async fn passthrough_get_and_json_post_are_retried_too() {
    let upstream = RawUpstream::start(Behaviour::CloseOnReuse).await;
    let fg = Foldgate::start(&config_for(&upstream.url, "")).await;
    let models = format!("{}/v1/models", fg.url);
    let embeddings = format!("{}/v1/embeddings", fg.url);

    send(Method::GET, &models, &[], "").await.assert_ok();
    settle().await;
    send(Method::GET, &models, &[], "").await.assert_ok();
    settle().await;
    post_json(&embeddings, &[], &json!({"model": "m", "input": "x"}))
        .await
        .assert_ok();

    assert_eq!(upstream.count(|s| &s.dropped_on_reuse), 2);
    assert_eq!(upstream.count(|s| &s.answered), 3);
}

#[tokio::test]
async fn upstream_dropping_every_connection_gives_a_502_envelope_after_one_retry() {
    let upstream = RawUpstream::start(Behaviour::DropAll).await;
    let fg = Foldgate::start(&config_for(&upstream.url, "")).await;
    let started = Instant::now();

    let reply = post_chat(&fg).await;

    reply.assert_envelope(502, "upstream_unreachable");
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("connection closed before message completed"),
        "{}",
        reply.json()
    );
    assert_eq!(upstream.count(|s| &s.requests), 2, "one try and one retry");
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");

    let reply = send(Method::GET, &format!("{}/v1/models", fg.url), &[], "").await;
    reply.assert_envelope(502, "upstream_unreachable");
    assert_eq!(upstream.count(|s| &s.requests), 4);
}

#[tokio::test]
async fn a_body_still_streaming_arrives_whole_and_is_never_replayed() {
    let upstream = RawUpstream::start(Behaviour::CloseOnReuse).await;
    let fg = Foldgate::start(&config_for(&upstream.url, "")).await;
    let upload = |parts: usize| {
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        tokio::spawn(async move {
            for _ in 0..parts {
                if tx.send(Bytes::from(vec![b'a'; 300])).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Request::post(format!("{}/v1/files", fg.url))
            .header("content-type", "application/octet-stream")
            .body(foldgate::body::boxed(mock::ChannelBody(rx)))
            .unwrap()
    };

    // On a new connection: forwarded whole, frame by frame.
    let resp = common::client().request(upload(3)).await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.into_body().collect().await.unwrap();
    assert_eq!(upstream.count(|s| &s.body_bytes), 900);
    settle().await;

    // On the pooled connection the upstream closes: the client's stream is
    // partly consumed and cannot be sent again, so the answer is a 502.
    let resp = common::client().request(upload(3)).await.unwrap();
    assert_eq!(resp.status(), 502);
    assert_eq!(upstream.count(|s| &s.dropped_on_reuse), 1);
    assert_eq!(upstream.count(|s| &s.requests), 2, "no retry of a stream");
}

#[tokio::test]
async fn a_connection_reset_as_it_opens_is_retried_and_a_refused_one_fails_fast() {
    let upstream = RawUpstream::start(Behaviour::ResetFirst).await;
    let fg = Foldgate::start(&config_for(&upstream.url, "")).await;

    let reply = post_chat(&fg).await;

    reply.assert_ok();
    assert_eq!(upstream.count(|s| &s.connections), 2);
    assert_eq!(upstream.count(|s| &s.answered), 1);

    // Nothing listens on a port just freed: refused at once, a prompt 502.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let fg = Foldgate::start(&config_for(&format!("http://127.0.0.1:{port}"), "")).await;
    let started = Instant::now();
    let reply = post_chat(&fg).await;
    reply.assert_envelope(502, "upstream_unreachable");
    assert!(started.elapsed() < Duration::from_secs(5));
}
