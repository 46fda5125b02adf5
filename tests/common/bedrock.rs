//! A mock Amazon Bedrock runtime (`InvokeModel` for Claude): a real HTTP
//! server on 127.0.0.1:0 that checks each request's SigV4 signature
//! against the test credentials (recomputed with `aws-sigv4`; a missing or
//! wrong one is Bedrock's 403 `InvalidSignatureException`), refuses what
//! Bedrock refuses of a Claude body (`model` or `stream` in it, another
//! `anthropic_version`: a 400 `ValidationException`), records the bodies,
//! and answers `invoke` with a JSON message and
//! `invoke-with-response-stream` with AWS event-stream frames. The frames
//! are written and read here with `crc32fast`, not with foldgate's code.

use super::mock::{Mock, Recorded};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use foldgate::body::{self, Body};
use http::{Response, StatusCode};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The provider's access key id, as the mock knows it.
pub const KEY_ID: &str = "AKIDFOLDGATETEST";
/// The provider's secret key.
pub const SECRET: &str = "foldgate/test/secret/key";
/// The region the provider signs for.
pub const REGION: &str = "us-west-2";
/// The environment variables foldgate reads the keys from.
pub const KEY_ID_ENV: &str = "FOLDGATE_TEST_AWS_KEY_ID";
pub const SECRET_ENV: &str = "FOLDGATE_TEST_AWS_SECRET";

/// Puts the test credentials in the environment foldgate reads them
/// from (each test runs in its own process).
pub fn credentials_env() {
    // SAFETY: set before foldgate starts, in a test process of its own.
    unsafe {
        std::env::set_var(KEY_ID_ENV, KEY_ID);
        std::env::set_var(SECRET_ENV, SECRET);
    }
}

/// A foldgate provider on the mock: `api = "bedrock"`, the keys in
/// [`KEY_ID_ENV`] and [`SECRET_ENV`] (ends on its own table's line, so
/// the caller may add `models`).
pub fn provider(url: &str) -> String {
    format!(
        "[providers.bedrock]\nbase_url = \"{url}\"\napi = \"bedrock\"\n\
         aws = {{ region = \"{REGION}\", access_key_id_env = \"{KEY_ID_ENV}\", secret_access_key_env = \"{SECRET_ENV}\" }}\n"
    )
}

/// What the mock saw.
#[derive(Default)]
pub struct Seen {
    /// `(path, body)` of each request that passed the checks.
    pub bodies: Mutex<Vec<(String, Value)>>,
    /// Why each refused request was refused.
    pub refused: Mutex<Vec<String>>,
}

/// The mock: its server and what it saw.
pub struct BedrockMock {
    pub mock: Mock,
    pub seen: Arc<Seen>,
}

/// The answer to a request that passed the checks: the whole Anthropic
/// message (`content`, `stop_reason`, `usage`) for `(path, body)`, or an
/// error response of the caller's.
pub type Answer = Arc<dyn Fn(&str, &Value) -> Result<Value, Box<Response<Body>>> + Send + Sync>;

impl BedrockMock {
    /// Starts the mock; `answer` writes each message.
    pub async fn start(answer: Answer) -> Self {
        let seen = Arc::new(Seen::default());
        let state = seen.clone();
        let mock = Mock::start(move |r: Recorded| {
            let (seen, answer) = (state.clone(), answer.clone());
            async move { handle(&seen, &answer, &r) }
        })
        .await;
        Self { mock, seen }
    }

    /// The mock's base URL.
    pub fn url(&self) -> &str {
        &self.mock.url
    }
}

/// Bedrock's error: `{"message"}` and `x-amzn-errortype`.
pub fn error(status: StatusCode, kind: &str, message: &str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("x-amzn-errortype", kind)
        .body(body::full(json!({ "message": message }).to_string()))
        .unwrap()
}

