//! `POST /foldgate/v1/compress`: foldgate's fold engine for another
//! gateway (a LiteLLM callback, any HTTP callout): the
//! caller posts a conversation, foldgate answers with the view it would
//! have forwarded, made by the same engine, state, pins, ledger and
//! archive as the proxy path ([`crate::pipeline::compress`]).
//!
//! Request: a body of one of foldgate's APIs (chat completions by
//! default: `{messages, model, tools?, …}`) plus, optionally, `api` (the
//! API's name, `anthropic`, `responses`, `gemini`, `ollama`, or `openai`
//! for chat completions; without it the body's shape decides) and
//! `conversation` (the id its state is kept under; else the conversation
//! header, else the fingerprint). The caller's credential names the
//! tenant, as on the proxy path. Answer: the body's conversation field
//! (`messages`, Responses' `input`, Gemini's `contents`) as the view, any
//! other field the view changed (the summary in Anthropic's `system`),
//! `tokens_saved`, `tokens_in`, `tokens_out`, `fold`, `conversation`,
//! `api`, `compressed`, `recall: false` (no model round trip follows, so
//! nothing can answer a recall call: none is offered and no summary or
//! stub mentions one) and `warning` when a due fold was not made.
//! docs/embedding.md has the contract and the gateways' settings.
//! Headroom's `POST /v1/compress`, as LiteLLM's guardrail calls it, is
//! [`headroom`].

pub mod headroom;

use crate::app::App;
use crate::body::Body;
use crate::error::ApiError;
use crate::pipeline::{self, Compressed, key};
use crate::upstream::headers;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri};
use http_body::Body as _;
use hyper::body::Incoming;
use serde_json::{Map, Value};
use std::sync::Arc;

/// The route's path.
pub const PATH: &str = "/foldgate/v1/compress";

/// Answers one compress request; foldgate's own errors in OpenAI's
/// envelope, as on every admin route.
pub async fn handle(app: &Arc<App>, req: Request<Incoming>) -> Response<Body> {
    run(app, req)
        .await
        .unwrap_or_else(|e| e.into_response_as(crate::api::own_error_shape()))
}

async fn run(app: &Arc<App>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let limit = app.config.server.max_body_bytes;
    let (parts, incoming) = req.into_parts();
    key::check_header(&parts.headers, &app.config.conversation)?;
    if incoming.size_hint().lower() > limit as u64 {
        return Err(ApiError::BodyTooLarge { limit });
    }
    refuse_admin_token(app, &parts.headers)?;
    let bytes = pipeline::read_body(incoming, limit).await?;
    let call = Call::read(&bytes)?;
    let headers = call.headers(app, &parts)?;
    let route = call.route()?;
    let api = route.api;
    let path = call.path.clone();
    let body = serde_json::to_vec(&call.fields)
        .map(Bytes::from)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let compressed = pipeline::compress(app, route, path, &headers, body).await?;
    let answer = answer(api, &call.fields, compressed)?;
    Ok(super::json(answer))
}

/// The admin token is no tenant's credential, and foldgate's summarizer
/// call would carry it upstream: the caller sends the client's key.
fn refuse_admin_token(app: &App, headers: &HeaderMap) -> Result<(), ApiError> {
    let admin = app.config.server.admin_token.as_ref();
    match headers::credential(headers) {
        Some(offered) if admin.is_some_and(|t| t.matches(offered)) => Err(ApiError::Unauthorized(
            "the admin token names no tenant: send the client's API key (its tenant keeps the conversation's state)",
        )),
        _ => Ok(()),
    }
}

/// A compress request, read: the API, the conversation named in the
/// body, and the API's own body (without foldgate's fields).
struct Call {
    api: crate::api::Api,
    conversation: Option<String>,
    /// The path a client of the API would have posted the body to.
    path: String,
    fields: Map<String, Value>,
}

