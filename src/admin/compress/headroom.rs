//! Headroom's compress contract, as LiteLLM's and Portkey's `headroom`
//! guardrails call it, answered with foldgate's fold (docs/embedding.md).
//!
//! - `POST /v1/compress`: `{"messages": [...], "model"?: …, "config"?:
//!   {"mode": "ccr"}}` with the guardrail's key (`Authorization: Bearer`,
//!   the tenant) and, when LiteLLM knows the caller's session,
//!   `x-headroom-affinity` (the conversation). The guardrail sends only the
//!   rows it lets a compressor touch (not the system rows, the last user
//!   row or any assistant row) and requires one row back per row sent, in
//!   order: foldgate folds them through the proxy's engine
//!   ([`crate::pipeline::compress`]) and answers the fold row by row — the
//!   first folded row carries the summary, every other folded row a marker
//!   with its hash, the recent rows as the view shows them. With `ccr` mode
//!   the hashes are listed in `ccr_hashes`, so LiteLLM offers the model its
//!   `headroom_retrieve` tool.
//! - `GET /v1/retrieve/{hash}`: the folded message a marker's hash names,
//!   read back from foldgate's archive (the caller's tenant only):
//!   `{"hash", "original_content"}`, or 404.
//!
//! No real upstream has these paths, so foldgate answers them itself
//! ([`claims`] is their one list).

