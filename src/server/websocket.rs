//! The Responses API over WebSocket, as Codex speaks it: a `GET` with
//! `Upgrade: websocket` on any path the Responses API claims for its
//! `POST` (`/v1/responses`, under any mount prefix and version) is
//! answered `101 Switching Protocols` at once. On the socket, each text
//! frame `{"type": "response.create", …}` carries the fields of a
//! Responses body; it becomes a `POST` to the same path with the upgrade
//! request's headers (its key, its conversation header) and runs through
//! the same stack and pipeline as one sent over HTTP
//! ([`super::stack::frames`], handed to [`accept`]): routing, keys, folds, recall, metrics,
//! traces. The upstream is asked over HTTP with `stream: true`; each event
//! of its stream goes back as one text frame, and a failure as one
//! `{"type": "error", "status": …, "error": {…}}` frame. Frames are
//! answered one after another, in the order they came.
//!
//! What the WebSocket mode adds to a Responses body is handled here, since
//! an HTTP upstream knows none of it:
//! - `previous_response_id` naming the socket's last answer: the client
//!   sent only the items after that answer's input and output (Codex does
//!   on every turn after its first), so the input is made whole again
//!   (the last input, the output items streamed back, the new items)
//!   before it goes on. An id the socket did not answer goes on untouched
//!   (the upstream's own stored response, with `store: true`).
//! - `generate: false` (Codex's warm-up): answered here with an empty
//!   completed response; nothing goes upstream. Its input is the base the
//!   next frame's `previous_response_id` continues.
//! - `response.processed` frames (an acknowledgement) need no answer.

use crate::app::App;
use crate::body::{self, Body};
use crate::error::{ApiError, ErrorShape};
use crate::pipeline::key::{self, PeerAddr};
use crate::sse::{self, Events, Framing};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri, Version, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tower::ServiceExt;
use tower::util::BoxCloneService;
use tracing::Instrument;

/// The socket once upgraded.
type Socket = WebSocketStream<TokioIo<Upgraded>>;

/// Largest error body read to put in an error frame.
const MAX_ERROR_BODY: usize = 1 << 20;

/// The service each `response.create` frame runs through as a `POST`:
/// the stack's layers over a body read already ([`super::stack::frames`]).
pub type FrameService = BoxCloneService<Request<Full<Bytes>>, Response<Body>, Infallible>;

/// Whether `req` asks to open a Responses WebSocket: an HTTP/1.1 `GET`
/// with `Upgrade: websocket` on a path the Responses API claims for its
/// `POST`. Any other upgrade is forwarded as before (without it).
pub fn claims<B>(req: &Request<B>) -> bool {
    req.method() == Method::GET
        && req.version() == Version::HTTP_11
        && has_token(req.headers(), &header::UPGRADE, "websocket")
        && crate::api::of(&Method::POST, req.uri().path()).is_some_and(is_responses)
}

