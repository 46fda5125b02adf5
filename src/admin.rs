//! `/foldgate/*`: foldgate's own endpoints on the proxy's listener.
//!
//! - `GET /foldgate/health`: liveness, always open.
//! - `GET /foldgate/metrics`: Prometheus text.
//! - `GET /foldgate/conversations/{id}`: a conversation's fold chain. With
//!   `server.admin_token` (as `Authorization: Bearer` or
//!   `x-foldgate-admin-token`) every tenant's; otherwise only the chain of
//!   the tenant whose credential the request carries.

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
        (&Method::GET, p) if p.starts_with("/foldgate/conversations/") => {
            let id = percent_decode(&p["/foldgate/conversations/".len()..]);
            conversation(app, req.headers(), &id)
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
    id: &str,
) -> Result<Response<Body>, ApiError> {
    let admin = app.config.server.admin_token.as_ref().is_some_and(|token| {
        let offered = headers
            .get("x-foldgate-admin-token")
            .and_then(|v| v.to_str().ok())
            .or_else(|| headers::credential(headers));
        offered.is_some_and(|offered| token.matches(offered))
    });
    let tenant = key::tenant(headers);
    if !admin && app.config.server.admin_token.is_some() && headers::credential(headers).is_none() {
        return Err(ApiError::Unauthorized(
            "admin token or the conversation's credential required",
        ));
    }
    let found = if admin {
        app.store.find(id).await
    } else {
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
