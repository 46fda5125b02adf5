//! Passthrough behaviour of the proxy against a real mock upstream.

use crate::common;

use bytes::Bytes;
use common::mock::{self, Mock, Recorded};
use common::{Foldgate, config_for, send};
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use std::time::Duration;

#[tokio::test]
async fn get_with_query_passes_through() {
    let upstream = Mock::echo().await;
    let fg = Foldgate::start(&config_for(&upstream.url, "")).await;
    let reply = send(
        Method::GET,
        &format!("{}/v1/models?limit=3&after=x%20y", fg.url),
        &[("x-custom", "kept")],
        "",
    )
    .await;
    assert_eq!(reply.status, 200);
    let got = &upstream.received()[0];
    assert_eq!(got.uri, "/v1/models?limit=3&after=x%20y");
    assert_eq!(got.header("x-custom"), Some("kept"));
    assert_eq!(got.header("host"), Some(upstream.addr.to_string().as_str()));
    assert!(reply.headers.contains_key("x-request-id"));
}

#[tokio::test]
async fn json_post_is_byte_exact() {
    let upstream = Mock::echo().await;
    let fg = Foldgate::start(&config_for(&upstream.url, "")).await;
    // Odd spacing, key order and escapes must survive untouched.
    let body = "{ \"model\":\"gpt-4o\",  \"z\":1,\"a\":[1,2 ,3],\"s\":\"\\u00e9\\n\" }";
    let reply = send(
        Method::POST,
        &format!("{}/v1/embeddings", fg.url),
        &[("content-type", "application/json")],
        body,
    )
    .await;
    assert_eq!(reply.status, 200);
    let got = &upstream.received()[0];
    assert_eq!(got.uri, "/v1/embeddings");
    assert_eq!(got.body, Bytes::from(body));
}

#[tokio::test]
async fn binary_and_multipart_bodies_are_byte_exact() {
    let upstream = Mock::echo().await;
    let fg = Foldgate::start(&config_for(&upstream.url, "")).await;
    let binary: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let reply = send(
        Method::PUT,
        &format!("{}/v1/files/raw", fg.url),
        &[("content-type", "application/octet-stream")],
        binary.clone(),
    )
    .await;
    assert_eq!(reply.status, 200);
    let multipart = b"--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF\x00\x01\xff\r\n--XyZ--\r\n".to_vec();
    send(
        Method::POST,
        &format!("{}/v1/audio/transcriptions", fg.url),
        &[("content-type", "multipart/form-data; boundary=XyZ")],
        multipart.clone(),
    )
    .await;
    let got = upstream.received();
    assert_eq!(got[0].body.as_ref(), binary.as_slice());
    assert_eq!(got[0].method, Method::PUT);
    assert_eq!(got[1].body.as_ref(), multipart.as_slice());
    assert_eq!(
        got[1].header("content-type"),
        Some("multipart/form-data; boundary=XyZ")
    );
}

#[tokio::test]
async fn unknown_routes_and_paths_without_v1_are_forwarded() {
    let upstream = Mock::echo().await;
    let fg = Foldgate::start(&config_for(&upstream.url, "")).await;
    send(
        Method::DELETE,
        &format!("{}/v1/some/new/route?q=1", fg.url),
        &[],
        "",
    )
    .await;
    send(Method::GET, &format!("{}/models", fg.url), &[], "").await;
    let got = upstream.received();
    assert_eq!(
        (got[0].method.as_str(), got[0].uri.as_str()),
        ("DELETE", "/v1/some/new/route?q=1")
    );
    assert_eq!(got[1].uri, "/v1/models");
}