fn handle(seen: &Seen, answer: &Answer, r: &Recorded) -> Response<Body> {
    let refuse = |status, kind: &str, why: String| {
        seen.refused.lock().unwrap().push(format!("{kind}: {why}"));
        error(status, kind, &why)
    };
    let path = r.uri.split('?').next().unwrap_or_default().to_string();
    if r.method == http::Method::GET && path == "/inference-profiles" {
        // Claude Code's Bedrock mode lists the inference profiles first
        // (the control plane's call, signed alike): none here.
        if let Err(why) = verify(r) {
            return refuse(StatusCode::FORBIDDEN, "InvalidSignatureException", why);
        }
        return Response::builder()
            .header("content-type", "application/json")
            .body(body::full(r#"{"inferenceProfileSummaries":[]}"#))
            .unwrap();
    }
    let stream = path.ends_with("/invoke-with-response-stream");
    if !(stream || path.ends_with("/invoke")) || !path.starts_with("/model/") {
        return refuse(StatusCode::NOT_FOUND, "UnknownOperationException", path);
    }
    if let Err(why) = verify(r) {
        return refuse(StatusCode::FORBIDDEN, "InvalidSignatureException", why);
    }
    let body: Value = match serde_json::from_slice(&r.body) {
        Ok(body) => body,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "ValidationException",
                e.to_string(),
            );
        }
    };
    if let Some(why) = body_violation(&body) {
        return refuse(StatusCode::BAD_REQUEST, "ValidationException", why);
    }
    seen.bodies
        .lock()
        .unwrap()
        .push((path.clone(), body.clone()));
    let message = match answer(&path, &body) {
        Ok(message) => message,
        Err(response) => return *response,
    };
    if !stream {
        return Response::builder()
            .header("content-type", "application/json")
            .body(body::full(message.to_string()))
            .unwrap();
    }
    let frames: Vec<u8> = events_of(&message).iter().flat_map(chunk).collect();
    Response::builder()
        .header("content-type", "application/vnd.amazon.eventstream")
        .header("x-amzn-bedrock-content-type", "application/json")
        .body(body::full(frames))
        .unwrap()
}

/// What Bedrock refuses in a Claude body.
fn body_violation(body: &Value) -> Option<String> {
    for key in ["model", "stream"] {
        if body.get(key).is_some() {
            return Some(format!("extraneous key [{key}] is not permitted"));
        }
    }
    if body["anthropic_version"] != "bedrock-2023-05-31" {
        return Some(format!(
            "anthropic_version: {} is not bedrock-2023-05-31",
            body["anthropic_version"]
        ));
    }
    (!body["messages"].is_array()).then(|| "messages: required".to_string())
}

/// Checks a request's SigV4 signature: the scope is the test key's, in
/// [`REGION`], for `bedrock`; the date within 5 minutes; and the
/// signature the one `aws-sigv4` computes over the signed headers, the
/// path and the body as received.
pub fn verify(r: &Recorded) -> Result<(), String> {
    let auth = r.header("authorization").ok_or("no Authorization header")?;
    let fields = auth
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or_else(|| format!("not a SigV4 Authorization: {auth}"))?;
    let field = |name: &str| {
        fields
            .split(", ")
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
            .ok_or_else(|| format!("no {name} in {auth}"))
    };
    let scope: Vec<&str> = field("Credential")?.split('/').collect();
    if scope.len() != 5 || scope[0] != KEY_ID || scope[2] != REGION || scope[3] != "bedrock" {
        return Err(format!("wrong credential scope {scope:?}"));
    }
    let date = r.header("x-amz-date").ok_or("no x-amz-date")?;
    let time = parse_amz_date(date).ok_or_else(|| format!("bad x-amz-date {date}"))?;
    let skew = match SystemTime::now().duration_since(time) {
        Ok(d) => d,
        Err(e) => e.duration(),
    };
    if skew > Duration::from_secs(300) {
        return Err(format!("x-amz-date {date} is {skew:?} off"));
    }
    let mut headers = Vec::new();
    for name in field("SignedHeaders")?.split(';') {
        if name == "x-amz-date" {
            continue;
        }
        let value = r
            .header(name)
            .ok_or_else(|| format!("signed header {name} missing"))?;
        headers.push((name, value));
    }
    let host = r.header("host").ok_or("no host")?;
    let uri = format!("http://{host}{}", r.uri);
    let expected = signature(r.method.as_str(), &uri, &headers, &r.body, time)?;
    if expected == auth {
        Ok(())
    } else {
        Err(format!(
            "signature mismatch: got {auth}, computed {expected}"
        ))
    }
}

/// The `Authorization` `aws-sigv4` computes for a request.
fn signature(
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    time: SystemTime,
) -> Result<String, String> {
    let identity = Credentials::new(KEY_ID, SECRET, None, None, "mock").into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(REGION)
        .name("bedrock")
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let request = SignableRequest::new(
        method,
        uri,
        headers.iter().copied(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| e.to_string())?;
    let (instructions, _) = sign(request, &params)
        .map_err(|e| e.to_string())?
        .into_parts();
    instructions
        .headers()
        .find(|(name, _)| name.eq_ignore_ascii_case("authorization"))
        .map(|(_, value)| value.to_string())
        .ok_or_else(|| "no authorization computed".to_string())
}

/// `20231114T221320Z` as a time.
fn parse_amz_date(date: &str) -> Option<SystemTime> {
    let digits = |range: std::ops::Range<usize>| date.get(range)?.parse::<i64>().ok();
    let (y, m, d) = (digits(0..4)?, digits(4..6)?, digits(6..8)?);
    let (h, min, s) = (digits(9..11)?, digits(11..13)?, digits(13..15)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3_600 + min * 60 + s;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

/// The Anthropic stream events of a whole message.
pub fn events_of(message: &Value) -> Vec<Value> {
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    let mut events = vec![json!({"type": "message_start", "message": start})];
    for (i, block) in message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if block["type"] == "text" {
            events.push(json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}));
            events.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block["text"]}}));
        } else {
            let mut start = block.clone();
            start["input"] = json!({});
            events.push(json!({"type": "content_block_start", "index": i, "content_block": start}));
            events.push(json!({"type": "content_block_delta", "index": i,
                "delta": {"type": "input_json_delta", "partial_json": block["input"].to_string()}}));
        }
        events.push(json!({"type": "content_block_stop", "index": i}));
    }
    events.push(json!({"type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": null},
        "usage": {"output_tokens": message["usage"]["output_tokens"]}}));
    events.push(json!({"type": "message_stop"}));
    events
}