/// Answers an upgrade [`claims`] took: `101 Switching Protocols` at once
/// (the socket is served by a task of its own once hyper hands it over),
/// or the refusal in the Responses error shape.
pub fn accept(app: Arc<App>, mut req: Request<Incoming>, frames: FrameService) -> Response<Body> {
    let shape = crate::api::error_shape(&Method::POST, req.uri().path());
    let version = req.headers().get(header::SEC_WEBSOCKET_VERSION);
    if version.is_none_or(|v| v != "13") {
        let mut refused = refuse(shape, "only WebSocket version 13 is spoken");
        refused.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        return refused;
    }
    let Some(accept) = req
        .headers()
        .get(header::SEC_WEBSOCKET_KEY)
        .map(|key| derive_accept_key(key.as_bytes()))
    else {
        return refuse(shape, "a WebSocket upgrade needs Sec-WebSocket-Key");
    };
    let Ok(accept) = HeaderValue::from_str(&accept) else {
        return ApiError::Internal("the WebSocket accept key is not a header value".into())
            .into_response_as(shape);
    };
    if let Err(e) = key::check_header(req.headers(), &app.config.conversation) {
        return e.into_response_as(shape);
    }
    let upgrade = hyper::upgrade::on(&mut req);
    let (parts, _) = req.into_parts();
    let limit = app.config.server.max_body_bytes;
    let request_id = parts
        .headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let span = tracing::info_span!("websocket", socket = %request_id, path = parts.uri.path());
    let session = Session {
        frames,
        uri: parts.uri,
        headers: frame_headers(parts.headers),
        peer: parts.extensions.get::<PeerAddr>().copied(),
        limit,
        pending: Vec::new(),
        last: None,
    };
    tokio::spawn(
        async move {
            match upgrade.await {
                Ok(upgraded) => {
                    let config = WebSocketConfig::default()
                        .max_message_size(Some(limit))
                        .max_frame_size(Some(limit));
                    let io = TokioIo::new(upgraded);
                    let socket =
                        WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
                    tracing::debug!("WebSocket open");
                    session.run(socket).await;
                    tracing::debug!("WebSocket closed");
                }
                Err(e) => tracing::debug!(error = %e, "the WebSocket upgrade did not complete"),
            }
        }
        .instrument(span),
    );
    let mut response = Response::new(body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    response
}

/// A refused upgrade: 400 in the Responses error shape.
fn refuse(shape: ErrorShape, message: &str) -> Response<Body> {
    ApiError::BadRequest {
        message: message.to_string(),
        param: None,
    }
    .into_response_as(shape)
}

fn is_responses(api: crate::api::Api) -> bool {
    api.name() == "responses"
}

/// Whether a comma-separated header carries `token` (in any case).
fn has_token(headers: &HeaderMap, name: &header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// The upgrade request's headers as each frame's `POST` carries them:
/// without the connection's (hop-by-hop, `Sec-WebSocket-*`), without the
/// upgrade's request id (each frame gets its own), without the beta flag
/// asking for the WebSocket mode (the upstream is asked over HTTP), and
/// with a JSON body that asks for a stream.
fn frame_headers(mut headers: HeaderMap) -> HeaderMap {
    crate::upstream::headers::strip_hop_by_hop(&mut headers);
    for name in [
        header::SEC_WEBSOCKET_KEY,
        header::SEC_WEBSOCKET_VERSION,
        header::SEC_WEBSOCKET_EXTENSIONS,
        header::SEC_WEBSOCKET_PROTOCOL,
        header::CONTENT_LENGTH,
        header::HeaderName::from_static("x-request-id"),
    ] {
        headers.remove(name);
    }
    let beta = header::HeaderName::from_static("openai-beta");
    let kept: Vec<String> = headers
        .get_all(&beta)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|flag| !flag.is_empty() && !flag.starts_with("responses_websockets"))
        .map(str::to_string)
        .collect();
    headers.remove(&beta);
    if let Ok(value) = HeaderValue::from_str(&kept.join(", ")) {
        if !kept.is_empty() {
            headers.insert(beta, value);
        }
    }
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("text/event-stream"),
    );
    headers
}

/// One open socket.
struct Session {
    /// The stack each frame's `POST` runs through.
    frames: FrameService,
    /// The upgrade's path and query: each frame's `POST` goes there.
    uri: Uri,
    /// Each frame's headers ([`frame_headers`]).
    headers: HeaderMap,
    peer: Option<PeerAddr>,
    /// `server.max_body_bytes`.
    limit: usize,
    /// The whole input of the frame being answered.
    pending: Vec<Value>,
    /// The last answer completed on this socket.
    last: Option<Last>,
}

/// A completed answer a later frame's `previous_response_id` may continue.
struct Last {
    id: String,
    /// The whole input it answered.
    input: Vec<Value>,
    /// The output items streamed back (`response.output_item.done`).
    output: Vec<Value>,
}