#[tokio::test]
async fn upstream_errors_pass_through_unchanged() {
    let upstream = Mock::start(|r: Recorded| async move {
        let status = if r.uri.contains("missing") {
            StatusCode::NOT_FOUND
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        let mut resp = mock::json(
            status,
            &serde_json::json!({"error": {"message": "from upstream", "code": "x"}}),
        );
        resp.headers_mut()
            .insert("retry-after", "7".parse().unwrap());
        resp
    })
    .await;
    let fg = Foldgate::start(&config_for(&upstream.url, "")).await;
    for (path, status) in [("/v1/missing", 404), ("/v1/chat/completions", 503)] {
        let reply = send(Method::GET, &format!("{}{path}", fg.url), &[], "").await;
        assert_eq!(reply.status.as_u16(), status);
        assert_eq!(reply.json()["error"]["message"], "from upstream");
        assert_eq!(reply.headers["retry-after"], "7");
    }
}

/// An upstream that streams `first`, then holds the rest of the event
/// stream until the returned sender fires.
async fn held_stream(
    first: &'static [u8],
    rest: &'static [u8],
) -> (Mock, tokio::sync::oneshot::Sender<()>) {
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let release = std::sync::Arc::new(std::sync::Mutex::new(Some(release_rx)));
    let upstream = Mock::start(move |_r: Recorded| {
        let release = release.lock().unwrap().take();
        async move {
            let (tx, resp) = mock::stream("text/event-stream");
            tokio::spawn(async move {
                tx.send(Bytes::from_static(first)).await.unwrap();
                if let Some(rx) = release {
                    let _ = rx.await;
                }
                tx.send(Bytes::from_static(rest)).await.unwrap();
            });
            resp
        }
    })
    .await;
    (upstream, release_tx)
}

#[tokio::test]
async fn sse_chunks_arrive_while_upstream_holds_the_rest() {
    let (upstream, release_tx) = held_stream(
        b"data: {\"n\":1}\n\n",
        b"data: {\"n\":2}\n\ndata: [DONE]\n\n",
    )
    .await;
    let fg = Foldgate::start(&config_for(&upstream.url, "")).await;
    let req = Request::post(format!("{}/v1/chat/completions", fg.url))
        .header("content-type", "application/json")
        .body(foldgate::body::full(
            r#"{"model":"m","messages":[],"stream":true}"#,
        ))
        .unwrap();
    let resp = common::client().request(req).await.unwrap();
    assert_eq!(resp.headers()["x-accel-buffering"], "no");
    let mut body = resp.into_body();
    let first = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("first chunk must arrive while the upstream holds the rest")
        .unwrap()
        .unwrap();
    assert_eq!(
        first.into_data().unwrap(),
        Bytes::from_static(b"data: {\"n\":1}\n\n")
    );
    release_tx.send(()).unwrap();
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(
        rest,
        Bytes::from_static(b"data: {\"n\":2}\n\ndata: [DONE]\n\n")
    );
}

#[tokio::test]
async fn unreachable_upstream_is_502() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let fg = Foldgate::start(&config_for(&format!("http://127.0.0.1:{port}"), "")).await;
    let reply = send(Method::GET, &format!("{}/v1/models", fg.url), &[], "").await;
    reply.assert_envelope(502, "upstream_unreachable");
}

#[tokio::test]
async fn upstream_dropping_the_connection_is_502() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            use tokio::io::AsyncReadExt;
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            drop(s);
        }
    });
    let fg = Foldgate::start(&config_for(&format!("http://{addr}"), "")).await;
    let reply = common::post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[],
        &serde_json::json!({"model":"m","messages":[]}),
    )
    .await;
    reply.assert_envelope(502, "upstream_unreachable");
}

#[tokio::test]
async fn slow_upstream_is_504() {
    let upstream = Mock::start(|_r: Recorded| {
        mock::delayed(
            Duration::from_secs(5),
            mock::json(StatusCode::OK, &serde_json::json!({})),
        )
    })
    .await;
    let fg = Foldgate::start(&config_for(
        &upstream.url,
        "[server]\nupstream_timeout = \"300ms\"\n",
    ))
    .await;
    let started = std::time::Instant::now();
    let reply = send(Method::GET, &format!("{}/v1/models", fg.url), &[], "").await;
    reply.assert_envelope(504, "upstream_timeout");
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test]
async fn bodies_over_the_limit_are_413() {
    let upstream = Mock::echo().await;
    let fg = Foldgate::start(&config_for(
        &upstream.url,
        "[server]\nmax_body_bytes = 1000\n",
    ))
    .await;
    let big = format!("{{\"model\":\"m\",\"input\":\"{}\"}}", "x".repeat(2000));
    let reply = send(
        Method::POST,
        &format!("{}/v1/embeddings", fg.url),
        &[("content-type", "application/json")],
        big,
    )
    .await;
    reply.assert_envelope(413, "request_too_large");

    // A chunked upload without Content-Length is cut off by the stream limit.
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
        for _ in 0..4 {
            if tx.send(Bytes::from(vec![b'a'; 600])).await.is_err() {
                break;
            }
        }
    });
    let req = Request::post(format!("{}/v1/files", fg.url))
        .header("content-type", "application/octet-stream")
        .body(foldgate::body::boxed(mock::ChannelBody(rx)))
        .unwrap();
    let resp = common::client().request(req).await.unwrap();
    assert_eq!(resp.status(), 413);

    // At the limit is fine.
    let ok = send(
        Method::POST,
        &format!("{}/v1/files", fg.url),
        &[],
        vec![b'a'; 1000],
    )
    .await;
    assert_eq!(ok.status, 200);
    assert_eq!(upstream.received().last().unwrap().body.len(), 1000);
}