impl Call {
    fn read(bytes: &[u8]) -> Result<Self, ApiError> {
        let mut fields: Map<String, Value> = serde_json::from_slice(bytes)
            .map_err(|e| bad(None, format!("the body is not a JSON object: {e}")))?;
        let api = match fields.remove("api") {
            None | Some(Value::Null) => crate::api::by_shape(&fields),
            Some(Value::String(name)) => crate::api::named(&name)
                .or_else(|| crate::api::for_provider(&name))
                .ok_or_else(|| {
                    bad(
                        Some("api"),
                        format!("unknown api `{name}`; one of: {}", api_names()),
                    )
                })?,
            Some(_) => {
                return Err(bad(
                    Some("api"),
                    format!("`api` must be a string, one of: {}", api_names()),
                ));
            }
        };
        let conversation = match fields.remove("conversation") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) if id.trim().is_empty() => None,
            Some(Value::String(id)) => Some(id),
            Some(_) => {
                return Err(bad(
                    Some("conversation"),
                    "`conversation` must be a string".into(),
                ));
            }
        };
        let model = match fields.get("model") {
            Some(Value::String(m)) if !m.is_empty() => m.clone(),
            _ => {
                return Err(bad(
                    Some("model"),
                    "`model` must name the model the conversation is for".into(),
                ));
            }
        };
        if api.model_in_path() {
            // Its clients name the model in the path, not the body.
            fields.remove("model");
        }
        let path = api.path().replace("{model}", &model);
        Ok(Self {
            api,
            conversation,
            path,
            fields,
        })
    }

    /// The route the API's own client would have taken.
    fn route(&self) -> Result<crate::api::Route, ApiError> {
        let uri: Option<Uri> = self.path.parse().ok();
        uri.and_then(|uri| crate::api::route(&Method::POST, &uri))
            .filter(|route| route.api.name() == self.api.name())
            .ok_or_else(|| {
                bad(
                    Some("model"),
                    format!("the model cannot be named in a {} path", self.api.name()),
                )
            })
    }

    /// The caller's headers, with the body's `conversation` as the
    /// conversation header.
    fn headers(&self, app: &App, parts: &Parts) -> Result<HeaderMap, ApiError> {
        let mut headers = parts.headers.clone();
        if let Some(id) = &self.conversation {
            let config = &app.config.conversation;
            if id.len() > key::MAX_HEADER_LEN {
                return Err(bad(
                    Some("conversation"),
                    format!(
                        "`conversation` is {} bytes long; at most {} are accepted",
                        id.len(),
                        key::MAX_HEADER_LEN
                    ),
                ));
            }
            let value = HeaderValue::from_str(id).map_err(|_| {
                bad(
                    Some("conversation"),
                    "`conversation` must be visible ASCII".into(),
                )
            })?;
            headers.insert(config.header.clone(), value);
        }
        Ok(headers)
    }
}

/// The answer: the view's fields and what the engine did.
fn answer(
    api: crate::api::Api,
    sent: &Map<String, Value>,
    done: Compressed,
) -> Result<Value, ApiError> {
    let view: Map<String, Value> =
        serde_json::from_slice(&done.body).map_err(|e| ApiError::Internal(e.to_string()))?;
    let field = api.conversation_field();
    let mut out: Map<String, Value> = view
        .into_iter()
        .filter(|(name, value)| name == field || sent.get(name) != Some(value))
        .collect();
    let saved = i64::from(done.tokens_in) - i64::from(done.tokens_out);
    out.insert("tokens_saved".into(), saved.into());
    out.insert("tokens_in".into(), done.tokens_in.into());
    out.insert("tokens_out".into(), done.tokens_out.into());
    out.insert("fold".into(), done.fold.as_str().into());
    out.insert("conversation".into(), done.conversation.into());
    out.insert("api".into(), api.name().into());
    out.insert("compressed".into(), done.compressed.into());
    out.insert("recall".into(), false.into());
    if let Some(warning) = done.warning {
        out.insert("warning".into(), warning.into());
    }
    Ok(Value::Object(out))
}

fn bad(param: Option<&'static str>, message: String) -> ApiError {
    ApiError::BadRequest { message, param }
}

fn api_names() -> String {
    let mut names: Vec<&str> = crate::api::names().collect();
    for provider in crate::api::provider_names() {
        if !names.contains(&provider) {
            names.push(provider);
        }
    }
    names.join(", ")
}
