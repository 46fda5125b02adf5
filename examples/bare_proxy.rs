//! The floor under foldgate's forward path: a reverse proxy on the same
//! foundations (tokio's multi-thread runtime, hyper-util's auto server and
//! legacy pooled client) doing nothing but forwarding. `bench/passthrough.sh`
//! runs it as its `hyper-bare` row, so the cost of the stack and the cost
//! of foldgate's own work are told apart in one run.
//!
//!   cargo run --release --example bare_proxy -- 127.0.0.1:18085 127.0.0.1:18081

#![allow(clippy::expect_used, reason = "a bench tool: a bad argument ends it")]

use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use std::convert::Infallible;

/// `BARE_PER_CORE=1`: one single-threaded runtime per core, each with its
/// own `SO_REUSEPORT` listener and connection pool (no task ever changes
/// thread); otherwise one multi-thread runtime, as foldgate runs.
fn main() {
    let mut args = std::env::args().skip(1);
    let listen: std::net::SocketAddr = args
        .next()
        .and_then(|a| a.parse().ok())
        .expect("usage: bare_proxy LISTEN UPSTREAM");
    let upstream = args.next().expect("usage: bare_proxy LISTEN UPSTREAM");
    if std::env::var_os("BARE_PER_CORE").is_none() {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        runtime.block_on(serve(listen, upstream));
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let threads: Vec<_> = (0..cores)
        .map(|_| {
            let upstream = upstream.clone();
            std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime")
                    .block_on(serve(listen, upstream));
            })
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
}

async fn serve(listen: std::net::SocketAddr, upstream: String) {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket.set_reuseport(true).expect("SO_REUSEPORT");
    socket.bind(listen).expect("listen address");
    let listener = socket.listen(1024).expect("listen");
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    let client: Client<HttpConnector, Incoming> = Client::builder(TokioExecutor::new()).build(http);
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (client, upstream, builder) = (client.clone(), upstream.clone(), builder.clone());
        let service = tower::service_fn(move |mut req: http::Request<Incoming>| {
            let client = client.clone();
            let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
            *req.uri_mut() = format!("http://{upstream}{path}")
                .parse()
                .expect("a URI from a valid path");
            async move {
                Ok::<_, Infallible>(match client.request(req).await {
                    Ok(response) => response.map(http_body_util::Either::Left),
                    Err(_) => http::Response::builder()
                        .status(502)
                        .body(http_body_util::Either::Right(http_body_util::Empty::new()))
                        .expect("a static response"),
                })
            }
        });
        tokio::spawn(async move {
            let _ = builder
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                .await;
        });
    }
}