#[tokio::test]
async fn routes_by_model_glob_to_two_providers() {
    let openai = Mock::echo().await;
    let local = Mock::echo().await;
    let toml = format!(
        "[providers.openai]\nbase_url = \"{}/v1\"\nmodels = [\"*\"]\n\
         [providers.local]\nbase_url = \"{}/api/v1\"\nmodels = [\"llama*\", \"qwen?-*\"]\n",
        openai.url, local.url
    );
    let fg = Foldgate::start(&toml).await;
    for model in ["gpt-4o", "llama3.1:8b", "qwen3-32b", "claude"] {
        let body = serde_json::json!({"model": model, "input": "hi"});
        let reply = common::post_json(&format!("{}/v1/embeddings", fg.url), &[], &body).await;
        assert_eq!(reply.status, 200);
    }
    // Non-JSON requests go to the default provider.
    send(Method::GET, &format!("{}/v1/models", fg.url), &[], "").await;
    let models = |m: &Mock| {
        m.received()
            .iter()
            .map(|r| r.json().get("model").cloned())
            .collect::<Vec<_>>()
    };
    assert_eq!(local.received().len(), 2);
    assert_eq!(
        models(&local),
        vec![Some("llama3.1:8b".into()), Some("qwen3-32b".into())]
    );
    assert!(
        local
            .received()
            .iter()
            .all(|r| r.uri == "/api/v1/embeddings")
    );
    assert_eq!(openai.received().len(), 3);
    assert_eq!(openai.received()[2].uri, "/v1/models");
}

#[tokio::test]
async fn api_keys_guard_the_proxy_but_not_health() {
    let upstream = Mock::echo().await;
    let fg = Foldgate::start(&config_for(
        &upstream.url,
        "[server]\napi_keys = [\"fg-key-1\", \"fg-key-2\"]\n",
    ))
    .await;
    let url = format!("{}/v1/models", fg.url);
    send(Method::GET, &url, &[], "")
        .await
        .assert_envelope(401, "invalid_api_key");
    send(Method::GET, &url, &[("authorization", "Bearer nope")], "")
        .await
        .assert_envelope(401, "invalid_api_key");
    assert_eq!(
        send(
            Method::GET,
            &url,
            &[("authorization", "Bearer fg-key-2")],
            ""
        )
        .await
        .status,
        200
    );
    assert_eq!(
        send(Method::GET, &url, &[("x-api-key", "fg-key-1")], "")
            .await
            .status,
        200
    );
    assert_eq!(
        send(Method::GET, &format!("{}/foldgate/health", fg.url), &[], "")
            .await
            .status,
        200
    );
    // foldgate's own key is not the upstream's credential.
    let got = upstream.received();
    assert_eq!(got.len(), 2);
    assert!(
        got.iter()
            .all(|r| r.header("authorization").is_none() && r.header("x-api-key").is_none())
    );
}

#[tokio::test]
async fn client_authorization_passes_through_by_default() {
    let upstream = Mock::echo().await;
    let fg = Foldgate::start(&config_for(&upstream.url, "")).await;
    send(
        Method::GET,
        &format!("{}/v1/models", fg.url),
        &[("authorization", "Bearer sk-client")],
        "",
    )
    .await;
    assert_eq!(
        upstream.received()[0].header("authorization"),
        Some("Bearer sk-client")
    );
}

