//! The application's shared parts, built once at start-up and shared by
//! every request: configuration, upstreams, token counting, fold states,
//! the summarizer, metrics and the background folds; and the errors that
//! stop it being built ([`StartupError`]). Everything that
//! handles requests sits above this module; the engines it holds sit below.

use crate::archive::Archive;
use crate::fold::compress::StubCache;

use crate::background::Background;
use crate::config::{Config, ConfigError};
use crate::metrics::Metrics;
use crate::state::{Store, StoreError, Turns};
use crate::summarize::Summarizer;
use crate::tokens::TokenCounter;
use crate::upstream::{UpstreamError, Upstreams};
use std::sync::Arc;

/// Everything a request needs, shared by all requests.
pub struct App {
    /// The loaded configuration.
    pub config: Arc<Config>,
    /// Upstream providers.
    pub upstreams: Upstreams,
    /// Token estimation and model windows.
    pub tokens: Arc<TokenCounter>,
    /// Fold states.
    pub store: Arc<dyn Store>,
    /// The messages folds removed from the view.
    pub archive: Archive,
    /// The summarizer calls.
    pub summarizer: Summarizer,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Folds running off the request path.
    pub background: Background,
    /// Recent turns per conversation, for the dashboard.
    pub turns: Turns,
    /// Compression stubs already rendered.
    pub stubs: StubCache,
    /// Injected recall blocks kept at their places.
    pub(crate) injected: crate::pipeline::Stickies,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("upstreams", &self.upstreams)
            .field("store", &self.store)
            .field("background", &self.background)
            .finish_non_exhaustive()
    }
}

impl App {
    /// Builds the shared state from a validated configuration.
    pub fn new(config: Arc<Config>) -> Result<Self, StartupError> {
        let metrics = Arc::new(Metrics::with_routes(crate::api::names()));
        Ok(Self {
            upstreams: Upstreams::new(config.clone()).map_err(StartupError::Upstream)?,
            tokens: Arc::new(TokenCounter::new(&config)),
            store: crate::state::open(&config.state).map_err(StartupError::State)?,
            archive: Archive::open(&config, metrics.archive_counters())
                .map_err(StartupError::State)?,
            summarizer: Summarizer::new(config.summarizer.clone()),
            metrics,
            background: Background::default(),
            turns: Turns::new(config.state.turns_bytes, config.state.ttl),
            stubs: StubCache::new(config.state.stubs_bytes, crate::fold::compress::STUB_IDLE),
            injected: crate::pipeline::Stickies::default(),
            config,
        })
    }

    /// Takes `model`'s window from an upstream's context-length error: used
    /// from now on and kept with the fold states, so a restart knows it.
    pub async fn learn_window(&self, model: &str, window: u32) {
        if window == 0 {
            return;
        }
        let known = self.tokens.limits_quiet(model);
        if known.source != crate::tokens::LimitSource::Config {
            tracing::info!(
                model,
                context_window = window,
                "context window learned from the upstream's context-length error"
            );
        }
        self.tokens
            .record_window(model, window, crate::tokens::LimitSource::Learned, "");
        self.store.save_window(model, window).await;
    }

    /// Windows learned before a restart, read back from the state store.
    pub async fn load_learned_windows(&self) {
        for (model, window) in self.store.windows().await {
            self.tokens
                .record_window(&model, window, crate::tokens::LimitSource::Learned, "");
        }
    }
}

/// Errors that stop foldgate from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The configuration could not be loaded or is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    /// The TLS certificate or key could not be used.
    #[error("TLS: {0}")]
    Tls(String),
    /// Upstream clients could not be built.
    #[error("upstream: {0}")]
    Upstream(#[from] UpstreamError),
    /// The state store or the archive could not be opened.
    #[error("state: {0}")]
    State(#[from] StoreError),
}