/// What one `response.create` becomes.
enum Create {
    /// A `POST` body for the pipeline.
    Post(Bytes),
    /// `generate: false`: answered here, for this model.
    Warmup(Value),
}

/// What the relayed stream has shown.
#[derive(Default)]
struct Seen {
    /// The response's id, from any event that carries the response.
    id: Option<String>,
    output: Vec<Value>,
    /// `response.completed` came.
    completed: bool,
    /// An event that ends a response came (completed, failed,
    /// incomplete, error).
    ended: bool,
}

/// The fields of a streamed event the socket reads.
#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    item: Option<Value>,
    response: Option<ResponseId>,
}

#[derive(Deserialize)]
struct ResponseId {
    id: Option<String>,
}

impl Session {
    /// Answers frames until the client closes the socket.
    async fn run(mut self, mut socket: Socket) {
        let mut queued: VecDeque<Message> = VecDeque::new();
        loop {
            let message = match queued.pop_front() {
                Some(message) => message,
                None => match socket.next().await {
                    Some(Ok(message)) => message,
                    Some(Err(e)) => {
                        self.broken(&mut socket, e).await;
                        break;
                    }
                    None => break,
                },
            };
            let open = match message {
                Message::Text(text) => self.frame(&mut socket, &mut queued, text.as_str()).await,
                Message::Binary(_) => {
                    let error = error_event(
                        StatusCode::BAD_REQUEST,
                        "invalid_request_error",
                        "binary frames are not spoken; send response.create as text",
                    );
                    send(&mut socket, error).await
                }
                Message::Close(_) => false,
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => true,
            };
            if !open {
                break;
            }
        }
        let _ = socket.close(None).await;
    }

    /// A read that failed: a frame over the size limit is said in an
    /// error frame; a peer gone (Codex drops the connection when done) or
    /// broken ends the socket quietly.
    async fn broken(&mut self, socket: &mut Socket, e: WsError) {
        tracing::debug!(error = %e, "WebSocket read failed");
        if let WsError::Capacity(_) = e {
            let message = format!(
                "the frame exceeds the limit of {} bytes (server.max_body_bytes)",
                self.limit
            );
            let error = error_event(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                &message,
            );
            let _ = socket.send(Message::text(error)).await;
        }
    }

