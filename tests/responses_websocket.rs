//! The Responses API over WebSocket (what Codex opens first): the upgrade
//! on `/v1/responses` is answered 101 at once; each `response.create`
//! frame runs through the pipeline as a `POST` to the mock upstream (with
//! `stream: true`), whose events come back one frame each; a long
//! conversation over the socket folds; errors come back as error frames.

use crate::common;

use common::Foldgate;
use common::llm::{Llm, assert_covers};
use common::mock::{self, Mock, Recorded};
use foldgate::fold::summary::HEADING_PREFIX;
use futures_util::{SinkExt, StreamExt};
use http::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

type Socket = tokio_tungstenite::WebSocketStream<TcpStream>;

/// Opens a socket on `path` with `headers`; the upgrade's status on refusal.
async fn open(fg: &Foldgate, path: &str, headers: &[(&str, &str)]) -> Result<Socket, u16> {
    let mut request = format!("ws://{}{path}", fg.addr)
        .into_client_request()
        .unwrap();
    for (name, value) in headers {
        request.headers_mut().insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    let tcp = TcpStream::connect(fg.addr).await.unwrap();
    match tokio_tungstenite::client_async(request, tcp).await {
        Ok((socket, response)) => {
            assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
            Ok(socket)
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(response.status().as_u16())
        }
        Err(e) => panic!("upgrade failed: {e}"),
    }
}

/// The events of one answer, up to the one that ends it.
async fn answer(socket: &mut Socket) -> Vec<Value> {
    let mut events = Vec::new();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(30), socket.next())
            .await
            .expect("an event within 30 s")
            .expect("the socket stays open")
            .unwrap();
        let Message::Text(text) = message else {
            continue;
        };
        let event: Value = serde_json::from_str(text.as_str()).unwrap();
        let kind = event["type"].as_str().unwrap().to_string();
        events.push(event);
        if ["response.completed", "response.failed", "error"].contains(&kind.as_str()) {
            return events;
        }
    }
}

async fn create(socket: &mut Socket, frame: Value) -> Vec<Value> {
    socket.send(Message::text(frame.to_string())).await.unwrap();
    answer(socket).await
}

