//! Start-up discovery of context windows (`tokens.discover`): asks each
//! provider what its models' windows are, in the shapes servers answer:
//! `GET /v1/models` (OpenRouter's `context_length`, vLLM's
//! `max_model_len`, …), LiteLLM's `GET /model/info`
//! (`model_info.max_input_tokens`), llama.cpp's `GET /props` (the context it runs
//! with, for the models it lists), Ollama's `GET /api/tags` +
//! `POST /api/show` per model, and for llama-cpp-python's server, which
//! states its window nowhere, a one-token probe ([`probe`]). What a server
//! does not answer is skipped; failures only log. Then [`report`] names
//! every model's window and where it came from.
//!
//! - `probe`: llama-cpp-python's window, from the error a too-long prompt gets.
//! - `report`: the start-up lines, and the WARN for local models without a window.

mod probe;
mod report;

use crate::app::App;
use crate::body::{self, Body};
use crate::tokens::{self, LimitSource};
use crate::upstream::Provider;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use std::collections::BTreeMap;
use std::time::Duration;

/// Time allowed for each discovery call.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read (an OpenRouter listing is a few hundred KB).
const MAX_BODY: usize = 16 << 20;
/// Most Ollama models asked about per provider.
const MAX_OLLAMA_MODELS: usize = 100;

/// At start-up: discovery when `tokens.discover` is on, then the report of
/// every model's window (learned windows are loaded before this runs).
pub async fn startup(app: &App) {
    let mut listed = BTreeMap::new();
    if app.config.tokens.discover {
        for name in app.config.providers.keys() {
            let provider = app.upstreams.by_name(name);
            let found = provider_windows(&provider).await;
            tracing::info!(provider = %name, models = found.windows.len(), "model discovery: context windows read");
            // In order: a later source (what the server runs with) overrides an earlier one.
            for (model, window, via) in found.windows {
                app.tokens
                    .record_window(&model, window, LimitSource::Discovered, via);
            }
            listed.insert(name.clone(), found.ids);
        }
    }
    report::log(app, &listed);
}

/// What one provider answered.
#[derive(Debug, Default)]
struct Found {
    /// `(model, window, via)`, least authoritative first.
    windows: Vec<(String, u32, &'static str)>,
    /// Every model id the provider listed, windows or not.
    ids: Vec<String>,
}

/// Windows from every source the provider answers, least authoritative first.
async fn provider_windows(provider: &Provider) -> Found {
    let listing = fetch(provider, Call::Api(Method::GET, "/v1/models", None)).await;
    let mut found = Found {
        windows: listing
            .as_deref()
            .map(tokens::parse_models_listing)
            .unwrap_or_default()
            .into_iter()
            .map(|(id, w)| (id, w, "GET /v1/models"))
            .collect(),
        ids: listing
            .as_deref()
            .map(tokens::parse_model_ids)
            .unwrap_or_default(),
    };
    // LiteLLM's proxy lists no windows in `/v1/models`; its model info does.
    let info = fetch(provider, Call::Api(Method::GET, "/v1/model/info", None)).await;
    let info = info
        .as_deref()
        .map(tokens::parse_litellm_model_info)
        .unwrap_or_default();
    let info = info.into_iter().map(|(id, w)| (id, w, "GET /model/info"));
    found.windows.extend(info);
    let props = fetch(provider, Call::Server(Method::GET, "/props", None)).await;
    if let Some(n_ctx) = props.as_deref().and_then(tokens::parse_llamacpp_props) {
        let ids = found.ids.iter().map(|id| (id.clone(), n_ctx, "GET /props"));
        found.windows.extend(ids);
    } else if found.ids.iter().any(|id| !has_window(&found, id)) {
        probe::llama_cpp_python(provider, &mut found).await;
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
                found
                    .windows
                    .push((short.to_owned(), window, "POST /api/show"));
            }
            found.windows.push((name, window, "POST /api/show"));
        }
    }
    found
}

fn has_window(found: &Found, id: &str) -> bool {
    found.windows.iter().any(|(model, ..)| model == id)
}

/// One discovery call.
enum Call<'a> {
    /// A path under `base_url` (as a client would send it), with a JSON body.
    Api(Method, &'a str, Option<String>),
    /// A path on the server beside `base_url`'s `/v1`, with a JSON body.
    Server(Method, &'a str, Option<String>),
}

/// The answer's body when the call succeeds with a 2xx.
async fn fetch(provider: &Provider, call: Call<'_>) -> Option<Bytes> {
    match exchange(provider, call, TIMEOUT).await {
        Some((status, body)) if status.is_success() => Some(body),
        _ => None,
    }
}

/// The answer's status and body (read up to [`MAX_BODY`]), whatever the
/// status; `None` when the call fails.
async fn exchange(
    provider: &Provider,
    call: Call<'_>,
    timeout: Duration,
) -> Option<(StatusCode, Bytes)> {
    let (method, path, json) = match &call {
        Call::Api(method, path, json) | Call::Server(method, path, json) => {
            (method.clone(), *path, json.clone())
        }
    };
    let body: Body = json.map_or_else(body::empty, body::full);
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .ok()?;
    let sent = match call {
        Call::Api(..) => provider.send(req, timeout, false).await,
        Call::Server(..) => provider.send_to_server(req, path, timeout).await,
    };
    match sent {
        Ok(resp) => {
            let status = resp.status();
            if !status.is_success() {
                tracing::debug!(provider = %provider.name, path, %status, "model discovery: not answered");
            }
            let collected = Limited::new(resp.into_body(), MAX_BODY).collect().await;
            collected.map(|c| (status, c.to_bytes())).ok()
        }
        Err(e) => {
            tracing::debug!(provider = %provider.name, path, error = %e, "model discovery failed");
            None
        }
    }
}
