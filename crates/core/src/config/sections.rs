//! The configuration sections. Every field's doc comment is the user's
//! reference for that key; `config.toml` at the repository root mirrors it.

use super::compress::CompressOverrides;
use super::policy::PolicyOverrides;
use super::secret::Secret;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// `[server]`: the listener and what guards it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// PEM certificate chain; with `tls_key`, foldgate terminates TLS.
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// Largest request body accepted, in bytes (413 above it).
    pub max_body_bytes: usize,
    /// Time allowed to connect to the upstream.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Time allowed for the upstream's response headers (504 after it).
    /// A streamed body may take longer once it has started.
    #[serde(with = "humantime_serde")]
    pub upstream_timeout: Duration,
    /// On SIGINT/SIGTERM, how long in-flight requests and streams may run on.
    #[serde(with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// When non-empty, a request must carry one of these keys as
    /// `Authorization: Bearer KEY` (or `x-api-key`), else 401.
    pub api_keys: Vec<Secret>,
    /// Name of an environment variable holding more keys, comma-separated.
    pub api_keys_env: Option<String>,
    /// When set, admin endpoints other than `health` need
    /// `Authorization: Bearer TOKEN`.
    pub admin_token: Option<Secret>,
    /// Requests handled at once, streams included until they end; beyond
    /// it, 503 with `Retry-After` (load shedding). 0: no limit.
    pub max_concurrent_requests: usize,
    /// Time a client has to send a request's headers before its
    /// connection is closed (slow clients, slowloris). It also bounds how
    /// long an idle keep-alive connection waits for its next request.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// Threads that serve requests. 0: one per core (or, when set, the
    /// `TOKIO_WORKER_THREADS` environment variable's count). Fewer than the
    /// cores leaves a core to processes sharing the machine (a local model
    /// server, a load generator): on two busy cores, two workers waiting
    /// behind each other for a core make most of foldgate's p99 (see
    /// `docs/benchmarks.md`, "Passthrough overhead").
    pub worker_threads: usize,
    /// Pin each of the runtime's threads to a core of its own, in turn
    /// (workers first; Linux only). With as many workers as cores, two
    /// workers then never wait for the same core while the others are
    /// busy: for a machine whose few cores foldgate shares with a local
    /// model server or a load generator, not for one where other
    /// processes may hold a pinned worker's core for long.
    pub pin_workers: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            tls_cert: None,
            tls_key: None,
            max_body_bytes: 32 * 1024 * 1024,
            connect_timeout: Duration::from_secs(10),
            upstream_timeout: Duration::from_secs(600),
            shutdown_timeout: Duration::from_secs(30),
            api_keys: Vec::new(),
            api_keys_env: None,
            admin_token: None,
            max_concurrent_requests: 1024,
            header_read_timeout: Duration::from_secs(30),
            worker_threads: 0,
            pin_workers: false,
        }
    }
}

/// `[providers.NAME]`: one upstream API.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// Base URL including the version prefix, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Model-name globs (`*`, `?`) routed here. The provider whose patterns
    /// include `*` takes every model no other provider names; without one,
    /// the first provider in name order does.
    #[serde(default = "all_models")]
    pub models: Vec<String>,
    /// Environment variable with this provider's API key. When the
    /// variable is set, its key replaces the client's credential
    /// (`Authorization: Bearer`, or `x-api-key` for `api = "anthropic"`);
    /// when it is unset or empty, the client's credential is forwarded
    /// (with a warning at start-up).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The provider's own API: `openai` (the default; also OpenRouter,
    /// vLLM, Ollama, llama.cpp) takes its key as `Authorization: Bearer`
    /// and foldgate's summarizer calls as chat completions; `anthropic`
    /// takes `x-api-key` and summarizer calls on `/v1/messages`; `gemini`
    /// takes `x-goog-api-key` and summarizer calls on
    /// `/v1beta/models/{model}:generateContent`. Client
    /// requests on every route are forwarded to any provider alike.
    #[serde(default)]
    pub api: ProviderApi,
    /// Extra PEM CA certificate(s) to trust for this upstream.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Policy overrides for this provider's models.
    #[serde(default)]
    pub policy: PolicyOverrides,
    /// Compression overrides for this provider's models.
    #[serde(default)]
    pub compress: CompressOverrides,
    /// `[providers.NAME.aws]`: an AWS provider's region and credentials
    /// (Amazon Bedrock, `api = "bedrock"`): each request to it is signed
    /// with SigV4 once its body is final.
    #[serde(default)]
    pub aws: Option<AwsConfig>,
}

