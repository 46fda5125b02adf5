//! The fold engine without the upstream call, for another gateway
//! (`POST /foldgate/v1/compress`, in [`crate::admin`]): a conversation
//! body is read, planned and folded exactly as the proxy path does it (the
//! same first look, decision, fold chain, pins, ledger, archive and
//! summarizer call), and the view is handed back instead of forwarded.
//! Nothing here runs on the proxy path.

use super::request::ConvRequest;
use crate::api::Route;
use crate::app::App;
use crate::error::ApiError;
use crate::state::TurnFold;
use bytes::Bytes;
use http::HeaderMap;
use std::sync::Arc;

/// What the engine made of one conversation body.
#[derive(Debug)]
pub struct Compressed {
    /// The body with the view in its conversation field (the request's
    /// bytes when the view is its messages unchanged).
    pub body: Bytes,
    /// How the view came about: none, a reused fold or a new one.
    pub fold: TurnFold,
    /// Estimated tokens of the body's messages (calibrated).
    pub tokens_in: u32,
    /// Estimated tokens of the view (calibrated).
    pub tokens_out: u32,
    /// Messages the view shows as stubs (older-turn compression).
    pub compressed: usize,
    /// Why a fold that was due was not made, when one was not.
    pub warning: Option<String>,
    /// The conversation id the state is kept under (the conversation
    /// header's value, or the fingerprint); `None` for an unkeyed body.
    pub conversation: Option<String>,
}

/// Runs the engine on `bytes`, a body of `route`'s API posted to `path`,
/// with the caller's `headers` (its credential names the tenant; the
/// conversation header, when set, the conversation). The turn is recorded
/// for the dashboard and counted in the tokens saved, as a proxied one is.
pub async fn compress(
    app: &Arc<App>,
    route: Route,
    path: String,
    headers: &HeaderMap,
    bytes: Bytes,
) -> Result<Compressed, ApiError> {
    let tail: Arc<str> = Arc::from(route.tail.as_str());
    let mut request =
        ConvRequest::read(app, route.api, headers, (path, tail), route.model, bytes).await?;
    let key = request.key().cloned();
    let mut prepared = request.prepare_without_recall(app, headers).await?;
    let body = request.body(&mut prepared)?;
    app.metrics
        .observe_forwarded(prepared.tokens_in, prepared.tokens_out);
    if let Some(key) = &key {
        let tokens = (prepared.tokens_in, prepared.tokens_out);
        app.turns
            .record(key.clone(), tokens, prepared.fold, &prepared.view_ids);
    }
    Ok(Compressed {
        body,
        fold: prepared.fold,
        tokens_in: prepared.tokens_in,
        tokens_out: prepared.tokens_out,
        compressed: prepared.compressed,
        warning: prepared.warning,
        conversation: key.map(|k| k.conversation),
    })
}