#[tokio::test]
async fn provider_key_replaces_client_authorization() {
    // SAFETY: nextest runs every test in its own process; the name is unique.
    unsafe { std::env::set_var("FOLDGATE_TEST_PROVIDER_KEY", "sk-provider-secret") };
    let upstream = Mock::echo().await;
    let fg = Foldgate::start(&format!(
        "[providers.p]\nbase_url = \"{}/v1\"\napi_key_env = \"FOLDGATE_TEST_PROVIDER_KEY\"\n",
        upstream.url
    ))
    .await;
    send(
        Method::GET,
        &format!("{}/v1/models", fg.url),
        &[("authorization", "Bearer sk-client")],
        "",
    )
    .await;
    assert_eq!(
        upstream.received()[0].header("authorization"),
        Some("Bearer sk-provider-secret")
    );
}

#[tokio::test]
async fn health_and_unknown_admin_routes() {
    let upstream = Mock::echo().await;
    let fg = Foldgate::start(&config_for(&upstream.url, "")).await;
    let health = send(Method::GET, &format!("{}/foldgate/health", fg.url), &[], "").await;
    assert_eq!(health.status, 200);
    assert_eq!(health.json()["status"], "ok");
    send(Method::GET, &format!("{}/foldgate/nope", fg.url), &[], "")
        .await
        .assert_envelope(404, "not_found");
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn graceful_shutdown_finishes_an_in_flight_stream() {
    let (upstream, release_tx) = held_stream(b"data: first\n\n", b"data: last\n\n").await;
    let mut fg = Foldgate::start(&config_for(
        &upstream.url,
        "[server]\nshutdown_timeout = \"10s\"\n",
    ))
    .await;
    let req = Request::get(format!("{}/v1/stream", fg.url))
        .body(foldgate::body::empty())
        .unwrap();
    let mut body = common::client().request(req).await.unwrap().into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, Bytes::from_static(b"data: first\n\n"));

    fg.begin_shutdown();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // New connections are refused once shutdown began.
    assert!(tokio::net::TcpStream::connect(fg.addr).await.is_err());
    release_tx.send(()).unwrap();
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(rest, Bytes::from_static(b"data: last\n\n"));
    tokio::time::timeout(Duration::from_secs(5), fg.task.take().unwrap())
        .await
        .expect("server stops once the stream is done")
        .unwrap();
}

/// Sends `request` as raw bytes (as `curl --path-as-is` would: no client
/// normalizes the path) and returns the response's status line.
async fn raw_status(addr: std::net::SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let text = String::from_utf8_lossy(&answer).into_owned();
    text.lines().next().unwrap_or_default().to_string()
}

#[tokio::test]
async fn paths_that_climb_out_of_base_url_are_refused() {
    let upstream = Mock::echo().await;
    let fg = Foldgate::start(&config_for(&upstream.url, "")).await;
    for path in [
        "/v1/../../etc/passwd",
        "/v1/%2e%2e/%2e%2e/etc/passwd",
        "/v1/..%2f..%2fetc/passwd",
        "/v1/./../admin",
    ] {
        for method in ["GET", "POST"] {
            let request = format!(
                "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                 content-length: 2\r\nconnection: close\r\n\r\n{{}}"
            );
            let status = raw_status(fg.addr, &request).await;
            assert!(status.contains(" 400 "), "{method} {path}: {status}");
        }
    }
    let chat = "POST /v1/../v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                content-length: 2\r\nconnection: close\r\n\r\n{}";
    assert!(raw_status(fg.addr, chat).await.contains(" 400 "));
    assert!(
        upstream.received().is_empty(),
        "nothing reached the upstream"
    );
    // An ordinary path still goes through.
    let ok = "GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    assert!(raw_status(fg.addr, ok).await.contains(" 200 "));
    assert_eq!(upstream.received().len(), 1);
}

