//! The listener: accepts TCP (optionally TLS) connections, serves HTTP/1.1
//! and HTTP/2 on each with the tower stack, and shuts down gracefully.

mod layers;
pub mod stack;
pub mod websocket;

pub use layers::{AccessLog, AuthLayer};

use crate::app::{App, StartupError};
use crate::config::Config;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

/// Serves on `listener` until `shutdown` resolves, then stops accepting and
/// lets in-flight requests and streams finish for up to
/// `server.shutdown_timeout`.
pub async fn serve(
    listener: TcpListener,
    config: Arc<Config>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartupError> {
    let tls = tls_acceptor(&config)?;
    let deadline = config.server.shutdown_timeout;
    let app = start(config).await?;
    let service = stack::build(app.clone());
    let builder = connection_builder(&app.config);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(service.clone().map_request(
            move |mut req: http::Request<hyper::body::Incoming>| {
                req.extensions_mut()
                    .insert(crate::pipeline::key::PeerAddr(peer));
                req
            },
        ));
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            let result = match tls {
                None => {
                    let conn =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    watcher.watch(conn.into_owned()).await
                }
                Some(acceptor) => match acceptor.accept(stream).await {
                    Ok(stream) => {
                        let conn =
                            builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                        watcher.watch(conn.into_owned()).await
                    }
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                },
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    drain(&app, graceful, deadline).await;
    Ok(())
}

/// HTTP/1.1 and HTTP/2 settings of every connection: slow clients' headers
/// must arrive within `server.header_read_timeout` (hyper needs a timer to
/// enforce it), HTTP/2 pings every 30 s.
fn connection_builder(config: &Config) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.server.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(std::time::Duration::from_secs(30)));
    builder
}

/// The app, started: its settings logged, the token tables and learned
/// windows loaded before the first accept (so the first request costs
/// what later ones do), window discovery spawned.
async fn start(config: Arc<Config>) -> Result<Arc<App>, StartupError> {
    tracing::info!(
        config = %config.source_name(),
        providers = %config.describe_providers(),
        summarizer = %config.describe_summarizer(),
        workers = tokio::runtime::Handle::current().metrics().num_workers(),
        "foldgate starting"
    );
    for warning in config
        .small_window_warnings()
        .into_iter()
        .chain(config.key_warnings())
    {
        tracing::warn!("{warning}");
    }
    let app = Arc::new(App::new(config)?);
    let loading = std::time::Instant::now();
    if let Err(e) = tokio::task::spawn_blocking(crate::tokens::Encoding::warm_up).await {
        tracing::warn!(error = %e, "loading the token tables failed; they load on first use");
    }
    tracing::debug!(
        ms = loading.elapsed().as_millis() as u64,
        "token tables loaded"
    );
    app.load_learned_windows().await;
    {
        let app = app.clone();
        tokio::spawn(async move { crate::discover::startup(&app).await });
    }
    Ok(app)
}

/// After the last accept: in-flight requests and streams, then background
/// folds, then their archive writes, each within what is left of
/// `deadline`.
async fn drain(app: &App, graceful: GracefulShutdown, deadline: std::time::Duration) {
    tracing::info!(
        ?deadline,
        "shutting down: waiting for in-flight requests and folds"
    );
    let started = std::time::Instant::now();
    if tokio::time::timeout(deadline, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("shutdown deadline passed; dropping the remaining connections");
    }
    // Background folds are not tied to a connection: give them the rest of the deadline.
    let left = deadline.saturating_sub(started.elapsed());
    if !app.background.wait_idle(left).await {
        tracing::warn!(
            running = app.background.running(),
            "shutdown deadline passed with folds still running"
        );
    }
    // The folds are done: their archive writes may still wait for Redis.
    app.archive
        .drain(deadline.saturating_sub(started.elapsed()))
        .await;
}

/// Binds `config.server.listen` and serves until SIGINT or SIGTERM.
pub async fn run(config: Config) -> Result<(), StartupError> {
    let addr = config.server.listen;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartupError::Bind { addr, source })?;
    let scheme = if config.server.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    tracing::info!(
        "foldgate listening on {scheme}://{}",
        listener.local_addr().unwrap_or(addr)
    );
    serve(listener, Arc::new(config), shutdown_signal()).await
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}

/// The TLS acceptor when `server.tls_cert` and `server.tls_key` are set.
fn tls_acceptor(config: &Config) -> Result<Option<TlsAcceptor>, StartupError> {
    let (Some(cert), Some(key)) = (&config.server.tls_cert, &config.server.tls_key) else {
        return Ok(None);
    };
    let certs = load_certs(cert)?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| StartupError::Tls(format!("server.tls_key {}: {e}", key.display())))?;
    let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| StartupError::Tls(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| StartupError::Tls(e.to_string()))?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Some(TlsAcceptor::from(Arc::new(tls))))
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, StartupError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect())
        .map_err(|e| StartupError::Tls(format!("server.tls_cert {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(StartupError::Tls(format!(
            "server.tls_cert {}: no certificate",
            path.display()
        )));
    }
    Ok(certs)
}