use crate::app::App;
use crate::archive::Hit;
use crate::body::Body;
use crate::error::ApiError;
use crate::fold::compress::STUB_PREFIX;
use crate::fold::extract::message_text;
use crate::fold::summary::HEADING_PREFIX;
use crate::pipeline::{self, key};
use crate::state::ConvKey;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri};
use http_body::Body as _;
use hyper::body::Incoming;
use serde_json::{Map, Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

/// The compress route's path.
pub const COMPRESS_PATH: &str = "/v1/compress";
/// The retrieve route's prefix; the hash follows.
pub const RETRIEVE_PREFIX: &str = "/v1/retrieve/";
/// The header LiteLLM names the caller's session by (a SHA-256 hex of
/// its tenant and session id), when it knows one.
pub const AFFINITY_HEADER: &str = "x-headroom-affinity";
/// The name of the tool LiteLLM offers the model for a marker's hash.
pub const RETRIEVE_TOOL: &str = "headroom_retrieve";
/// Hex digits of a marker's hash (LiteLLM takes 12 to 24).
const HASH_LEN: usize = 24;
/// Hashes remembered for retrieval in this process (oldest forgotten).
const MAX_REMEMBERED: usize = 100_000;
/// Archive hits searched for a hash's message.
const SEARCH_LIMIT: usize = 100;

/// Whether foldgate answers this request as Headroom's compression
/// service: the one list of the contract's routes.
pub fn claims(method: &Method, path: &str) -> bool {
    (method == Method::POST && path == COMPRESS_PATH)
        || (method == Method::GET && path.starts_with(RETRIEVE_PREFIX))
}

/// Answers one of the contract's requests; errors in foldgate's own
/// envelope (the guardrail reads only the status).
pub async fn handle(app: &Arc<App>, req: Request<Incoming>) -> Response<Body> {
    let answer = if req.method() == Method::POST {
        compress(app, req).await
    } else {
        retrieve(app, req).await
    };
    answer
        .map(super::super::json)
        .unwrap_or_else(|e| e.into_response_as(crate::api::own_error_shape()))
}

async fn compress(app: &Arc<App>, req: Request<Incoming>) -> Result<Value, ApiError> {
    let limit = app.config.server.max_body_bytes;
    let (parts, incoming) = req.into_parts();
    key::check_header(&parts.headers, &app.config.conversation)?;
    if incoming.size_hint().lower() > limit as u64 {
        return Err(ApiError::BodyTooLarge { limit });
    }
    super::refuse_admin_token(app, &parts.headers)?;
    let bytes = pipeline::read_body(incoming, limit).await?;
    let mut fields: Map<String, Value> = serde_json::from_slice(&bytes)
        .map_err(|e| super::bad(None, format!("the body is not a JSON object: {e}")))?;
    let ccr = fields
        .get("config")
        .and_then(|c| c.get("mode"))
        .and_then(Value::as_str)
        == Some("ccr");
    let (sent, model) = messages_and_model(&mut fields)?;
    let headers = with_conversation(app, &parts.headers)?;
    let path = "/v1/chat/completions".to_string();
    let uri: Uri = path
        .parse()
        .map_err(|e: http::uri::InvalidUri| ApiError::Internal(e.to_string()))?;
    let route = crate::api::route(&Method::POST, &uri)
        .ok_or_else(|| ApiError::Internal("chat completions claims no route".into()))?;
    let body = serde_json::to_vec(&json!({"model": model, "messages": sent}))
        .map(Bytes::from)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let done = pipeline::compress(app, route, path, &headers, body).await?;
    let view: Value =
        serde_json::from_slice(&done.body).map_err(|e| ApiError::Internal(e.to_string()))?;
    let view = view
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let tenant = key::tenant(&headers);
    let rows = rows(&sent, &view, ccr);
    if let Some(conversation) = &done.conversation {
        let key = ConvKey {
            tenant,
            conversation: conversation.clone(),
        };
        for (hash, query) in &rows.hashes {
            remember(hash, &key, query);
        }
    }
    let (before, after) = (done.tokens_in, done.tokens_out);
    let mut out = json!({
        "messages": rows.messages,
        "tokens_before": before,
        "tokens_after": after,
        "tokens_saved": i64::from(before) - i64::from(after),
        "compression_ratio": if before == 0 { 1.0 } else { f64::from(after) / f64::from(before) },
        "transforms_applied": transforms(&done, rows.folded),
        "ccr_hashes": if ccr { rows.hashes.iter().map(|(h, _)| h.clone()).collect() } else { Vec::new() },
        "fold": done.fold.as_str(),
        "conversation": done.conversation,
        "compressed": done.compressed,
    });
    if let (Some(warning), Some(map)) = (done.warning, out.as_object_mut()) {
        map.insert("warning".into(), warning.into());
    }
    Ok(out)
}

/// The request's `messages` (message objects) and `model` (a name).
fn messages_and_model(fields: &mut Map<String, Value>) -> Result<(Vec<Value>, String), ApiError> {
    let sent: Vec<Value> = match fields.remove("messages") {
        Some(Value::Array(ms)) if ms.iter().all(Value::is_object) => ms,
        _ => {
            return Err(super::bad(
                Some("messages"),
                "`messages` must be an array of message objects".into(),
            ));
        }
    };
    let model = match fields.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => {
            return Err(super::bad(
                Some("model"),
                "`model` must name the model the conversation is for (the guardrail's `model`)"
                    .into(),
            ));
        }
    };
    Ok((sent, model))
}

/// The caller's headers with the conversation header set from the
/// affinity header (`headroom-<affinity>`), unless the caller set one.
fn with_conversation(app: &App, headers: &HeaderMap) -> Result<HeaderMap, ApiError> {
    let mut headers = headers.clone();
    let name = &app.config.conversation.header;
    let affinity = headers.get(AFFINITY_HEADER).and_then(|v| v.to_str().ok());
    if let (None, Some(affinity)) = (headers.get(name), affinity) {
        let id = format!("headroom-{}", affinity.trim());
        if id.len() <= key::MAX_HEADER_LEN
            && let Ok(value) = HeaderValue::from_str(&id)
        {
            headers.insert(name.clone(), value);
        }
    }
    Ok(headers)
}

/// What the engine did, in Headroom's `transforms_applied` terms.
fn transforms(done: &pipeline::Compressed, folded: usize) -> Vec<String> {
    let mut out = Vec::new();
    if folded > 0 {
        out.push(format!("foldgate:fold:{}", done.fold.as_str()));
    }
    if done.compressed > 0 {
        out.push("foldgate:stubs".to_string());
    }
    out
}

