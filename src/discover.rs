//! Start-up discovery of context windows (`tokens.discover`): asks each
//! provider what its models' windows are, in the shapes servers answer:
//! `GET /v1/models` (OpenRouter's `context_length`, vLLM's
//! `max_model_len`, …), llama.cpp's `GET /props` (the context it runs
//! with, for the models it lists) and Ollama's `GET /api/tags` +
//! `POST /api/show` per model. What a server does not answer is skipped;
//! failures only log.

use crate::app::App;
use crate::body::{self, Body};
use crate::tokens;
use crate::upstream::Provider;
use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Limited};
use std::time::Duration;

/// Time allowed for each discovery call.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read (an OpenRouter listing is a few hundred KB).
const MAX_BODY: usize = 16 << 20;
/// Most Ollama models asked about per provider.
const MAX_OLLAMA_MODELS: usize = 100;

/// Reads every provider's windows into the token counter.
pub async fn windows(app: &App) {
    for name in app.config.providers.keys() {
        let provider = app.upstreams.by_name(name);
        let found = provider_windows(&provider).await;
        tracing::info!(provider = %name, models = found.len(), "model discovery: context windows read");
        // In order: a later source (what the server runs with) overrides an earlier one.
        for (model, window) in found {
            app.tokens.record_discovered(&model, window);
        }
    }
}

/// `(model, window)` pairs from every source the provider answers, least
/// authoritative first.
async fn provider_windows(provider: &Provider) -> Vec<(String, u32)> {
    let listing = fetch(provider, Call::Api("/v1/models")).await;
    let mut found = listing
        .as_deref()
        .map(tokens::parse_models_listing)
        .unwrap_or_default();
    let props = fetch(provider, Call::Server(Method::GET, "/props", None)).await;
    if let Some(n_ctx) = props.as_deref().and_then(tokens::parse_llamacpp_props) {
        let ids = listing
            .as_deref()
            .map(tokens::parse_model_ids)
            .unwrap_or_default();
        found.extend(ids.into_iter().map(|id| (id, n_ctx)));
    }
    let tags = fetch(provider, Call::Server(Method::GET, "/api/tags", None)).await;
    let names = tags
        .as_deref()
        .map(tokens::parse_ollama_tags)
        .unwrap_or_default();
    for name in names.into_iter().take(MAX_OLLAMA_MODELS) {
        let ask = serde_json::json!({ "model": name }).to_string();
        let show = fetch(provider, Call::Server(Method::POST, "/api/show", Some(ask))).await;
        if let Some(window) = show.as_deref().and_then(tokens::parse_ollama_show) {
            // Clients may name `llama3.2:latest` as `llama3.2`.
            if let Some(short) = name.strip_suffix(":latest") {
                found.push((short.to_owned(), window));
            }
            found.push((name, window));
        }
    }
    found
}

/// One discovery call.
enum Call<'a> {
    /// A path under `base_url` (as a client would send it).
    Api(&'a str),
    /// A path on the server beside `base_url`'s `/v1`, with a JSON body.
    Server(Method, &'a str, Option<String>),
}

/// The answer's body when the call succeeds with a 2xx.
async fn fetch(provider: &Provider, call: Call<'_>) -> Option<Bytes> {
    let (method, path, json) = match &call {
        Call::Api(path) => (Method::GET, *path, None),
        Call::Server(method, path, json) => (method.clone(), *path, json.clone()),
    };
    let body: Body = json.map_or_else(body::empty, body::full);
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .ok()?;
    let sent = match call {
        Call::Api(_) => provider.send(req, TIMEOUT, false).await,
        Call::Server(..) => provider.send_to_server(req, path, TIMEOUT).await,
    };
    match sent {
        Ok(resp) if resp.status().is_success() => {
            let collected = Limited::new(resp.into_body(), MAX_BODY).collect().await;
            collected.map(|c| c.to_bytes()).ok()
        }
        Ok(resp) => {
            tracing::debug!(provider = %provider.name, path, status = %resp.status(), "model discovery: not answered");
            None
        }
        Err(e) => {
            tracing::debug!(provider = %provider.name, path, error = %e, "model discovery failed");
            None
        }
    }
}
