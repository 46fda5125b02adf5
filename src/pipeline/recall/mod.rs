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
//! - After the last round the upstream is asked once more, without the
//!   tool where the API allows (Anthropic wants it defined while the
//!   history has a `tool_use`).
//! - A broken round (an error status, a cut body, an answer that cannot be
//!   read, recall calls after the last round) is asked once more as the
//!   first request without the tool; when that breaks too, the client gets
//!   an error ([`broken`]). A recall call never reaches the client.
//!
//! Each API reads and writes its own shapes (its `recall.rs` under
//! [`crate::api`]); the rounds are run here, naming none of them.

mod broken;
mod fit;
pub(super) mod inject;
pub(super) mod room;
pub(crate) mod sticky;
mod stream;

use super::prepared::Prepared;
use super::request::ConvRequest;
use super::tap::OnUsage;
use crate::api::Api;
use crate::api::recall::calls::{self, Calls, Carry, RecallTurn};
use crate::api::recall::stream::Round;
use crate::api::recall::{input, push_tool};
use crate::app::App;
use crate::body::{self, Body};
use crate::error::ApiError;
use crate::sse::Framing;
use crate::state::ConvKey;
use crate::upstream::Provider;
use crate::usage::UsageScanner;
use broken::{Answer, Cause};
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Response, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{Map, Value};
use std::sync::Arc;
use tracing::Instrument;

/// Largest whole answer read to look for recall calls.
const MAX_ANSWER: usize = 16 << 20;

/// One request's recall rounds: foldgate's copy of the forwarded request
/// (the recall tool in it) and what the rounds so far added up to.
pub(super) struct Session {
    api: Api,
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
    /// Whether a round broke and the first request went again without the
    /// tool; a second break is the client's error.
    fell_back: bool,
    /// Usage of the rounds before the current one, summed (`null`: none).
    usage: Value,
    /// Reports the first round's prompt tokens for calibration.
    observe: Option<OnUsage>,
    /// The model, for counting what the rounds add.
    model: String,
    /// The window and output reserve the request was planned against.
    window: u32,
    reserve: u32,
    /// Estimated tokens of the request as it stands: the view, the tool,
    /// and every round's calls and results so far.
    used: u32,
}