/// An event stream answering a Responses request: created, one message,
/// completed.
fn sse_answer(id: &str, text: &str) -> http::Response<foldgate::body::Body> {
    let item = json!({"type": "message", "id": format!("msg_{id}"), "role": "assistant",
                      "content": [{"type": "output_text", "text": text}]});
    let response = json!({"id": id, "object": "response", "status": "completed", "output": [item],
                          "usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}});
    let events = [
        json!({"type": "response.created", "response": {"id": id, "status": "in_progress", "output": []}}),
        json!({"type": "response.output_text.delta", "delta": text}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        json!({"type": "response.completed", "response": response}),
    ];
    let body: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect();
    http::Response::builder()
        .header("content-type", "text/event-stream")
        .body(foldgate::body::full(body))
        .unwrap()
}

/// The Python `websockets` client drives a Codex-shaped agent loop over one
/// socket (warm-up, then frames carrying only the new items after
/// `previous_response_id`): every frame reaches the upstream as an HTTP
/// POST with the whole input (folded once it grows), streamed back.
#[tokio::test]
async fn websockets_client_agent_loop_folds_over_one_socket() {
    let llm = Llm::start().await;
    llm.state.window_tokens.store(6000, Ordering::Relaxed);
    let fg = Foldgate::start(&format!(
        "{}[models.\"tiny-*\"]\ncontext_window = 3000\n\
         [policy]\nreset_ratio = 0.45\n[summarizer]\nmax_summary_tokens = 300\n",
        common::providers(llm.url())
    ))
    .await;
    let log = common::drive_value("responses_websocket.py", &format!("{}/v1", fg.url)).await;
    assert!(
        log["upgrade_ms"].as_f64().unwrap() < 1000.0,
        "the upgrade took {} ms",
        log["upgrade_ms"]
    );
    assert!(llm.state.violations.lock().unwrap().is_empty());
    let steps = log["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 30);
    assert!(steps.iter().filter(|s| s["incremental"] == true).count() >= 20);
    // The warm-up went nowhere; every other frame is one POST.
    let upstream = llm.chat_requests();
    assert_eq!(upstream.len(), 32, "one upstream request per frame");
    let mut folded = 0;
    for (i, (step, body)) in steps.iter().zip(&upstream).enumerate() {
        assert_eq!(body["stream"], true, "request {i}");
        for gone in ["type", "previous_response_id", "generate"] {
            assert!(body.get(gone).is_none(), "request {i} carries {gone}");
        }
        assert_eq!(body["instructions"], "You are a careful coding agent.");
        let sent = step["sent"].as_array().unwrap();
        let input = body["input"].as_array().unwrap();
        let summary = input
            .iter()
            .filter(|i| i["role"] == "system")
            .filter_map(|i| i["content"].as_str())
            .collect::<String>();
        assert_covers(sent, input, &summary, |item| {
            item.to_string().contains(HEADING_PREFIX)
        });
        if summary.is_empty() {
            assert_eq!(input, sent, "request {i}: the whole input, unfolded");
        } else {
            folded += 1;
        }
        let events = step["events"].as_array().unwrap();
        assert!(events.contains(&json!("response.output_item.done")));
    }
    assert!(
        folded >= 10,
        "only {folded} of 30 requests carried a summary"
    );
    let metrics = fg.metrics().await;
    assert!(common::folds_counted(&metrics) >= 1.0);
    // Back to back: answered in the order sent.
    let last: Vec<&str> = upstream[30..]
        .iter()
        .map(|b| b["input"][0]["content"].as_str().unwrap())
        .collect();
    assert_eq!(last, ["[m901] side question 1", "[m902] side question 2"]);
    let ids: Vec<u32> = log["back_to_back"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap()["resp_".len()..].parse().unwrap())
        .collect();
    assert!(ids[0] < ids[1], "{ids:?}");
    // Over HTTP: POSTs to the provider's /responses, the client's key on them.
    let posts: Vec<Recorded> = llm
        .mock
        .received()
        .into_iter()
        .filter(|r| r.uri.ends_with("/responses"))
        .collect();
    assert_eq!(posts.len(), 32);
    for post in &posts {
        assert_eq!(post.method, http::Method::POST);
        assert_eq!(post.uri, "/v1/responses");
        assert_eq!(post.header("authorization"), Some("Bearer sk-ws-e2e"));
        assert_eq!(post.header("upgrade"), None);
        assert_eq!(post.header("sec-websocket-key"), None);
    }
}

/// The upgrade is answered 101 with the accept key at once, by foldgate:
/// nothing reaches the upstream until a frame comes.
#[tokio::test]
async fn upgrade_is_answered_101_at_once() {
    let upstream = Mock::start(|_| async {
        mock::json(StatusCode::NOT_FOUND, &json!({"error": {"message": "no"}}))
    })
    .await;
    let fg = Foldgate::start(&common::config_for(&upstream.url, "")).await;
    for path in ["/v1/responses", "/responses", "/openai/v1/responses"] {
        let started = Instant::now();
        let mut tcp = TcpStream::connect(fg.addr).await.unwrap();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
             Authorization: Bearer sk-1\r\n\r\n",
            fg.addr
        );
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tokio::time::timeout(Duration::from_secs(2), tcp.read(&mut buf))
                .await
                .expect("the upgrade's answer within 2 s")
                .unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&head));
            head.extend_from_slice(&buf[..n]);
        }
        let head = String::from_utf8_lossy(&head).to_lowercase();
        assert!(
            head.starts_with("http/1.1 101 switching protocols\r\n"),
            "{head}"
        );
        // RFC 6455's example key and its accept value.
        assert!(
            head.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo=\r\n"),
            "{head}"
        );
        assert!(head.contains("upgrade: websocket\r\n"), "{head}");
        assert!(started.elapsed() < Duration::from_secs(1));
    }
    assert!(upstream.received().is_empty(), "nothing went upstream");
    // A GET without Upgrade on the same path is forwarded as before.
    let plain = common::send(
        http::Method::GET,
        &format!("{}/v1/responses", fg.url),
        &[],
        Vec::new(),
    )
    .await;
    assert_eq!(plain.status, 404);
    assert_eq!(upstream.received().len(), 1);
}