#[tokio::test]
async fn a_model_no_provider_lists_is_404_and_never_forwarded() {
    let openai = Mock::echo().await;
    let local = Mock::echo().await;
    let toml = format!(
        "[providers.openai]\nbase_url = \"{}/v1\"\nmodels = [\"gpt-*\"]\n\
         [providers.local]\nbase_url = \"{}/v1\"\nmodels = [\"llama*\"]\n",
        openai.url, local.url
    );
    let fg = Foldgate::start(&toml).await;
    for path in ["/v1/chat/completions", "/v1/embeddings"] {
        let body = serde_json::json!({"model": "claude-3-opus", "input": "hi",
            "messages": [{"role": "user", "content": "hi"}]});
        let reply = common::post_json(&format!("{}{path}", fg.url), &[], &body).await;
        reply.assert_envelope(404, "model_not_found");
        assert_eq!(reply.json()["error"]["param"], "model");
    }
    assert!(openai.received().is_empty() && local.received().is_empty());
    // Listed models and requests without a model still go through.
    let body = serde_json::json!({"model": "llama3", "input": "hi"});
    let reply = common::post_json(&format!("{}/v1/embeddings", fg.url), &[], &body).await;
    reply.assert_ok();
    send(Method::GET, &format!("{}/v1/models", fg.url), &[], "").await;
    assert_eq!((openai.received().len(), local.received().len()), (0, 2));
}

#[tokio::test]
async fn an_overlong_conversation_header_is_refused() {
    let upstream = Mock::echo().await;
    let fg = Foldgate::start(&config_for(&upstream.url, "")).await;
    let body =
        serde_json::json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
    let url = format!("{}/v1/chat/completions", fg.url);
    let long = "x".repeat(100 * 1024);
    let reply = common::post_json(&url, &[("x-conversation-id", &long)], &body).await;
    reply.assert_envelope(400, "invalid_request");
    assert!(upstream.received().is_empty());
    let limit = "x".repeat(1024);
    common::post_json(&url, &[("x-conversation-id", &limit)], &body)
        .await
        .assert_ok();
    assert_eq!(upstream.received().len(), 1);
}

#[tokio::test]
async fn over_the_concurrency_limit_requests_are_shed_with_retry_after() {
    let (upstream, release) = held_stream(b"data: one\n\n", b"data: [DONE]\n\n").await;
    let fg = Foldgate::start(&config_for(
        &upstream.url,
        "[server]\nmax_concurrent_requests = 1\n",
    ))
    .await;
    let url = format!("{}/v1/anything", fg.url);
    // The first request streams and holds its slot until its body ends.
    let held = common::client()
        .request(Request::get(&url).body(foldgate::body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(held.status(), 200);
    let shed = send(Method::GET, &url, &[], "").await;
    shed.assert_envelope(503, "overloaded");
    assert_eq!(shed.headers["retry-after"], "1");
    // Health is never shed.
    let health = send(Method::GET, &format!("{}/foldgate/health", fg.url), &[], "").await;
    assert_eq!(health.status, 200);
    release.send(()).unwrap();
    held.into_body().collect().await.unwrap();
    // The slot is free again once the stream has ended.
    let mut status = 0;
    for _ in 0..50 {
        status = send(Method::GET, &url, &[], "").await.status.as_u16();
        if status != 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_slowloris_client_is_cut_off_within_the_header_timeout() {
    use tokio::io::AsyncWriteExt;
    let (upstream, fg) = with_short_header_timeout().await;
    let mut stream = tokio::net::TcpStream::connect(fg.addr).await.unwrap();
    stream
        .write_all(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    // The rest of the headers never come: the server must close the connection.
    assert_closed_soon(stream).await;
    assert!(upstream.received().is_empty());
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_upstream, fg) = with_short_header_timeout().await;
    let mut stream = tokio::net::TcpStream::connect(fg.addr).await.unwrap();
    stream
        .write_all(b"GET /foldgate/health HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // The connection stays open for another request, but not forever.
    assert_closed_soon(stream).await;
}

/// foldgate with a 300 ms `header_read_timeout` in front of an echo upstream.
async fn with_short_header_timeout() -> (Mock, Foldgate) {
    let upstream = Mock::echo().await;
    let fg = Foldgate::start(&config_for(
        &upstream.url,
        "[server]\nheader_read_timeout = \"300ms\"\n",
    ))
    .await;
    (upstream, fg)
}

/// Asserts the server closes `stream` well within 2 s (the timeout is 300 ms).
async fn assert_closed_soon(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncReadExt;
    let started = std::time::Instant::now();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the connection was still open after 5 s");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "closed only after {:?}",
        started.elapsed()
    );
}