/// The answer's rows: one per row sent, and the hashes of the folded ones.
struct Rows {
    messages: Vec<Value>,
    /// Each folded row's hash and the words its archive row is found by.
    hashes: Vec<(String, String)>,
    folded: usize,
}

fn is_summary(m: &Value) -> bool {
    message_text(m).starts_with(HEADING_PREFIX)
}

/// Whether `shown` (a message of the view) stands for `row` (a message
/// sent): the same row, or foldgate's stub of it.
fn stands_for(shown: &Value, row: &Value) -> bool {
    shown == row
        || (shown.get("role") == row.get("role")
            && shown.get("tool_call_id") == row.get("tool_call_id")
            && message_text(shown).starts_with(STUB_PREFIX))
}

/// Lays the view over the rows sent: the view's recent messages (as it
/// shows them) on the rows they stand for, matched from the end; the rows
/// before them, when the view has a summary, folded: the first carries
/// the summary, each a marker with its hash. Without a summary a row the
/// view does not show is answered as sent.
fn rows(sent: &[Value], view: &[Value], ccr: bool) -> Rows {
    let mut shown: Vec<Option<Value>> = vec![None; sent.len()];
    let (mut i, mut j) = (sent.len(), view.len());
    while i > 0 && j > 0 && !is_summary(&view[j - 1]) && stands_for(&view[j - 1], &sent[i - 1]) {
        shown[i - 1] = Some(view[j - 1].clone());
        i -= 1;
        j -= 1;
    }
    // The view's head: pinned rows (kept verbatim) and the summary.
    let mut summary = Vec::new();
    for m in &view[..j] {
        if is_summary(m) {
            summary.push(message_text(m));
        } else if let Some(k) = (0..i).find(|&k| shown[k].is_none() && sent[k] == *m) {
            shown[k] = Some(m.clone());
        }
    }
    let mut out = Vec::with_capacity(sent.len());
    let mut hashes = Vec::new();
    let mut summary = (!summary.is_empty()).then(|| summary.join("\n\n"));
    let fold = summary.is_some();
    for (row, shown) in sent.iter().zip(shown) {
        match shown {
            Some(m) => out.push(m),
            None if !fold => out.push(row.clone()),
            None => {
                let hash = hash_of(row);
                let marker = if ccr {
                    format!(
                        "[foldgate: message folded into the summary; {RETRIEVE_TOOL} hash={hash} returns it]"
                    )
                } else {
                    "[foldgate: message folded into the summary]".to_string()
                };
                let text = match summary.take() {
                    Some(s) => format!("{s}\n\n{marker}"),
                    None => marker,
                };
                let mut folded = row.clone();
                if let Some(map) = folded.as_object_mut() {
                    map.insert("content".into(), Value::String(text));
                }
                out.push(folded);
                hashes.push((hash, query_of(row)));
            }
        }
    }
    let folded = hashes.len();
    Rows {
        messages: out,
        hashes,
        folded,
    }
}

/// A row's hash: the head of its archive digest (the message's identity).
fn hash_of(row: &Value) -> String {
    let digest = format!("{:032x}", crate::message::message_id(row));
    digest[..HASH_LEN].to_string()
}

/// Words the archive finds a row by: its tool call id, else its first words.
fn query_of(row: &Value) -> String {
    match row.get("tool_call_id").and_then(Value::as_str) {
        Some(id) => id.to_string(),
        None => message_text(row)
            .split_whitespace()
            .take(12)
            .collect::<Vec<_>>()
            .join(" "),
    }
}

type Remembered = (VecDeque<String>, HashMap<String, (ConvKey, String)>);

fn remembered() -> &'static Mutex<Remembered> {
    static HASHES: OnceLock<Mutex<Remembered>> = OnceLock::new();
    HASHES.get_or_init(|| Mutex::new((VecDeque::new(), HashMap::new())))
}