    /// Answers one text frame; `false` once the socket is closed.
    async fn frame(
        &mut self,
        socket: &mut Socket,
        queued: &mut VecDeque<Message>,
        text: &str,
    ) -> bool {
        let fields = match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(fields)) => fields,
            _ => {
                let error = error_event(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    "a frame must be a JSON object with a type",
                );
                return send(socket, error).await;
            }
        };
        match fields.get("type").and_then(Value::as_str) {
            Some("response.create") => {}
            // The client's acknowledgement of an answer: nothing to do.
            Some("response.processed") => return true,
            other => {
                let message = format!(
                    "unsupported frame type {}; send response.create",
                    other.map_or_else(|| "(none)".to_string(), |t| format!("`{t}`"))
                );
                let error = error_event(StatusCode::BAD_REQUEST, "invalid_request_error", &message);
                return send(socket, error).await;
            }
        }
        match self.create(fields) {
            Create::Warmup(model) => self.warm_up(socket, model).await,
            Create::Post(body) => self.post(socket, queued, body).await,
        }
    }

    /// The `POST` body of a `response.create`: without `type` and
    /// `generate`, its input made whole when it continues the socket's
    /// last answer, and asking for a stream. Remembers the whole input.
    fn create(&mut self, mut fields: Map<String, Value>) -> Create {
        // Removed in place: the body keeps the client's order of fields.
        fields.shift_remove("type");
        let warmup = fields.shift_remove("generate") == Some(Value::Bool(false));
        let input = items(fields.get_mut("input").map(Value::take));
        let continues = match (fields.get("previous_response_id"), &self.last) {
            (Some(Value::String(id)), Some(last)) => *id == last.id,
            _ => false,
        };
        let input = match self.last.take() {
            Some(last) if continues => {
                tracing::debug!(
                    previous = %last.id,
                    items = input.len(),
                    "the frame continues the socket's last answer"
                );
                fields.shift_remove("previous_response_id");
                let mut whole = last.input;
                whole.reserve(last.output.len() + input.len());
                whole.extend(last.output);
                whole.extend(input);
                whole
            }
            _ => input,
        };
        if warmup {
            tracing::debug!(
                items = input.len(),
                "a warm-up (generate: false), answered here"
            );
            self.pending = input;
            return Create::Warmup(fields.get("model").cloned().unwrap_or(Value::Null));
        }
        fields.insert("input".into(), Value::Array(input));
        fields.insert("stream".into(), Value::Bool(true));
        let mut body = Value::Object(fields);
        let bytes = Bytes::from(body.to_string());
        self.pending = match body.get_mut("input").map(Value::take) {
            Some(Value::Array(input)) => input,
            _ => Vec::new(),
        };
        Create::Post(bytes)
    }

    /// Answers a warm-up with an empty completed response.
    async fn warm_up(&mut self, socket: &mut Socket, model: Value) -> bool {
        let id = format!("resp_foldgate_{:016x}", fastrand::u64(..));
        let created_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let response = |status: &str| {
            json!({"id": id, "object": "response", "created_at": created_at,
                   "status": status, "model": model, "output": []})
        };
        let created = json!({"type": "response.created", "sequence_number": 0,
                             "response": response("in_progress")});
        let completed = json!({"type": "response.completed", "sequence_number": 1,
                               "response": response("completed")});
        if !send(socket, created.to_string()).await || !send(socket, completed.to_string()).await {
            return false;
        }
        self.last = Some(Last {
            id,
            input: std::mem::take(&mut self.pending),
            output: Vec::new(),
        });
        true
    }

    /// Runs a frame's `POST` through the stack and relays its answer.
    async fn post(
        &mut self,
        socket: &mut Socket,
        queued: &mut VecDeque<Message>,
        body: Bytes,
    ) -> bool {
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        if let Some(peer) = self.peer {
            request.extensions_mut().insert(peer);
        }
        let call = self.frames.clone().oneshot(request);
        tokio::pin!(call);
        // The pipeline may fold before it answers: the client may close
        // meanwhile, which drops the request.
        let response = loop {
            tokio::select! {
                answered = &mut call => match answered {
                    Ok(response) => break response,
                    Err(never) => match never {},
                },
                message = socket.next() => if !keep(message, queued) {
                    return false;
                },
            }
        };
        let status = response.status();
        if !status.is_success() {
            let body = read(response.into_body(), MAX_ERROR_BODY)
                .await
                .unwrap_or_default();
            return send(socket, error_from(status, &body)).await;
        }
        match Framing::of(response.headers()) {
            Some(Framing::Sse) => self.relay(socket, queued, response.into_body()).await,
            _ => match read(response.into_body(), self.limit.max(MAX_ERROR_BODY)).await {
                Ok(body) => self.whole(socket, &body).await,
                Err(e) => send(socket, upstream_broken(&e)).await,
            },
        }
    }

    /// Relays an event stream, one frame an event.
    async fn relay(
        &mut self,
        socket: &mut Socket,
        queued: &mut VecDeque<Message>,
        mut body: Body,
    ) -> bool {
        let mut events = Events::framed(Framing::Sse);
        let mut seen = Seen::default();
        loop {
            tokio::select! {
                frame = body.frame() => match frame {
                    Some(Ok(frame)) => {
                        let Ok(data) = frame.into_data() else { continue };
                        for event in events.push(data) {
                            if !relay_event(socket, &sse::payload(&event), &mut seen).await {
                                return false;
                            }
                        }
                    }
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "the upstream's stream broke");
                        return send(socket, upstream_broken(&e.to_string())).await;
                    }
                    None => break,
                },
                message = socket.next() => if !keep(message, queued) {
                    return false;
                },
            }
        }
        let rest = events.rest();
        if !rest.is_empty() && !relay_event(socket, &sse::payload(&rest), &mut seen).await {
            return false;
        }
        if !seen.ended {
            return send(
                socket,
                upstream_broken("the stream ended before response.completed"),
            )
            .await;
        }
        self.remember(seen);
        true
    }

    /// An answer that came whole (JSON, not a stream): sent as the events
    /// a stream of it would end with.
    async fn whole(&mut self, socket: &mut Socket, body: &[u8]) -> bool {
        let Ok(response) = serde_json::from_slice::<Value>(body) else {
            return send(socket, upstream_broken("the answer is not JSON")).await;
        };
        let mut seen = Seen::default();
        let output = response
            .get("output")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let created = json!({"type": "response.created", "response": response});
        if !relay_event(socket, created.to_string().as_bytes(), &mut seen).await {
            return false;
        }
        for (index, item) in output.into_iter().enumerate() {
            let done =
                json!({"type": "response.output_item.done", "output_index": index, "item": item});
            if !relay_event(socket, done.to_string().as_bytes(), &mut seen).await {
                return false;
            }
        }
        let completed = json!({"type": "response.completed", "response": response});
        if !relay_event(socket, completed.to_string().as_bytes(), &mut seen).await {
            return false;
        }
        self.remember(seen);
        true
    }

    /// Keeps a completed answer for the next frame to continue.
    fn remember(&mut self, seen: Seen) {
        let input = std::mem::take(&mut self.pending);
        self.last = match (seen.completed, seen.id) {
            (true, Some(id)) => Some(Last {
                id,
                input,
                output: seen.output,
            }),
            _ => None,
        };
    }
}

