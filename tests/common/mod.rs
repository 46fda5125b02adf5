//! Test harness: a real foldgate server on 127.0.0.1:0, a mock upstream
//! that is itself a real HTTP server, and a small HTTP client.

pub mod agents;
pub mod bedrock;
pub mod convo;
pub mod gemini;
pub mod llm;
pub mod mock;
pub mod ollama;
pub mod redis;
pub mod tooloop;

use bytes::Bytes;
use foldgate::body::{self, Body};
use foldgate::config::Config;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A foldgate server running in this process.
pub struct Foldgate {
    pub addr: SocketAddr,
    pub url: String,
    shutdown: Option<oneshot::Sender<()>>,
    pub task: Option<JoinHandle<()>>,
}

impl Foldgate {
    /// Starts foldgate with a TOML configuration. Without a `[state]`
    /// section, states stay in memory (so tests never share a database).
    pub async fn start(toml: &str) -> Self {
        let mut config = Config::from_toml(toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
        if !toml.contains("[state]") {
            config.state.backend = foldgate::config::StateBackend::Memory;
        }
        Self::start_config(config).await
    }

    /// Starts foldgate with a parsed configuration.
    pub async fn start_config(config: Config) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let scheme = if config.server.tls_cert.is_some() {
            "https"
        } else {
            "http"
        };
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            foldgate::server::serve(listener, Arc::new(config), async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        Self {
            addr,
            url: format!("{scheme}://{addr}"),
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    /// Asks the server to shut down gracefully (returns at once).
    pub fn begin_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl Foldgate {
    /// The `/foldgate/metrics` text.
    pub async fn metrics(&self) -> String {
        let reply = send(
            Method::GET,
            &format!("{}/foldgate/metrics", self.url),
            &[],
            "",
        )
        .await;
        String::from_utf8_lossy(&reply.body).into_owned()
    }
}

impl Drop for Foldgate {
    fn drop(&mut self) {
        self.begin_shutdown();
    }
}

/// Runs `foldgate prune --older-than AGE` with `toml` as its configuration
/// file (written into `dir`); asserts it succeeds and returns its output.
pub fn prune(dir: &std::path::Path, toml: &str, older_than: &str) -> String {
    let file = dir.join("foldgate.toml");
    std::fs::write(&file, toml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_foldgate"))
        .args(["prune", "--older-than", older_than, "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits (up to 5 s) until something accepts connections on `port`.
pub async fn wait_listening(port: u16) {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("nothing listens on 127.0.0.1:{port}");
}

/// A foldgate config pointing its one provider at `upstream`.
pub fn config_for(upstream: &str, extra: &str) -> String {
    format!("[providers.mock]\nbase_url = \"{upstream}/v1\"\nmodels = [\"*\"]\n{extra}")
}

/// A plain-HTTP client.
pub fn client() -> Client<HttpConnector, Body> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// A finished response.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    /// A response header's value, or "" when it is absent.
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    }

    /// `x-foldgate-tokens-out`: estimated tokens of the forwarded prompt.
    pub fn tokens_out(&self) -> u32 {
        self.header("x-foldgate-tokens-out").parse().unwrap()
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// Asserts a 200, showing the body when it is not.
    pub fn assert_ok(&self) {
        assert_eq!(self.status, 200, "{}", String::from_utf8_lossy(&self.body));
    }

    /// Asserts this is foldgate's error envelope with `status` and `code`.
    pub fn assert_envelope(&self, status: u16, code: &str) {
        assert_eq!(
            self.status.as_u16(),
            status,
            "body: {}",
            String::from_utf8_lossy(&self.body)
        );
        let v = self.json();
        assert_eq!(v["error"]["code"], code, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{v}"
        );
        assert!(v["error"]["type"].is_string(), "{v}");
        assert!(v["error"].get("param").is_some(), "{v}");
    }
}

/// Sends a request and reads the whole response.
pub async fn send(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Reply {
    let mut req = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client()
        .request(req.body(body::full(body.into())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body,
    }
}

/// POSTs JSON.
pub async fn post_json(url: &str, headers: &[(&str, &str)], json: &serde_json::Value) -> Reply {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    send(Method::POST, url, &all, json.to_string()).await
}

/// The value of one metric line of Prometheus text (`name` may carry
/// labels); every counter is always rendered, so a missing one is a bug.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

/// `foldgate_folds_total`, every reason summed: the folds made (restubs
/// are counted apart, in `foldgate_restubs_total`).
pub fn folds_counted(metrics: &str) -> f64 {
    foldgate::metrics::REASONS
        .iter()
        .map(|r| metric(metrics, &format!("foldgate_folds_total{{reason=\"{r}\"}}")))
        .sum()
}

/// Runs a client script from tests/e2e against `base`; returns its log.
pub async fn drive(script: &str, base: &str) -> Vec<serde_json::Value> {
    serde_json::from_value(drive_value(script, base).await).unwrap()
}

/// [`drive`] for a script whose log is any JSON value.
pub async fn drive_value(script: &str, base: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("log.json");
    let script = format!("{}/tests/e2e/{script}", env!("CARGO_MANIFEST_DIR"));
    let output = tokio::process::Command::new("python3")
        .arg(&script)
        .arg(base)
        .arg(&out)
        .output()
        .await
        .expect("python3 must be installed (.ci/run installs the client packages)");
    assert!(
        output.status.success(),
        "{script} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
}

/// Providers for a mock upstream that answers every API on one address:
/// `mock` (OpenAI's: chat completions and Responses) and `mock-anthropic`
/// (Anthropic Messages), since a request is never sent to a provider of
/// another API.
pub fn providers(upstream: &str) -> String {
    format!(
        "[providers.mock]\nbase_url = \"{upstream}/v1\"\n\
         [providers.mock-anthropic]\nbase_url = \"{upstream}/v1\"\napi = \"anthropic\"\n"
    )
}

/// `foldgate serve` (the real binary) on a minimal config — memory state,
/// one provider nobody listens on — whose `[server]` section adds
/// `server`; `adjust` sets the command's environment and output before it
/// starts. Returns once `/foldgate/health` answers 200 (its accept loop
/// runs, so a SIGTERM is handled rather than fatal). Stopped on drop.
pub async fn serve_minimal(
    server: &str,
    adjust: impl FnOnce(&mut tokio::process::Command),
) -> Minimal {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("minimal.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\n{server}\n\
             [providers.local]\nbase_url = \"http://127.0.0.1:9/v1\"\n\
             [state]\nbackend = \"memory\"\n"
        ),
    )
    .unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_foldgate"));
    command
        .args(["serve", "--config"])
        .arg(&path)
        .env_remove("TOKIO_WORKER_THREADS")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    adjust(&mut command);
    let child = command.spawn().unwrap();
    wait_listening(port).await;
    let health = format!("http://127.0.0.1:{port}/foldgate/health");
    let reply = send(Method::GET, &health, &[], "").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    Minimal { child, _dir: dir }
}

/// Stops a running `foldgate serve` with SIGTERM (it drains and exits,
/// writing out its buffered log) and returns what it wrote to its piped
/// standard error.
pub async fn terminate_and_read_log(child: &mut tokio::process::Child) -> String {
    use tokio::io::AsyncReadExt;
    let pid = child.id().unwrap().to_string();
    let term = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(term.success());
    let mut log = String::new();
    child
        .stderr
        .take()
        .expect("standard error piped")
        .read_to_string(&mut log)
        .await
        .unwrap();
    log
}

/// A binary [`serve_minimal`] started, and its config's directory.
pub struct Minimal {
    /// The running `foldgate serve`.
    pub child: tokio::process::Child,
    _dir: tempfile::TempDir,
}