/// Remembers which conversation a hash it answered belongs to.
fn remember(hash: &str, key: &ConvKey, query: &str) {
    let Ok(mut guard) = remembered().lock() else {
        return;
    };
    let (order, map) = &mut *guard;
    if map
        .insert(hash.to_string(), (key.clone(), query.to_string()))
        .is_none()
    {
        order.push_back(hash.to_string());
    }
    while order.len() > MAX_REMEMBERED {
        if let Some(old) = order.pop_front() {
            map.remove(&old);
        }
    }
}

fn recall(hash: &str) -> Option<(ConvKey, String)> {
    remembered().lock().ok()?.1.get(hash).cloned()
}

async fn retrieve(app: &Arc<App>, req: Request<Incoming>) -> Result<Value, ApiError> {
    let path = req.uri().path();
    let hash = path
        .strip_prefix(RETRIEVE_PREFIX)
        .unwrap_or_default()
        .to_ascii_lowercase();
    let not_found = || ApiError::NotFound(format!("{RETRIEVE_PREFIX}{hash}"));
    if hash.len() != HASH_LEN || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(not_found());
    }
    super::refuse_admin_token(app, req.headers())?;
    let tenant = key::tenant(req.headers());
    // The conversation: the one the hash was answered for, else the
    // affinity's (another replica answered it).
    let (key, query) = match recall(&hash) {
        Some((key, query)) => (key, query),
        None => {
            let headers = with_conversation(app, req.headers())?;
            let name = &app.config.conversation.header;
            let conversation = headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(not_found)?
                .to_string();
            let key = ConvKey {
                tenant: tenant.clone(),
                conversation,
            };
            (key, String::new())
        }
    };
    if key.tenant != tenant || !app.archive.enabled() {
        return Err(not_found());
    }
    let mut hits = app.archive.hits(&key, &query, SEARCH_LIMIT).await;
    if !hits.iter().any(|h| h.row.digest.starts_with(&hash)) && !query.is_empty() {
        hits = app.archive.hits(&key, "", SEARCH_LIMIT).await;
    }
    let hit = hits
        .iter()
        .find(|h| h.row.digest.starts_with(&hash))
        .ok_or_else(not_found)?;
    Ok(json!({
        "hash": hash,
        "original_content": original(hit),
        "conversation": key.conversation,
        "role": hit.row.role,
        "tool_call_id": hit.row.tool_call_id,
    }))
}

/// The archived message's content: its text when it is a string, else
/// the archive's text of it.
fn original(hit: &Hit) -> String {
    match serde_json::from_str::<Value>(&hit.row.message) {
        Ok(m) => match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            _ => message_text(&m),
        },
        Err(_) => hit.row.text.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> Value {
        json!({"role": "user", "content": format!("{HEADING_PREFIX} (3 messages folded):\n\nthe gist")})
    }

    #[test]
    fn claims_only_the_contract_routes() {
        assert!(claims(&Method::POST, "/v1/compress"));
        assert!(claims(&Method::GET, "/v1/retrieve/abc"));
        assert!(!claims(&Method::GET, "/v1/compress"));
        assert!(!claims(&Method::POST, "/v1/chat/completions"));
    }

    #[test]
    fn a_fold_is_laid_row_by_row() {
        let sent: Vec<Value> = (0..5)
            .map(|i| json!({"role": "user", "content": format!("m{i}")}))
            .collect();
        let view = vec![summary(), sent[3].clone(), sent[4].clone()];
        let r = rows(&sent, &view, true);
        assert_eq!(r.messages.len(), 5);
        assert_eq!(r.messages[3..], sent[3..]);
        assert!(message_text(&r.messages[0]).starts_with(HEADING_PREFIX));
        assert!(message_text(&r.messages[1]).contains(&r.hashes[1].0));
        assert_eq!(r.hashes.len(), 3);
        assert_eq!(r.hashes[0].0, hash_of(&sent[0]));
    }

    #[test]
    fn no_summary_answers_the_rows_as_sent() {
        let sent: Vec<Value> = (0..3)
            .map(|i| json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "x"}))
            .collect();
        let r = rows(&sent, &sent, true);
        assert_eq!(r.messages, sent);
        assert!(r.hashes.is_empty());
    }
}