/// `[providers.NAME.aws]`: where an AWS provider's SigV4 credentials come
/// from. The keys are read from the environment once, at start-up.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AwsConfig {
    /// The region signed for (`us-east-1`). Unset: `AWS_REGION`, else the
    /// region in `base_url`'s host (`bedrock-runtime.REGION.amazonaws.com`).
    #[serde(default)]
    pub region: Option<String>,
    /// Environment variable with the access key id.
    #[serde(default = "access_key_id_env")]
    pub access_key_id_env: String,
    /// Environment variable with the secret access key.
    #[serde(default = "secret_access_key_env")]
    pub secret_access_key_env: String,
    /// Environment variable with the session token of temporary
    /// credentials (unset or empty: none).
    #[serde(default = "session_token_env")]
    pub session_token_env: String,
}

impl Default for AwsConfig {
    fn default() -> Self {
        Self {
            region: None,
            access_key_id_env: access_key_id_env(),
            secret_access_key_env: secret_access_key_env(),
            session_token_env: session_token_env(),
        }
    }
}

fn access_key_id_env() -> String {
    "AWS_ACCESS_KEY_ID".to_string()
}

fn secret_access_key_env() -> String {
    "AWS_SECRET_ACCESS_KEY".to_string()
}

fn session_token_env() -> String {
    "AWS_SESSION_TOKEN".to_string()
}

/// The API a provider speaks, by the name its folder in `crates/wire/src/api`
/// registers (`openai`, `anthropic`, `gemini`): the header its key goes in
/// and the shape of summarizer calls to it. The names are checked against
/// the registry by `check-config` and at start-up, so a new API adds its
/// name without touching the configuration's types.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct ProviderApi(pub String);

impl Default for ProviderApi {
    fn default() -> Self {
        Self("openai".to_string())
    }
}

fn all_models() -> Vec<String> {
    vec!["*".to_string()]
}

/// `[models."GLOB"]`: a model's window and policy overrides. The most
/// specific matching pattern (fewest wildcards, then longest) wins.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(try_from = "BTreeMap<String, serde_json::Value>")]
pub struct ModelConfig {
    /// Context window in tokens.
    pub context_window: Option<u32>,
    /// Largest completion the model produces, in tokens.
    pub max_output_tokens: Option<u32>,
    /// Multiplies o200k_base counts for models with another tokenizer.
    pub token_scale: Option<f64>,
    /// `false`: the model does not call tools (many small local models),
    /// so `archive.recall = "auto"` injects recalled excerpts instead of
    /// offering the `foldgate_recall` tool. Unset: it does.
    pub tools: Option<bool>,
    /// Policy knobs, written inline beside the keys above.
    #[serde(flatten)]
    pub policy: PolicyOverrides,
    /// `[models."GLOB".compress]`: compression overrides for the model.
    #[serde(default, skip_serializing_if = "is_default")]
    pub compress: CompressOverrides,
}

fn is_default(c: &CompressOverrides) -> bool {
    *c == CompressOverrides::default()
}

impl TryFrom<BTreeMap<String, serde_json::Value>> for ModelConfig {
    type Error = String;

    fn try_from(mut map: BTreeMap<String, serde_json::Value>) -> Result<Self, String> {
        fn take<T: serde::de::DeserializeOwned>(
            map: &mut BTreeMap<String, serde_json::Value>,
            key: &str,
        ) -> Result<Option<T>, String> {
            map.remove(key)
                .map(|v| serde_json::from_value(v).map_err(|e| format!("{key}: {e}")))
                .transpose()
        }
        let context_window = take(&mut map, "context_window")?;
        let max_output_tokens = take(&mut map, "max_output_tokens")?;
        let token_scale = take(&mut map, "token_scale")?;
        let tools = take(&mut map, "tools")?;
        let compress = take(&mut map, "compress")?.unwrap_or_default();
        let rest = serde_json::Value::Object(map.into_iter().collect());
        let policy = serde_json::from_value(rest).map_err(|e| e.to_string())?;
        Ok(Self {
            context_window,
            max_output_tokens,
            token_scale,
            tools,
            policy,
            compress,
        })
    }
}

/// What to do when the summarizer cannot produce a summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Forward the request unfolded, log and count it.
    Passthrough,
    /// Answer 503 with an error saying why.
    Error,
}

