//! The application's shared parts, built once at start-up and shared by
//! every request: configuration, upstreams, token counting, fold states,
//! the summarizer, metrics and the background folds. Everything that
//! handles requests sits above this module; the engines it holds sit below.

use crate::background::Background;
use crate::body;
use crate::config::Config;
use crate::error::StartupError;
use crate::metrics::Metrics;
use crate::state::{Store, Turns};
use crate::summarize::Summarizer;
use crate::tokens::TokenCounter;
use crate::upstream::Upstreams;
use http::Request;
use http_body_util::BodyExt;
use std::sync::Arc;
use std::time::Duration;

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
    /// The summarizer calls.
    pub summarizer: Summarizer,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Folds running off the request path.
    pub background: Background,
    /// Recent turns per conversation, for the dashboard.
    pub turns: Turns,
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
        Ok(Self {
            upstreams: Upstreams::new(config.clone()).map_err(StartupError::Upstream)?,
            tokens: Arc::new(TokenCounter::new(&config)),
            store: crate::state::open(&config.state).map_err(StartupError::State)?,
            summarizer: Summarizer::new(config.summarizer.clone()),
            metrics: Arc::new(Metrics::default()),
            background: Background::default(),
            turns: Turns::new(config.state.ttl),
            config,
        })
    }

    /// With `tokens.discover`, asks every provider's `/models` for context
    /// windows of models the configuration does not name (OpenRouter's
    /// `context_length`, vLLM's `max_model_len`). Failures only log.
    pub async fn discover_windows(&self) {
        for name in self.config.providers.keys() {
            let provider = self.upstreams.by_name(name);
            let Ok(req) = Request::get("/v1/models").body(body::empty()) else {
                continue;
            };
            let listing = match provider.send(req, Duration::from_secs(10), false).await {
                Ok(resp) if resp.status().is_success() => {
                    resp.into_body().collect().await.map(|c| c.to_bytes())
                }
                Ok(resp) => {
                    tracing::info!(provider = %name, status = %resp.status(), "model discovery: no listing");
                    continue;
                }
                Err(e) => {
                    tracing::info!(provider = %name, error = %e, "model discovery failed");
                    continue;
                }
            };
            let Ok(bytes) = listing else { continue };
            let found = crate::tokens::parse_models_listing(&bytes);
            tracing::info!(provider = %name, models = found.len(), "model discovery: context windows read");
            for (model, window) in found {
                self.tokens.record_discovered(&model, window);
            }
        }
    }
}