/// Sends one event's JSON as a text frame, noting what it shows; `false`
/// once the socket is closed. Events without JSON (`[DONE]`) are dropped.
async fn relay_event(socket: &mut Socket, payload: &[u8], seen: &mut Seen) -> bool {
    let payload = payload.trim_ascii();
    if payload.first() != Some(&b'{') {
        return true;
    }
    let Ok(text) = std::str::from_utf8(payload) else {
        return true;
    };
    if let Ok(event) = serde_json::from_str::<Event>(text) {
        if let Some(id) = event.response.and_then(|r| r.id) {
            seen.id = Some(id);
        }
        match event.kind.as_str() {
            "response.output_item.done" => seen.output.extend(event.item),
            "response.completed" => (seen.completed, seen.ended) = (true, true),
            "response.failed" | "response.incomplete" | "error" => seen.ended = true,
            _ => {}
        }
    }
    send(socket, text.to_string()).await
}

/// Reads a whole body of at most `max` bytes.
async fn read(mut body: Body, max: usize) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| e.to_string())?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > max {
                return Err(format!("the answer exceeds {max} bytes"));
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(bytes)
}

/// Sends a text frame; `false` once the socket is closed.
async fn send(socket: &mut Socket, text: String) -> bool {
    match socket.send(Message::text(text)).await {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(error = %e, "WebSocket send failed");
            false
        }
    }
}

/// A message that came while a frame was being answered: queued to be
/// answered next; `false` when the socket closed or broke.
fn keep(message: Option<Result<Message, WsError>>, queued: &mut VecDeque<Message>) -> bool {
    match message {
        Some(Ok(Message::Close(_))) | None => false,
        Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => true,
        Some(Ok(message)) => {
            queued.push_back(message);
            true
        }
        Some(Err(e)) => {
            tracing::debug!(error = %e, "WebSocket read failed while answering");
            false
        }
    }
}

/// An error frame as the Responses WebSocket sends one.
fn error_event(status: StatusCode, kind: &str, message: &str) -> String {
    json!({"type": "error", "status": status.as_u16(),
           "error": {"type": kind, "message": message}})
    .to_string()
}

