//! `/foldgate/*`: foldgate's own endpoints on the proxy's listener.

use crate::body::{self, Body};
use crate::error::ApiError;
use crate::proxy::App;
use http::{HeaderValue, Method, Request, Response, header};
use hyper::body::Incoming;

/// Routes an admin request.
pub async fn handle(_app: &App, req: Request<Incoming>) -> Response<Body> {
    match (req.method(), req.uri().path()) {
        (&Method::GET | &Method::HEAD, "/foldgate/health") => json(
            serde_json::json!({ "status": "ok", "version": env!("CARGO_PKG_VERSION") }),
        ),
        (_, path) => ApiError::NotFound(path.to_string()).into_response(),
    }
}

fn json(value: serde_json::Value) -> Response<Body> {
    let mut response = Response::new(body::full(value.to_string()));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