/// `[summarizer]`: the LLM call that writes summaries.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SummarizerConfig {
    /// Provider to call; unset means the request's own provider.
    pub provider: Option<String>,
    /// Model to call; unset means the request's own model.
    pub model: Option<String>,
    /// Models tried in order when `model` fails.
    pub fallback_models: Vec<String>,
    /// Upper bound on the summary's length (narrative and ledger), in
    /// tokens; `policy.summary_ratio` of the window bounds it too.
    pub max_summary_tokens: u32,
    /// Time allowed for one summarizer call.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Extra attempts per model after a transport error, timeout, 429, 5xx
    /// or output that is not a valid summary.
    pub retries: u32,
    /// First backoff between attempts that repeat a request; it doubles
    /// each time, plus a random jitter of up to the delay itself.
    #[serde(with = "humantime_serde")]
    pub backoff: Duration,
    /// `passthrough` or `error`.
    pub on_failure: OnFailure,
    /// In background mode, how long a request that no longer fits waits
    /// for a fold already running before folding inline itself.
    #[serde(with = "humantime_serde")]
    pub emergency_wait: Duration,
    /// Summarizer calls in flight at once per provider; 0 means 1 for a
    /// provider on a loopback address (a local server often serves one
    /// request at a time, and summaries must not queue in front of users'
    /// turns) and 4 for any other.
    pub max_concurrent: usize,
    /// After a failed fold, the conversation's next non-emergency fold
    /// waits this long; the wait doubles with each failure (up to 32×) and
    /// a successful fold resets it.
    #[serde(with = "humantime_serde")]
    pub failure_backoff: Duration,
}

impl Default for SummarizerConfig {
    fn default() -> Self {
        Self {
            provider: None,
            model: None,
            fallback_models: Vec::new(),
            max_summary_tokens: 2000,
            timeout: Duration::from_secs(120),
            retries: 2,
            backoff: Duration::from_millis(500),
            on_failure: OnFailure::Passthrough,
            emergency_wait: Duration::from_secs(30),
            max_concurrent: 0,
            failure_backoff: Duration::from_secs(30),
        }
    }
}

/// How to key a conversation that carries no conversation header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fallback {
    /// A hash of the pinned head and the first user message.
    Fingerprint,
    /// No key: fold without caching.
    None,
}

/// `[conversation]`: how requests are grouped into conversations.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConversationConfig {
    /// Request header that names the conversation.
    #[serde(with = "header_name")]
    pub header: http::HeaderName,
    /// Key used when the header is absent.
    pub fallback: Fallback,
}

impl Default for ConversationConfig {
    fn default() -> Self {
        Self {
            header: http::HeaderName::from_static("x-conversation-id"),
            fallback: Fallback::Fingerprint,
        }
    }
}

/// A header name in the config: read once, so a request's lookup does not
/// parse it again.
mod header_name {
    use http::HeaderName;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(name: &HeaderName, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(name.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<HeaderName, D::Error> {
        let name = String::deserialize(d)?;
        HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| serde::de::Error::custom(format!("{name:?} is not a header name")))
    }
}

/// Where the summary goes in the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Its own system message right after the pinned head.
    #[default]
    System,
    /// Appended to the last pinned message under a heading.
    Merge,
    /// A user-role message (for templates that allow one system message).
    User,
}

/// `[summary]`: how the summary is shown to the model.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SummaryConfig {
    /// `system`, `merge` or `user`.
    pub placement: Placement,
}

/// `[tokens]`: the estimator's settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TokensConfig {
    /// Output reserve when a request sets neither `max_completion_tokens`
    /// nor `max_tokens`.
    pub default_output_reserve: u32,
    /// Window assumed for a model nothing else names (config, discovery,
    /// a learned window, the built-in table): an opt-in for local servers
    /// that state none. Unset (the default), such a model's requests go
    /// upstream unfolded until its first context-length error names the
    /// window (a warning is logged once per model either way).
    pub default_context_window: Option<u32>,
    /// Tokens counted for an image part with `detail = "low"`.
    pub image_tokens_low: u32,
    /// Tokens counted for an image part with `detail = "high"` or `"auto"`.
    pub image_tokens_high: u32,
    /// Memory bound of the per-message count cache, in bytes.
    pub cache_bytes: u64,
    /// A count not asked for within this long leaves the cache (zero: only
    /// the byte bound), so the cache holds the recent conversations'
    /// counts rather than filling to `cache_bytes` over hours.
    #[serde(with = "humantime_serde")]
    pub cache_idle: Duration,
    /// Learn each model's actual/estimated ratio from upstream `usage`.
    pub calibrate: bool,
    /// Ask providers' `/models` for context lengths of unnamed models.
    pub discover: bool,
}

/// The output reserve of a request that sets no `max_tokens`:
/// `tokens.default_output_reserve`, but at most a quarter of the window, so
/// a default alone never claims most of a small window.
pub fn default_reserve(configured: u32, context_window: u32) -> u32 {
    configured.min(context_window / 4)
}

impl Default for TokensConfig {
    fn default() -> Self {
        Self {
            default_output_reserve: 4096,
            default_context_window: None,
            image_tokens_low: 85,
            image_tokens_high: 765,
            cache_bytes: 64 * 1024 * 1024,
            cache_idle: Duration::from_secs(600),
            calibrate: true,
            discover: false,
        }
    }
}