/// The error frame of an answer that is not a success: its status and the
/// `error` object of its body (foldgate's own envelope or the upstream's).
fn error_from(status: StatusCode, body: &[u8]) -> String {
    let error = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut envelope)) => match envelope.remove("error") {
            Some(error @ Value::Object(_)) => error,
            Some(Value::String(message)) => json!({"type": "error", "message": message}),
            _ => Value::Object(envelope),
        },
        _ => json!({"type": "error", "message": String::from_utf8_lossy(body)}),
    };
    json!({"type": "error", "status": status.as_u16(), "error": error}).to_string()
}

/// The error frame of an upstream answer that broke off.
fn upstream_broken(detail: &str) -> String {
    json!({"type": "error", "status": StatusCode::BAD_GATEWAY.as_u16(),
           "error": {"type": "server_error", "code": "upstream_broken",
                     "message": format!("the upstream's answer broke off: {detail}")}})
    .to_string()
}

/// A `response.create`'s input as items: a string is one user message.
fn items(input: Option<Value>) -> Vec<Value> {
    match input {
        Some(Value::Array(items)) => items,
        Some(Value::String(text)) => vec![json!({"role": "user", "content": text})],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn claims_upgrades_on_responses_paths_only() {
        let upgrade = |path: &str, method: Method| {
            let mut req = Request::new(());
            *req.method_mut() = method;
            *req.uri_mut() = path.parse().unwrap();
            *req.headers_mut() = headers(&[
                ("upgrade", "WebSocket"),
                ("connection", "keep-alive, Upgrade"),
            ]);
            claims(&req)
        };
        assert!(upgrade("/v1/responses", Method::GET));
        assert!(upgrade("/openai/v1/responses", Method::GET));
        assert!(upgrade("/responses", Method::GET));
        assert!(!upgrade("/v1/chat/completions", Method::GET));
        assert!(!upgrade("/v1/responses", Method::POST));
        let mut plain = Request::new(());
        *plain.uri_mut() = "/v1/responses".parse().unwrap();
        assert!(!claims(&plain), "a GET without Upgrade is not claimed");
    }

    #[test]
    fn frame_headers_drop_the_connection_and_keep_the_key() {
        let out = frame_headers(headers(&[
            ("authorization", "Bearer sk-1"),
            ("x-conversation-id", "c1"),
            ("upgrade", "websocket"),
            ("connection", "Upgrade"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-version", "13"),
            ("sec-websocket-extensions", "permessage-deflate"),
            ("x-request-id", "abc"),
            ("openai-beta", "responses_websockets=2026-02-06, other=1"),
        ]));
        assert_eq!(out["authorization"], "Bearer sk-1");
        assert_eq!(out["x-conversation-id"], "c1");
        assert_eq!(out["openai-beta"], "other=1");
        assert_eq!(out["content-type"], "application/json");
        for gone in [
            "upgrade",
            "connection",
            "sec-websocket-key",
            "sec-websocket-version",
            "sec-websocket-extensions",
            "x-request-id",
        ] {
            assert!(!out.contains_key(gone), "{gone}");
        }
        let only = frame_headers(headers(&[("openai-beta", "responses_websockets=v2")]));
        assert!(!only.contains_key("openai-beta"));
    }

    #[test]
    fn error_frames_carry_the_status_and_the_error_object() {
        let frame: Value = serde_json::from_str(&error_from(
            StatusCode::BAD_REQUEST,
            br#"{"error":{"type":"invalid_request_error","code":"context_length_exceeded","message":"too long"}}"#,
        ))
        .unwrap();
        assert_eq!(
            frame,
            json!({"type": "error", "status": 400, "error": {"type": "invalid_request_error",
                   "code": "context_length_exceeded", "message": "too long"}})
        );
        let frame: Value =
            serde_json::from_str(&error_from(StatusCode::BAD_GATEWAY, b"not json")).unwrap();
        assert_eq!(frame["status"], 502);
        assert_eq!(frame["error"]["message"], "not json");
    }
}
