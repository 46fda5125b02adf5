//! The APIs foldgate folds, and which one a request is: by its route, by
//! its body's shape, by a provider's API name.

use super::WireApi;
use super::route::Claim;
use super::{anthropic, bedrock, chat, gemini, ollama, responses};
use crate::error::ErrorShape;
use http::header::HeaderName;
use http::uri::PathAndQuery;
use http::{Method, Uri};
use serde_json::{Map, Value};
use std::sync::LazyLock;

/// An API foldgate folds: one implementation of [`WireApi`], for the life
/// of the process.
pub type Api = &'static dyn WireApi;

/// Every API foldgate folds. A new API is one more line here (and its
/// folder).
static APIS: &[Api] = &[
    &chat::Chat,
    &anthropic::Anthropic,
    &responses::Responses,
    &gemini::Gemini,
    &ollama::Ollama,
    &bedrock::Bedrock,
];

/// The API a request speaks, when foldgate folds it: a `POST` whose path
/// has the shape of an API's endpoint ([`ApiSpec::claim`](super::ApiSpec::claim)).
pub fn of(method: &Method, path: &str) -> Option<Api> {
    claim(method, path).map(|(api, _)| api)
}

/// The API claiming a `POST` to `path`, and its claim.
fn claim(method: &Method, path: &str) -> Option<(Api, Claim)> {
    if method != Method::POST {
        return None;
    }
    APIS.iter()
        .find_map(|&api| api.claim(path).map(|claim| (api, claim)))
}

/// A conversation request's route: the API that claims it, the part of
/// its path that goes after the provider's `base_url`, and the model the
/// path names.
#[derive(Debug)]
pub struct Route {
    /// The API.
    pub api: Api,
    /// What the client's SDK appended to its base URL, with the query:
    /// the provider's `base_url` takes it as it is.
    pub tail: PathAndQuery,
    /// The model the path names (a Gemini model, an Azure deployment).
    pub model: Option<String>,
}

/// The route of a conversation request, when an API claims it.
pub fn route(method: &Method, uri: &Uri) -> Option<Route> {
    let path = uri.path();
    let (api, claim) = claim(method, path)?;
    Some(Route {
        api,
        tail: tail_of(uri, claim.tail)?,
        model: claim.model.map(|range| path[range].to_string()),
    })
}

/// A request to one of an API's other endpoints, which foldgate does not
/// fold (Gemini's `:countTokens`, Anthropic's `/messages/count_tokens`):
/// forwarded untouched, but only to a provider of that API, with the
/// route's tail ([`ApiSpec::owns`](super::ApiSpec::owns)).
pub fn sibling(uri: &Uri) -> Option<Route> {
    let path = uri.path();
    let (api, claim) = APIS
        .iter()
        .find_map(|&api| api.owns(path).map(|claim| (api, claim)))?;
    Some(Route {
        api,
        tail: tail_of(uri, claim.tail)?,
        model: claim.model.map(|range| path[range].to_string()),
    })
}

/// The path from `start` on, with the query.
fn tail_of(uri: &Uri, start: usize) -> Option<PathAndQuery> {
    let path = uri.path();
    let tail = match uri.query() {
        Some(query) => format!("{}?{query}", &path[start..]),
        None => path[start..].to_string(),
    };
    PathAndQuery::try_from(tail).ok()
}

/// How well a body fits an API's shape ([`Codec::fit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fit {
    /// Not its shape.
    No,
    /// It has the API's conversation field (which other APIs may share).
    Field,
    /// Something only this API writes.
    Only,
}

/// The API a body is written for, judged by its shape when its route is
/// not known: the best [`Codec::fit`], the first in registry order on a
/// tie (chat completions when nothing fits).
pub fn by_shape(body: &Map<String, Value>) -> Api {
    let mut best = APIS[0];
    let mut best_fit = best.fit(body);
    for &api in &APIS[1..] {
        let fit = api.fit(body);
        if fit > best_fit {
            (best, best_fit) = (api, fit);
        }
    }
    best
}

/// Every API's name ([`ApiSpec::name`](super::ApiSpec::name)), in registry order.
pub fn names() -> impl Iterator<Item = &'static str> {
    APIS.iter().map(|api| api.name())
}

/// Every API, in registry order.
pub fn all() -> &'static [Api] {
    APIS
}

/// The API of this name ([`ApiSpec::name`](super::ApiSpec::name)).
pub fn named(name: &str) -> Option<Api> {
    APIS.iter().copied().find(|api| api.name() == name)
}

/// The API providers set to `api = NAME` speak: the one their summarizer
/// calls are shaped for and whose header takes their key.
pub fn for_provider(name: &str) -> Option<Api> {
    APIS.iter().copied().find(|api| api.provider() == name)
}

/// The names providers may set `api` to, in registry order.
pub fn provider_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Vec::with_capacity(APIS.len());
    for api in APIS {
        if !names.contains(&api.provider()) {
            names.push(api.provider());
        }
    }
    names
}

/// The headers a client's or provider's API key may come in, each once,
/// in the order of [`APIS`] (`Authorization` first).
pub fn key_headers() -> &'static [HeaderName] {
    static NAMES: LazyLock<Vec<HeaderName>> = LazyLock::new(|| {
        let mut names: Vec<HeaderName> = Vec::with_capacity(APIS.len());
        for api in APIS {
            let keys = &api.spec().keys;
            let all = std::iter::once(keys.header).chain(keys.client_headers.iter().copied());
            for name in all.map(HeaderName::from_static) {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    });
    &NAMES
}

/// The shape of foldgate's own errors for a request: its API's, else
/// [`own_error_shape`].
pub fn error_shape(method: &Method, path: &str) -> ErrorShape {
    of(method, path).map_or_else(own_error_shape, |api| api.error_shape())
}

/// The shape of foldgate's errors on a route no API claims (its own
/// `/foldgate/*` routes, a handler that panicked): the first API's, chat
/// completions' (OpenAI's envelope).
pub fn own_error_shape() -> ErrorShape {
    APIS[0].error_shape()
}