impl Session {
    /// Offers the recall tool when the request's view hides archived
    /// messages, the conversation may recall, and the request leaves the
    /// model free to choose its tools; takes the view from `prepared`,
    /// with the `injected` blocks placed before their user messages (this
    /// turn's before the last one; `archive.inject_with_tool`; their
    /// tokens already in `prepared`).
    pub fn offer(
        app: &Arc<App>,
        request: &mut ConvRequest,
        prepared: &mut Prepared,
        parts: &Parts,
        injected: &[sticky::Placed],
    ) -> Option<Self> {
        let api = request.api;
        let offered = prepared.view.is_some()
            && request.recall()
            && request.fields().is_some_and(|f| api.recall_offerable(f));
        if !offered {
            return None;
        }
        let key = request.key()?.clone();
        let (window, reserve) = request.limits()?;
        let mut fields = request.view_fields(prepared)?;
        if let (false, Some(items)) = (injected.is_empty(), api.conversation(&mut fields)) {
            sticky::place(items, injected, &|items, text| {
                api.recall().place_recalled(items, text)
            });
        }
        let tool = api.recall().recall_tool();
        let used = prepared.tokens_out.saturating_add(fit::json_tokens(
            app,
            &request.model,
            std::slice::from_ref(&tool),
        ));
        push_tool(&mut fields, tool);
        let first_len = api.conversation(&mut fields).map_or(0, |m| m.len());
        let mut parts = parts.clone();
        parts.headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        app.metrics.recall_offers.inc();
        Some(Self {
            api,
            app: app.clone(),
            provider: request.provider.clone(),
            parts,
            key,
            fields,
            first_len,
            rounds: 0,
            fell_back: false,
            usage: Value::Null,
            observe: None,
            model: request.model.clone(),
            window,
            reserve,
            used,
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
        if let Some(framing) = Framing::of(&head.headers) {
            // Later rounds change the length; the body is chunked.
            let mut head = head;
            head.headers.remove(header::CONTENT_LENGTH);
            let (tx, body) = body::channel(16);
            // In the request's span: its rounds' spans are the request's children.
            let run = stream::run(self, incoming, framing, tx);
            tokio::spawn(
                crate::telemetry::within(crate::telemetry::current(), run).in_current_span(),
            );
            return Ok(Response::from_parts(head, body));
        }
        self.whole(head, incoming).await
    }

    /// Whole answers: read each round's, answer its recall calls, and
    /// return the first answer that has none to answer. A round whose
    /// answer is cut, unreadable or still calls the tool after the last
    /// round falls back ([`broken`]).
    async fn whole(
        mut self,
        mut head: http::response::Parts,
        mut incoming: Incoming,
    ) -> Result<Response<Body>, ApiError> {
        loop {
            let read = Limited::new(incoming, MAX_ANSWER)
                .collect()
                .await
                .map(|c| c.to_bytes());
            let bytes = match read {
                Ok(bytes) => bytes,
                Err(e) => {
                    let detail = format!("reading an answer: {e}");
                    (head, incoming) = self.fall_back(Cause::Cut, &detail).await?;
                    continue;
                }
            };
            // The first answer calibrates (and goes on the trace); a recall
            // round's answer goes on the trace only.
            let observe = self.observe.take();
            if observe.is_some() || crate::telemetry::enabled() {
                let mut scanner = UsageScanner::with(false, self.api.usage());
                scanner.feed(&bytes);
                let tokens = scanner.finish();
                if !tokens.is_empty() {
                    match observe {
                        Some(observe) => observe(tokens),
                        None => crate::telemetry::record_round_usage(tokens),
                    }
                }
            }
            let Some(mut answer) = input::parse(&bytes).filter(Value::is_object) else {
                let detail = format!("{} bytes that are not a JSON object", bytes.len());
                (head, incoming) = self.fall_back(Cause::Unparseable, &detail).await?;
                continue;
            };
            let calls = self.calls(&answer);
            if calls.recall_only() && self.last() {
                let detail = "the answer still calls the recall tool";
                (head, incoming) = self.fall_back(Cause::RecallAfterLast, detail).await?;
                continue;
            }
            if calls.recall_only() {
                let calls = calls.recalls();
                let messages = self.api.recall().answer_messages(&answer, &calls);
                let usage = answer.get(self.api.usage_field()).cloned();
                let turn = RecallTurn {
                    messages,
                    calls,
                    usage,
                    carry: Carry::default(),
                };
                (head, incoming) = self.next_round(turn).await?;
                continue;
            }
            self.api.recall().hide(&mut answer);
            if let Some(answer) = answer.as_object_mut().filter(|_| !self.usage.is_null()) {
                let field = self.api.usage_field();
                let last = answer.get(field).cloned().unwrap_or_default();
                answer.insert(field.into(), calls::summed(&self.usage, &last));
            }
            let bytes =
                serde_json::to_vec(&answer).map_err(|e| ApiError::Internal(e.to_string()))?;
            return Ok(with_body(head, Bytes::from(bytes)));
        }
    }

    /// The tool calls of a whole answer.
    fn calls(&self, answer: &Value) -> Calls {
        self.api.recall().calls(answer)
    }

    /// A reader for the current round's streamed events, continuing what
    /// `carry` says the earlier rounds showed.
    fn stream_round(&self, carry: Carry) -> Box<dyn Round> {
        self.api
            .recall()
            .stream_round(self.last(), self.rounds > 0, carry)
    }

    /// The event that ends a stream foldgate cannot finish.
    fn error_event(&self, message: &str) -> Bytes {
        self.api.error_event(message)
    }

    /// Whether the current round's request can no longer offer recall.
    fn last(&self) -> bool {
        self.rounds >= self.app.config.archive.recall_rounds
    }

    /// Answers the turn's recall calls from the archive, appends the
    /// turn's message and the results to the request, and asks the
    /// upstream again; once the rounds are spent, without the tool where
    /// the API allows (Anthropic needs it defined while its history has a
    /// `tool_use`). The model's calls go in with their query bounded, so
    /// a huge argument does not ride along in every later request.
    async fn next_round(&mut self, turn: RecallTurn) -> Result<Answer, ApiError> {
        let span = crate::telemetry::recall_round(self.rounds + 1, turn.calls.len());
        crate::telemetry::within(span, self.round(turn)).await
    }

    /// [`Self::next_round`], in the round's span.
    async fn round(&mut self, mut turn: RecallTurn) -> Result<Answer, ApiError> {
        if let Some(usage) = &turn.usage {
            calls::add_usage(&mut self.usage, usage);
        }
        // This request's fold may have just queued what it archived.
        self.app.archive.flush().await;
        self.api.recall().bound_calls(&mut turn.messages);
        // The round's call message goes in whatever the results take.
        let asked = fit::json_tokens(&self.app, &self.model, &turn.messages);
        let used = self.used.saturating_add(asked);
        let room = room::room(self.window, used, self.reserve);
        let answers = fit::answer(&self.app, &self.key, &self.model, &turn.calls, room).await;
        let m = &self.app.metrics;
        m.recall_calls.inc_by(turn.calls.len() as u64);
        m.recall_shortened.inc_by(answers.shortened);
        m.recall_refused.inc_by(answers.refused);
        let texts = answers.texts;
        let results = self.api.recall().results(&turn.calls, texts);
        self.used = used.saturating_add(fit::json_tokens(&self.app, &self.model, &results));
        if let Some(messages) = self.api.conversation(&mut self.fields) {
            messages.extend(turn.messages);
            messages.extend(results);
        }
        self.rounds += 1;
        if self.last() && !self.api.keeps_recall_tool() {
            self.api.remove_recall_tool(&mut self.fields);
        }
        self.ask().await
    }

    async fn send(&mut self) -> Result<(http::response::Parts, Incoming), ApiError> {
        super::send(&self.app, &self.provider, &self.parts, self.body()?).await
    }
}

/// A response of `head` carrying `bytes`, its length set.
fn with_body(mut head: http::response::Parts, bytes: Bytes) -> Response<Body> {
    head.headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    Response::from_parts(head, body::full(bytes))
}
