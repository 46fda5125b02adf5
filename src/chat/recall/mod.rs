//! The recall tool, run by foldgate: a conversation whose view hides
//! archived messages gets one more function tool, `foldgate_recall`. When
//! the model calls it, foldgate searches the conversation's archive,
//! appends the call and its result to its own copy of the request and asks
//! the upstream again, at most `archive.recall_rounds` times; the client
//! sees only the final answer, with usage summed over the rounds.
//!
//! - A whole answer is read before it is returned (bounded).
//! - A stream passes through unbuffered until a tool-call delta names the
//!   recall tool; only then is the rest of that round held ([`stream`]).
//! - An answer that calls the recall tool *and* client tools goes to the
//!   client with the recall calls removed (the client's calls renumbered);
//!   foldgate runs no search for it, so the client's calls are never held
//!   back or replayed.
//! - After the last round the tool is taken out of the request and the
//!   upstream is asked once more; a recall call it still makes is removed.
//! - A round the upstream fails is retried once as the first request
//!   without the tool; that answer is the client's, whatever it is.
//!
//! Chat completions only for now ([`speaks`]).

mod answer;
mod stream;

use super::codec::Api;
use super::request::ChatRequest;
use super::tap::OnUsage;
use super::turn::Prepared;
use crate::app::App;
use crate::body::{self, Body};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::state::ConvKey;
use crate::upstream::Provider;
use answer::Call;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Response, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{Map, Value};
use std::sync::Arc;

/// Largest whole answer read to look for recall calls.
const MAX_ANSWER: usize = 16 << 20;

/// Whether foldgate can run the recall tool on this API.
pub(super) fn speaks(api: Api) -> bool {
    api == Api::Chat
}

/// One request's recall rounds: foldgate's copy of the forwarded request
/// (the recall tool in it) and what the rounds so far added up to.
pub(super) struct Session {
    app: Arc<App>,
    provider: Arc<Provider>,
    /// The client's request head, asking for an uncompressed answer.
    parts: Parts,
    key: ConvKey,
    fields: Map<String, Value>,
    /// Messages in the first round's request (a fallback returns to them).
    first_len: usize,
    /// Recall rounds answered so far.
    rounds: u32,
    /// Usage of the rounds before the current one, summed (`null`: none).
    usage: Value,
    /// Reports the first round's prompt tokens for calibration.
    observe: Option<OnUsage>,
}

impl Session {
    /// Offers the recall tool when the request's view hides archived
    /// messages, the conversation may recall, and the request leaves the
    /// model free to choose its tools; takes the view from `prepared`.
    pub fn offer(
        app: &Arc<App>,
        request: &mut ChatRequest,
        prepared: &mut Prepared,
        parts: &Parts,
    ) -> Option<Self> {
        let offered = prepared.view.is_some()
            && request.recall()
            && request.fields().is_some_and(answer::offerable);
        if !offered {
            return None;
        }
        let key = request.key()?.clone();
        let mut fields = request.view_fields(prepared)?;
        answer::add_tool(&mut fields);
        let first_len = messages(&fields).map_or(0, Vec::len);
        let mut parts = parts.clone();
        parts.headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        Metrics::inc(&app.metrics.recall_offers);
        Some(Self {
            app: app.clone(),
            provider: request.provider.clone(),
            parts,
            key,
            fields,
            first_len,
            rounds: 0,
            usage: Value::Null,
            observe: None,
        })
    }

    /// The request head to send.
    pub fn parts(&self) -> &Parts {
        &self.parts
    }

    /// The request body to send now.
    pub fn body(&self) -> Result<Bytes, ApiError> {
        serde_json::to_vec(&self.fields)
            .map(Bytes::from)
            .map_err(|e| ApiError::Internal(e.to_string()))
    }

    /// The client's response to the first round's successful answer: read
    /// whole, or streamed by a task of its own.
    pub async fn respond(
        mut self,
        head: http::response::Parts,
        incoming: Incoming,
        observe: OnUsage,
    ) -> Result<Response<Body>, ApiError> {
        self.observe = Some(observe);
        if super::is_sse(&head.headers) {
            let (tx, body) = body::channel(16);
            tokio::spawn(stream::run(self, incoming, tx));
            return Ok(Response::from_parts(head, body));
        }
        self.whole(head, incoming).await
    }

    /// Whole answers: read each round's, answer its recall calls, and
    /// return the first answer that has none to answer.
    async fn whole(
        mut self,
        mut head: http::response::Parts,
        mut incoming: Incoming,
    ) -> Result<Response<Body>, ApiError> {
        loop {
            let bytes = Limited::new(incoming, MAX_ANSWER)
                .collect()
                .await
                .map(|c| c.to_bytes())
                .map_err(|e| self.unreachable(format!("reading an answer: {e}")))?;
            let parsed = serde_json::from_slice::<Value>(&bytes).ok();
            let Some(mut answer) = parsed.filter(|_| head.status.is_success()) else {
                return Ok(with_body(head, bytes));
            };
            self.report_prompt(answer.get("usage"));
            let message = answer.pointer("/choices/0/message").unwrap_or(&Value::Null);
            let calls = answer::Calls::of_message(message);
            if self.wants_recall(&calls) {
                let content = message.get("content").and_then(Value::as_str).unwrap_or("");
                let content = content.to_string();
                (head, incoming) = self
                    .next_round(&content, calls.recalls(), answer.get("usage"))
                    .await?;
                continue;
            }
            answer::hide_in_answer(&mut answer);
            self.sum_usage(answer.as_object_mut());
            let bytes =
                serde_json::to_vec(&answer).map_err(|e| ApiError::Internal(e.to_string()))?;
            return Ok(with_body(head, Bytes::from(bytes)));
        }
    }

