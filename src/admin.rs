//! `/foldgate/*`: foldgate's own endpoints on the proxy's listener.
//!
//! - `GET /foldgate/health`: liveness, always open.
//! - `GET /foldgate/metrics`: Prometheus text.
//! - `GET /foldgate/conversations/{id}`: a conversation's fold chain. With
//!   `server.admin_token` (as `Authorization: Bearer` or
//!   `x-foldgate-admin-token`) every tenant's; otherwise only the chain of
//!   the tenant whose credential the request carries. Conversations of
//!   key-less clients are readable without a credential only from
//!   loopback, and only when no admin token is set.

use crate::app::App;
use crate::body::{self, Body};
use crate::chat::key;
use crate::error::ApiError;
use crate::metrics::Gauge;
use crate::state::ConvKey;
use crate::upstream::headers;
use http::{HeaderMap, HeaderValue, Method, Request, Response, header};
use hyper::body::Incoming;

/// Routes an admin request.
pub async fn handle(app: &App, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path();
    match (req.method(), path) {
        (&Method::GET | &Method::HEAD, "/foldgate/health") => {
            json(serde_json::json!({ "status": "ok", "version": env!("CARGO_PKG_VERSION") }))
        }
        (&Method::GET, "/foldgate/metrics") => metrics(app),
        (&Method::GET, p)
            if p.starts_with("/foldgate/conversations/")
                && p.ends_with(crate::archive::http::SUFFIX) =>
        {
            let id =
                &p["/foldgate/conversations/".len()..p.len() - crate::archive::http::SUFFIX.len()];
            let id = percent_decode(id);
            let peer = req.extensions().get::<key::PeerAddr>().copied();
            let query = req.uri().query().unwrap_or("");
            match access(app, req.headers(), peer) {
                Ok(tenant) => {
                    crate::archive::http::search(app, tenant.as_deref(), &id, query_pairs(query))
                        .await
                        .map_or_else(ApiError::into_response, json)
                }
                Err(e) => e.into_response(),
            }
        }
        (&Method::GET, p) if p.starts_with("/foldgate/conversations/") => {
            let id = percent_decode(&p["/foldgate/conversations/".len()..]);
            let peer = req.extensions().get::<key::PeerAddr>().copied();
            conversation(app, req.headers(), peer, &id)
                .await
                .unwrap_or_else(ApiError::into_response)
        }
        (_, path) => ApiError::NotFound(path.to_string()).into_response(),
    }
}

fn metrics(app: &App) -> Response<Body> {
    let stored = Gauge {
        name: "foldgate_conversations",
        help: "Conversations with a fold state in the hot cache.",
        samples: vec![(String::new(), app.store.count() as f64)],
    };
    let calibration = Gauge {
        name: "foldgate_token_calibration_factor",
        help: "Actual over estimated prompt tokens, per model, applied to estimates.",
        samples: app
            .tokens
            .calibration_factors()
            .into_iter()
            .map(|(model, factor)| {
                (
                    format!("{{model=\"{}\"}}", model.replace(['"', '\\', '\n'], "_")),
                    factor,
                )
            })
            .collect(),
    };
    let text = app.metrics.render(&[stored, calibration]);
    let mut response = Response::new(body::full(text));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

/// The fold chain of one conversation, tenant-scoped unless the admin
/// token is presented.
async fn conversation(
    app: &App,
    headers: &HeaderMap,
    peer: Option<key::PeerAddr>,
    id: &str,
) -> Result<Response<Body>, ApiError> {
    let found = match access(app, headers, peer)? {
        None => app.store.find(id).await,
        Some(tenant) => {
            let key = ConvKey {
                tenant,
                conversation: id.to_string(),
            };
            app.store
                .load(&key)
                .await
                .map(|chain| (key, chain))
                .into_iter()
                .collect()
        }
    };
    if found.is_empty() {
        return Err(ApiError::NotFound(format!("/foldgate/conversations/{id}")));
    }
    let entries: Vec<serde_json::Value> = found
        .iter()
        .map(|(key, chain)| {
            serde_json::json!({
                "tenant": key.tenant,
                "conversation": key.conversation,
                "folds": chain.states(),
                "current": chain.latest().map(|s| s.summary.render(s.folded())),
            })
        })
        .collect();
    Ok(json(
        serde_json::json!({ "conversation": id, "states": entries }),
    ))
}

/// Who may read conversations: `None` for the admin token (every tenant),
/// else the tenant of the request's credential; 401 without a credential
/// unless [`may_read_keyless`].
fn access(
    app: &App,
    headers: &HeaderMap,
    peer: Option<key::PeerAddr>,
) -> Result<Option<String>, ApiError> {
    let admin = app.config.server.admin_token.as_ref().is_some_and(|token| {
        let offered = headers
            .get("x-foldgate-admin-token")
            .and_then(|v| v.to_str().ok())
            .or_else(|| headers::credential(headers));
        offered.is_some_and(|offered| token.matches(offered))
    });
    if admin {
        return Ok(None);
    }
    if headers::credential(headers).is_none() && !may_read_keyless(app, peer) {
        return Err(ApiError::Unauthorized(
            "admin token or the conversation's credential required",
        ));
    }
    Ok(Some(key::tenant(headers)))
}

/// The decoded `name=value` pairs of a query string (`+` is a space).
fn query_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| percent_decode(&s.replace('+', " "));
        (decode(name), decode(value))
    })
}

/// Whether a request without any credential may read the conversations of
/// key-less clients (the `anonymous` tenant): only without an admin token,
/// and only from this machine. Anyone on the network could otherwise read
/// every key-less conversation whose id is known or guessed.
fn may_read_keyless(app: &App, peer: Option<key::PeerAddr>) -> bool {
    app.config.server.admin_token.is_none() && peer.is_some_and(|p| p.is_loopback())
}

/// Decodes `%XX` escapes in a path segment.
fn percent_decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn json(value: serde_json::Value) -> Response<Body> {
    let mut response = Response::new(body::full(value.to_string()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::sync::Arc;

    fn app(admin_token: Option<&str>) -> App {
        let token = admin_token.map_or(String::new(), |t| format!("admin_token = \"{t}\"\n"));
        let config = Config::from_toml(&format!(
            "[server]\n{token}[providers.local]\nbase_url = \"http://127.0.0.1:9/v1\"\n\
             [state]\nbackend = \"memory\"\n"
        ))
        .unwrap();
        App::new(Arc::new(config)).unwrap()
    }

    #[test]
    fn keyless_reads_only_from_loopback_and_only_without_an_admin_token() {
        let peer = |ip: &str| Some(key::PeerAddr(format!("{ip}:40000").parse().unwrap()));
        let open = app(None);
        assert!(may_read_keyless(&open, peer("127.0.0.1")));
        assert!(may_read_keyless(&open, peer("[::1]")));
        assert!(!may_read_keyless(&open, peer("192.0.2.7")));
        assert!(!may_read_keyless(&open, peer("[2001:db8::1]")));
        assert!(!may_read_keyless(&open, None));
        assert!(!may_read_keyless(&app(Some("adm")), peer("127.0.0.1")));
    }
}
