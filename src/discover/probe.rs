//! llama-cpp-python's server (`python -m llama_cpp.server`) states its
//! window nowhere: it has no `/props` (404), its `/v1/models` entries carry
//! only `id`, `object`, `owned_by: "me"` and `permissions`, and its other
//! routes (`/extras/tokenize`, …) count tokens but not the context. What
//! does name it is the error a prompt too long for it gets, before any
//! evaluation:
//!
//! ```text
//! 400 {"error":{"message":"This model's maximum context length is 2048 tokens,
//!      however you requested 1100001 tokens (1100000 in your prompt; 1 for the
//!      completion). ...","type":"invalid_request_error","param":"messages",
//!      "code":"context_length_exceeded"}}
//! ```
//!
//! So once `GET /openapi.json` names the server (`🦙 llama.cpp Python API`),
//! each listed model gets one `POST /v1/completions` with `max_tokens: 1`
//! and a prompt longer than any window it could run with, and the error is
//! read by the same parser as the request path's context-length errors.
//! The server tokenizes the prompt and rejects it (about 1.5 s for a 135M
//! model on two cores); nothing is generated.

use super::{Call, Found, exchange, fetch, has_window};
use crate::api::context_error;
use crate::tokens;
use crate::upstream::Provider;
use http::{Method, StatusCode};
use std::time::Duration;

/// Words of the probe's prompt. `" a"` is one token in the vocabularies
/// local models use, so this is over a million tokens: more than any window
/// a local server runs with, so the prompt is always refused, never run.
pub(crate) const PROBE_WORDS: usize = 1_100_000;
/// Time allowed for one probe (a one-slot server may be busy with a turn).
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);
/// Most models probed per provider (each may load a model file).
const MAX_PROBES: usize = 8;

/// What `via` says for a window read this way.
pub(crate) const VIA: &str = "a one-token probe (llama-cpp-python)";

/// Whether the server is llama-cpp-python's, by its OpenAPI title.
async fn is_llama_cpp_python(provider: &Provider) -> bool {
    let openapi = fetch(provider, Call::Server(Method::GET, "/openapi.json", None)).await;
    openapi
        .as_deref()
        .and_then(tokens::parse_openapi_title)
        .is_some_and(|title| title.contains("llama.cpp Python"))
}

/// Probes each listed model without a window, when the server is
/// llama-cpp-python's; the windows found join `found`.
pub(super) async fn llama_cpp_python(provider: &Provider, found: &mut Found) {
    if !is_llama_cpp_python(provider).await {
        return;
    }
    let unknown: Vec<String> = found
        .ids
        .iter()
        .filter(|id| !has_window(found, id))
        .take(MAX_PROBES)
        .cloned()
        .collect();
    for model in unknown {
        match window(provider, &model).await {
            Some(window) => found.windows.push((model, window, VIA)),
            None => tracing::info!(
                provider = %provider.name,
                model,
                "llama-cpp-python: the probe did not name the context window"
            ),
        }
    }
}

/// The window `model`'s context-length error names, if it gets one.
async fn window(provider: &Provider, model: &str) -> Option<u32> {
    let body = serde_json::json!({
        "model": model,
        "prompt": " a".repeat(PROBE_WORDS),
        "max_tokens": 1,
    })
    .to_string();
    let call = Call::Api(Method::POST, "/v1/completions", Some(body));
    let (status, answer) = exchange(provider, call, PROBE_TIMEOUT).await?;
    if status != StatusCode::BAD_REQUEST {
        tracing::debug!(provider = %provider.name, model, %status, "llama-cpp-python probe: not refused");
        return None;
    }
    context_error::detect(&answer)?.window
}