    /// Whether foldgate answers this round's calls: they are all recall
    /// calls, and the round offered the tool.
    fn wants_recall(&self, calls: &answer::Calls) -> bool {
        !self.last() && !calls.recall_indices().is_empty() && !calls.any_client()
    }

    /// Whether the current round's request goes without the tool.
    fn last(&self) -> bool {
        self.rounds >= self.app.config.archive.recall_rounds
    }

    /// Reports the prompt tokens of the first round's `usage`; called at
    /// the end of every round, only the first one counts.
    fn report_prompt(&mut self, usage: Option<&Value>) {
        let tokens = usage
            .and_then(|u| u.get("prompt_tokens"))
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok());
        if let (Some(tokens), Some(observe)) = (tokens, self.observe.take()) {
            observe(tokens);
        }
        self.observe = None;
    }

    /// Puts the earlier rounds' usage into the final answer's `usage`.
    fn sum_usage(&self, answer: Option<&mut Map<String, Value>>) {
        let Some(answer) = answer.filter(|_| !self.usage.is_null()) else {
            return;
        };
        let mut total = self.usage.clone();
        if let Some(last) = answer.get("usage") {
            answer::add_usage(&mut total, last);
        }
        answer.insert("usage".into(), total);
    }

    /// Answers `calls` from the archive, appends the assistant's message
    /// (`content` and the calls) and the results to the request, and asks
    /// the upstream again; without the tool once the rounds are spent.
    async fn next_round(
        &mut self,
        content: &str,
        calls: Vec<Call>,
        usage: Option<&Value>,
    ) -> Result<(http::response::Parts, Incoming), ApiError> {
        if let Some(usage) = usage {
            answer::add_usage(&mut self.usage, usage);
        }
        let budget = self.app.config.archive.recall_tokens;
        // This request's fold may have just queued what it archived.
        self.app.archive.flush().await;
        let mut added = vec![answer::assistant_message(content, &calls)];
        for call in &calls {
            let excerpts = match call.query() {
                Some(query) => Some(self.app.archive.search(&self.key, &query, budget).await),
                None => None,
            };
            tracing::debug!(conversation = %self.key.conversation, query = call.query(), hits = excerpts.as_ref().map(Vec::len), "recall");
            added.push(call.result(excerpts.as_deref()));
        }
        self.app
            .metrics
            .recall_calls
            .fetch_add(calls.len() as u64, std::sync::atomic::Ordering::Relaxed);
        if let Some(messages) = messages_mut(&mut self.fields) {
            messages.extend(added);
        }
        self.rounds += 1;
        if self.last() {
            answer::remove_tool(&mut self.fields);
        }
        match self.send().await {
            Ok((head, incoming)) if head.status.is_success() => Ok((head, incoming)),
            failed => {
                let why = failed.map_or_else(|e| e.to_string(), |(h, _)| h.status.to_string());
                tracing::warn!(conversation = %self.key.conversation, round = self.rounds, error = %why,
                    "a recall round failed; asking once more without the tool");
                self.fallback().await
            }
        }
    }

    /// The first request again, without the tool: the answer a failed
    /// recall round leaves the client.
    async fn fallback(&mut self) -> Result<(http::response::Parts, Incoming), ApiError> {
        if let Some(messages) = messages_mut(&mut self.fields) {
            messages.truncate(self.first_len);
        }
        answer::remove_tool(&mut self.fields);
        self.rounds = self.app.config.archive.recall_rounds;
        self.send().await
    }

    async fn send(&mut self) -> Result<(http::response::Parts, Incoming), ApiError> {
        super::send(&self.app, &self.provider, &self.parts, self.body()?).await
    }

    fn unreachable(&self, detail: String) -> ApiError {
        ApiError::UpstreamUnreachable {
            provider: self.provider.name.clone(),
            detail,
        }
    }
}

fn messages(fields: &Map<String, Value>) -> Option<&Vec<Value>> {
    fields.get("messages").and_then(Value::as_array)
}

fn messages_mut(fields: &mut Map<String, Value>) -> Option<&mut Vec<Value>> {
    fields.get_mut("messages").and_then(Value::as_array_mut)
}

/// A response of `head` carrying `bytes`, its length set.
fn with_body(mut head: http::response::Parts, bytes: Bytes) -> Response<Body> {
    head.headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    Response::from_parts(head, body::full(bytes))
}