/// Failures come back as error frames in the shape Codex reads (`type`,
/// `status`, `error`), and the socket stays open for the next frame; a
/// refused key refuses the upgrade itself.
#[tokio::test]
async fn errors_come_back_as_error_frames() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let upstream = Mock::start(move |r: Recorded| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        async move {
            let body = r.json();
            assert_eq!(body["stream"], true);
            match n {
                0 => mock::json(
                    StatusCode::TOO_MANY_REQUESTS,
                    &json!({"error": {"type": "rate_limit_exceeded", "code": "rate_limit_exceeded",
                                      "message": "Rate limit reached. Please try again in 1s."}}),
                ),
                1 => http::Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(foldgate::body::full(
                        "data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_cut\"}}\n\n",
                    ))
                    .unwrap(),
                _ => sse_answer("resp_ok", "[m2] fine"),
            }
        }
    })
    .await;
    let fg = Foldgate::start(&common::config_for(
        &upstream.url,
        "[server]\napi_keys = [\"sk-good\"]\nmax_body_bytes = 65536\n",
    ))
    .await;
    assert_eq!(open(&fg, "/v1/responses", &[]).await.err(), Some(401));
    let bad = [("authorization", "Bearer sk-bad")];
    assert_eq!(open(&fg, "/v1/responses", &bad).await.err(), Some(401));
    let good = [("authorization", "Bearer sk-good")];
    let mut socket = open(&fg, "/v1/responses", &good).await.unwrap();
    let frame = json!({"type": "response.create", "model": "gpt-x",
                       "input": [{"role": "user", "content": "[m1] hi"}]});
    // The upstream's 429, its error object kept.
    let events = create(&mut socket, frame.clone()).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "error");
    assert_eq!(events[0]["status"], 429);
    assert_eq!(events[0]["error"]["code"], "rate_limit_exceeded");
    // A stream that ends before response.completed.
    let events = create(&mut socket, frame.clone()).await;
    assert_eq!(events[0]["type"], "response.created");
    assert_eq!(events[1]["type"], "error");
    assert_eq!(events[1]["status"], 502);
    // Not a response.create: said, and the socket goes on.
    let events = create(&mut socket, json!({"type": "session.update"})).await;
    assert_eq!(events[0]["status"], 400);
    let events = create(&mut socket, frame.clone()).await;
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.output_text.delta",
            "response.output_item.done",
            "response.completed"
        ]
    );
    // The next frame continues that answer: the upstream gets the whole input.
    let next = json!({"type": "response.create", "model": "gpt-x", "previous_response_id": "resp_ok",
                      "input": [{"role": "user", "content": "[m3] and then?"}]});
    let events = create(&mut socket, next).await;
    assert_eq!(events.last().unwrap()["type"], "response.completed");
    let last = upstream.received().last().unwrap().json();
    assert!(last.get("previous_response_id").is_none(), "{last}");
    let contents: Vec<Value> = last["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["content"].clone())
        .collect();
    assert_eq!(
        contents,
        [
            json!("[m1] hi"),
            json!([{"type": "output_text", "text": "[m2] fine"}]),
            json!("[m3] and then?")
        ]
    );
    // A frame over server.max_body_bytes: said, then the socket ends.
    let big = json!({"type": "response.create", "model": "gpt-x",
                     "input": [{"role": "user", "content": "x".repeat(70_000)}]});
    let events = create(&mut socket, big).await;
    assert_eq!(events[0]["status"], 413, "{}", events[0]);
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}