/// `[log]`: how foldgate writes its log (to stderr). `FOLDGATE_LOG` sets
/// the filter (`info`, `foldgate=debug`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `"text"`: one human-readable line per event (colour only on a
    /// terminal); `"json"`: one JSON object per line, for log collectors.
    pub format: LogFormat,
    /// How long info lines (the access lines among them) may wait in a
    /// buffer before they are written; warnings and errors go out at once,
    /// with every line before them. `0s`: every line at once.
    #[serde(with = "humantime_serde")]
    pub flush_interval: Duration,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::default(),
            flush_interval: Duration::from_millis(100),
        }
    }
}

/// `log.format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, the
    /// event's fields and `span` (the request's id, method and path).
    Json,
}

/// `[state]`: where fold states live. An in-process cache (bounded by
/// `cache_bytes`) always sits in front of the backend.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// `"sqlite"` (durable across restarts, keeps every fold for audit),
    /// `"redis"` (shared by replicas) or `"memory"` (lost on restart).
    pub backend: StateBackend,
    /// SQLite database file; it and its parent directory are created on
    /// first start.
    pub path: PathBuf,
    /// Redis URL for `backend = "redis"` (a password in it is never
    /// printed): one server, `redis://[user:password@]host:6379/0`; a Redis
    /// Cluster by any of its nodes,
    /// `redis+cluster://[user:password@]h1:p1,h2:p2`; or the primary of a
    /// Sentinel service, `redis+sentinel://[user:password@]s1:p1,s2:p2/service[/db]`
    /// (the credentials are the data nodes', the sentinels are asked
    /// without). See docs/architecture.md, "Scaling out". Printed with
    /// its password masked, hosts shown.
    #[serde(serialize_with = "super::secret::serialize_masked_url")]
    pub url: Option<Secret>,
    /// A conversation idle this long is forgotten (its next long request
    /// folds again from scratch; no message is lost).
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    /// Memory bound of the in-process state cache, in bytes.
    pub cache_bytes: u64,
    /// Memory bound of the dashboard's turn recorder, in bytes: about
    /// 2.4 KB a conversation (its last 120 turns); the least recently used
    /// conversations go first.
    pub turns_bytes: u64,
    /// Memory bound of the cache of rendered compression stubs, in bytes
    /// (its text and 288 bytes a stub); a stub unused for 2 minutes leaves it.
    pub stubs_bytes: u64,
    /// Redis: the longest a replica serves a cached state without asking
    /// Redis whether another replica superseded it, while it cannot be told
    /// (its subscription to state changes is down). While subscribed, a
    /// replica serves its cached state until told it changed, asking again
    /// once a quarter of `ttl` to renew the state's expiry.
    #[serde(with = "humantime_serde")]
    pub refresh: Duration,
    /// Redis: expiry of a conversation's cross-replica fold lock; the holder
    /// renews it every third of this while its fold runs, so it only
    /// matters when a replica dies mid-fold.
    #[serde(with = "humantime_serde")]
    pub lock_ttl: Duration,
    /// Redis: how long a request waits for another replica's fold before
    /// folding on its own (with a warning).
    #[serde(with = "humantime_serde")]
    pub lock_wait: Duration,
    /// Redis: bound on every Redis command; a slower or unreachable Redis
    /// degrades to this replica's memory until it answers again.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
}

/// Which store holds fold states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StateBackend {
    /// Embedded SQLite file at `state.path`.
    Sqlite,
    /// Redis at `state.url`, shared by replicas.
    Redis,
    /// This process's memory only.
    Memory,
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            backend: StateBackend::Sqlite,
            path: PathBuf::from("./foldgate.db"),
            url: None,
            ttl: Duration::from_secs(24 * 3600),
            cache_bytes: 256 * 1024 * 1024,
            turns_bytes: 4 * 1024 * 1024,
            stubs_bytes: 16 * 1024 * 1024,
            refresh: Duration::from_secs(2),
            lock_ttl: Duration::from_secs(30),
            lock_wait: Duration::from_secs(60),
            timeout: Duration::from_millis(500),
        }
    }
}

impl StateConfig {
    /// Checks the section; errors name the offending key.
    pub fn validate(&self) -> Result<(), String> {
        if self.ttl.is_zero() {
            return Err("state.ttl must be above 0".into());
        }
        match self.backend {
            StateBackend::Sqlite if self.path.as_os_str().is_empty() => {
                Err("state.path must name a file when state.backend = \"sqlite\"".into())
            }
            StateBackend::Redis => {
                let url = self.url.as_ref().map(Secret::expose).unwrap_or_default();
                if url.is_empty() {
                    return Err("state.url is required when state.backend = \"redis\"".into());
                }
                super::RedisTarget::parse(url).map_err(|e| format!("state.url {e}"))?;
                if self.lock_ttl < Duration::from_millis(100) {
                    return Err("state.lock_ttl must be at least 100ms".into());
                }
                if self.timeout.is_zero() {
                    return Err("state.timeout must be above 0".into());
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