/// One event-stream frame carrying `event`, as Bedrock writes it.
pub fn chunk(event: &Value) -> Vec<u8> {
    let payload = json!({"bytes": STANDARD.encode(event.to_string())}).to_string();
    let mut headers = Vec::new();
    for (name, value) in [
        (":event-type", "chunk"),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ] {
        headers.push(name.len() as u8);
        headers.extend_from_slice(name.as_bytes());
        headers.push(7);
        headers.extend_from_slice(&(value.len() as u16).to_be_bytes());
        headers.extend_from_slice(value.as_bytes());
    }
    let total = 12 + headers.len() + payload.len() + 4;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&(headers.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(&out[..8]).to_be_bytes());
    out.extend_from_slice(&headers);
    out.extend_from_slice(payload.as_bytes());
    out.extend_from_slice(&crc32fast::hash(&out).to_be_bytes());
    out
}

/// The events of a whole event stream, each frame checked: its lengths,
/// both CRCs, its `:message-type` `event` and `:event-type` `chunk`.
pub fn read_frames(mut bytes: &[u8]) -> Result<Vec<Value>, String> {
    let word = |b: &[u8], at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let mut events = Vec::new();
    while !bytes.is_empty() {
        if bytes.len() < 16 {
            return Err(format!("{} bytes left, not a frame", bytes.len()));
        }
        let total = word(bytes, 0) as usize;
        let headers_len = word(bytes, 4) as usize;
        if word(bytes, 8) != crc32fast::hash(&bytes[..8]) {
            return Err("prelude CRC mismatch".into());
        }
        if total > bytes.len() || total < 16 + headers_len {
            return Err(format!("frame length {total} of {} bytes", bytes.len()));
        }
        if word(bytes, total - 4) != crc32fast::hash(&bytes[..total - 4]) {
            return Err("message CRC mismatch".into());
        }
        let text = String::from_utf8_lossy(&bytes[12..12 + headers_len]);
        for needle in [
            ":message-type\x07\x00\x05event",
            ":event-type\x07\x00\x05chunk",
        ] {
            if !text.contains(needle) {
                return Err(format!("frame without {needle:?}: {text:?}"));
            }
        }
        let payload: Value = serde_json::from_slice(&bytes[12 + headers_len..total - 4])
            .map_err(|e| format!("payload: {e}"))?;
        let decoded = STANDARD
            .decode(payload["bytes"].as_str().ok_or("payload without bytes")?)
            .map_err(|e| format!("base64: {e}"))?;
        events.push(serde_json::from_slice(&decoded).map_err(|e| format!("event: {e}"))?);
        bytes = &bytes[total..];
    }
    Ok(events)
}

/// The message a stream's events make: its content blocks (text joined,
/// tool input parsed), stop reason and usage.
pub fn message_of(events: &[Value]) -> Value {
    let mut message = json!({"content": []});
    for event in events {
        match event["type"].as_str().unwrap_or_default() {
            "message_start" => {
                message = event["message"].clone();
                message["content"] = json!([]);
            }
            "content_block_start" => {
                let mut block = event["content_block"].clone();
                if block["type"] == "tool_use" {
                    block["input"] = json!("");
                }
                message["content"].as_array_mut().unwrap().push(block);
            }
            "content_block_delta" => {
                let i = event["index"].as_u64().unwrap_or_default() as usize;
                let block = &mut message["content"][i];
                let delta = &event["delta"];
                if let Some(text) = delta["text"].as_str() {
                    block["text"] =
                        json!(format!("{}{text}", block["text"].as_str().unwrap_or("")));
                }
                if let Some(part) = delta["partial_json"].as_str() {
                    block["input"] =
                        json!(format!("{}{part}", block["input"].as_str().unwrap_or("")));
                }
            }
            "message_delta" => {
                message["stop_reason"] = event["delta"]["stop_reason"].clone();
                message["usage"]["output_tokens"] = event["usage"]["output_tokens"].clone();
            }
            _ => {}
        }
    }
    message
}
