//! The summarizer: an LLM call that rewrites a conversation's summary to
//! cover newly folded messages.
//!
//! One fold may take several calls: input larger than the summarizer's own
//! window is folded in sequential chunks; each call retries transport
//! errors, timeouts, 429, 5xx and invalid output with backoff; a model that
//! rejects `response_format` is asked again with a weaker format (and the
//! format it accepts is remembered); `fallback_models` are tried in order.
//! Output that cannot be used is never asked for again with the identical
//! request: the retry says what was wrong, and output cut off at the token
//! limit gets a larger limit (its complete items are kept when the JSON can
//! be closed). Items naming identifiers the model was not shown are dropped
//! ([`check`]), and so are facts, goals, decisions and open items that what
//! it was shown does not support ([`ground`]). Calls per provider are
//! bounded (`max_concurrent`).

mod check;
mod error;
mod ground;
mod parse;
pub mod prompt;

pub use check::drop_inventions;
pub use ground::{Drops, drop_unsupported};
pub use parse::{InvalidOutput, parse_summary, parse_truncated};
pub use prompt::Format;

use foldgate_core::{config, fold, stem};
use foldgate_wire::{api, body, telemetry, upstream};

use crate::api::summary::SummaryCall;
use crate::config::SummarizerConfig;
use crate::fold::Summary;
use crate::upstream::Provider;
use backon::{BackoffBuilder, ExponentialBuilder};
use bytes::Bytes;
use error::CallError;
use http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// One model to call, with the credentials to call it with.
#[derive(Debug, Clone)]
pub struct Target {
    /// The provider serving the model.
    pub provider: Arc<Provider>,
    /// The model name.
    pub model: String,
    /// Input budget of one call in tokens (the model's window less the
    /// instructions and the answer's limit).
    pub input_budget: u32,
    /// The model's context window: a retry after a cut-off answer raises
    /// the limit only as far as the prompt leaves room in it.
    pub window: u32,
    /// The folded conversation's route tail, when the call goes to its
    /// own provider (see [`crate::api::Provider::summary_path`]).
    pub conversation: Option<Arc<str>>,
}

/// Credentials forwarded to the summarizer: the client's own
/// `Authorization`/`x-api-key` (a provider key replaces them upstream).
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// The headers to send.
    pub headers: HeaderMap,
    /// Whether the client's credential is foldgate's own (`server.api_keys`).
    pub drop_client_auth: bool,
}

/// A successful fold's summary and what it cost.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The new summary.
    pub summary: Summary,
    /// The model that wrote it.
    pub model: String,
    /// HTTP calls made, retries and chunks included.
    pub calls: u32,
    /// Prompt plus completion tokens the summarizer reported.
    pub tokens: u64,
    /// Wall time of the whole fold.
    pub latency: Duration,
    /// Items dropped because they named identifiers the model was not shown.
    pub inventions: u32,
    /// Items dropped because what the model was shown does not support them.
    pub unsupported: u32,
    /// Items dropped for tying a value to a subject it was never said with.
    pub swaps: u32,
    /// Completed items no sentence says were done, decisions none takes.
    pub unconfirmed: u32,
    /// Answers cut off at the token limit (kept in part, or asked again).
    pub truncated: u32,
}

/// What one model's calls produced.
#[derive(Debug, Default)]
struct Spent {
    calls: u32,
    tokens: u64,
    inventions: u32,
    unsupported: u32,
    swaps: u32,
    unconfirmed: u32,
    truncated: u32,
}

/// Why no summary could be written.
#[derive(Debug, Clone, thiserror::Error)]
#[error("summarizer failed: {0}")]
pub struct SummarizeError(pub String);

/// What a model accepts, learned from its rejections.
#[derive(Debug, Clone, Copy)]
struct Learned {
    format: Format,
    completion_param: bool,
}

/// Calls the summarizer model(s); shared by all requests.
#[derive(Debug)]
pub struct Summarizer {
    config: SummarizerConfig,
    learned: Mutex<HashMap<String, Learned>>,
    /// Bounds on calls in flight, per provider.
    slots: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// The result of one HTTP attempt.
enum Attempt {
    /// A summary, the tokens spent, and whether it was cut off.
    Done(Summary, u64, bool),
    /// Worth another try after a backoff.
    Retry(CallError),
    /// The answer could not be used; ask again saying why (with a larger
    /// limit when it was cut off).
    Invalid { error: String, truncated: bool },
    /// The model answered in a way retries will not fix.
    Fatal(CallError),
    /// Try again at once with what was just learned.
    Adjusted,
}

impl Summarizer {
    /// A summarizer with the given settings.
    pub fn new(config: SummarizerConfig) -> Self {
        Self {
            config,
            learned: Mutex::new(HashMap::new()),
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The format currently used for `model` (for tests and metrics).
    pub fn format_for(&self, model: &str) -> Format {
        self.learned(model).format
    }

    /// Folds `messages` into `current`, trying `targets` in order. `tokens`
    /// estimates one message's tokens, for chunking; `output_tokens` caps
    /// each answer.
    pub async fn summarize(
        &self,
        targets: &[Target],
        credentials: &Credentials,
        current: Option<&Summary>,
        messages: &[&Value],
        tokens: &(dyn Fn(&Value) -> u32 + Sync),
        output_tokens: u32,
    ) -> Result<Outcome, SummarizeError> {
        let started = Instant::now();
        let mut errors = Vec::new();
        for target in targets {
            let job = Job {
                target,
                credentials,
                output_tokens,
            };
            match self.summarize_with(&job, current, messages, tokens).await {
                Ok((summary, spent)) => {
                    return Ok(Outcome {
                        summary,
                        model: target.model.clone(),
                        calls: spent.calls,
                        tokens: spent.tokens,
                        latency: started.elapsed(),
                        inventions: spent.inventions,
                        unsupported: spent.unsupported,
                        swaps: spent.swaps,
                        unconfirmed: spent.unconfirmed,
                        truncated: spent.truncated,
                    });
                }
                Err(e) => {
                    tracing::warn!(model = %target.model, error = %e, "summarizer model failed");
                    errors.push(format!("{}: {e}", target.model));
                }
            }
        }
        Err(SummarizeError(errors.join("; ")))
    }

    /// One model, every chunk in sequence.
    async fn summarize_with(
        &self,
        job: &Job<'_>,
        current: Option<&Summary>,
        messages: &[&Value],
        tokens: &(dyn Fn(&Value) -> u32 + Sync),
    ) -> Result<(Summary, Spent), CallError> {
        let mut summary = current.cloned();
        let mut spent = Spent::default();
        for chunk in chunks(
            messages,
            job.target.input_budget,
            summary_tokens(summary.as_ref()),
            tokens,
        ) {
            let user = prompt::user_prompt(summary.as_ref(), &prompt::transcript(chunk));
            let mut next = self.call_model(job, &user, &mut spent).await?;
            // The prompt holds everything the model was shown: the current
            // summary and the transcript.
            spent.inventions += drop_inventions(&mut next, &user);
            let drops = drop_unsupported(&mut next, &user, summary.as_ref());
            spent.unsupported += drops.unsupported;
            spent.swaps += drops.swaps;
            spent.unconfirmed += drops.unconfirmed;
            summary = Some(next);
        }
        summary.map(|s| (s, spent)).ok_or(CallError::Empty)
    }

    /// Calls one model until it yields a valid summary or attempts run out.
    /// A retry after unusable output says what was wrong; one after output
    /// cut off at the limit also doubles the limit (once, and only as far
    /// as the model's window has room: [`retry_limit`]).
    async fn call_model(
        &self,
        job: &Job<'_>,
        user: &str,
        spent: &mut Spent,
    ) -> Result<Summary, CallError> {
        let target = job.target;
        let (mut retries, mut calls, mut unusable) = (0u32, 0u32, 0u32);
        let mut delays = self.delays();
        let mut limit = job.output_tokens;
        let mut hint: Option<String> = None;
        loop {
            let learned = self.learned(&target.model);
            let prompt = match &hint {
                Some(h) => format!("{user}\n\n{h}"),
                None => user.to_string(),
            };
            let call = SummaryCall {
                model: &target.model,
                system: prompt::SYSTEM_PROMPT,
                user: prompt,
                schema: prompt::schema,
                format: learned.format,
                max_tokens: limit,
                completion_param: learned.completion_param,
            };
            let body = (target.provider.api())
                .summary_body(call)
                .ok_or_else(|| no_calls(target))?;
            calls += 1;
            spent.calls += 1;
            let attempt = {
                let _slot = self.slot(&target.provider).acquire_owned().await;
                self.attempt(target, job.credentials, body, learned).await
            };
            let (failure, wait) = match attempt {
                Attempt::Done(summary, tokens, truncated) => {
                    spent.tokens += tokens;
                    spent.truncated += u32::from(truncated);
                    return Ok(summary);
                }
                Attempt::Adjusted if calls < 8 => continue,
                Attempt::Adjusted => return Err(CallError::EveryFormatRejected),
                Attempt::Fatal(e) => return Err(e),
                Attempt::Invalid { error, truncated } => {
                    spent.truncated += u32::from(truncated);
                    unusable += 1;
                    hint = Some(prompt::retry_hint(&error, truncated, unusable));
                    if truncated {
                        limit = retry_limit(limit, job.output_tokens, target.window, user);
                    }
                    (CallError::Unusable(error), false)
                }
                Attempt::Retry(e) => (e, true),
            };
            if retries >= self.config.retries {
                return Err(CallError::GaveUp {
                    failure: Box::new(failure),
                    calls,
                });
            }
            retries += 1;
            // A changed request can go at once; the same one waits.
            if wait {
                let delay = delays.next().unwrap_or(self.config.backoff);
                tracing::debug!(model = %target.model, error = %failure, ?delay, "summarizer retry");
                tokio::time::sleep(delay).await;
            } else {
                tracing::debug!(model = %target.model, error = %failure, "summarizer retry");
            }
        }
    }

    /// Waits between attempts that repeat a request: exponential from
    /// `backoff`, with jitter so clients that failed together do not retry
    /// together, capped at a minute.
    fn delays(&self) -> impl Iterator<Item = Duration> {
        ExponentialBuilder::default()
            .with_min_delay(self.config.backoff)
            .with_max_delay(Duration::from_secs(60).max(self.config.backoff))
            .with_factor(2.0)
            .with_jitter()
            .with_max_times(usize::try_from(self.config.retries).unwrap_or(usize::MAX))
            .build()
    }

    /// The provider's bound on calls in flight.
    fn slot(&self, provider: &Provider) -> Arc<Semaphore> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let limit = match self.config.max_concurrent {
            0 if provider.is_local() => 1,
            0 => 4,
            n => n,
        };
        slots
            .entry(provider.name.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(limit)))
            .clone()
    }

    /// One HTTP call, classified.
    async fn attempt(
        &self,
        target: &Target,
        credentials: &Credentials,
        body: Value,
        learned: Learned,
    ) -> Attempt {
        let api = target.provider.api();
        let span = crate::telemetry::summarizer_call(api, &target.model);
        let call =
            crate::telemetry::within(span, post(target, credentials, body, self.config.timeout));
        let (status, bytes) = match tokio::time::timeout(self.config.timeout, call).await {
            Err(_) => return Attempt::Retry(CallError::Timeout(self.config.timeout)),
            Ok(Err(e)) => return Attempt::Retry(e),
            Ok(Ok(answer)) => answer,
        };
        if status.is_success() {
            return match read_completion(target.provider.api(), &bytes) {
                Ok(answer) => classify(&answer),
                Err(e) => Attempt::Retry(e),
            };
        }
        let text = String::from_utf8_lossy(&bytes).to_lowercase();
        let rejects_format = target.provider.api().rejects_format(&text);
        if rejects_format && learned.format != Format::Instructions {
            if let Some(weaker) = learned.format.downgrade() {
                self.remember(
                    &target.model,
                    Learned {
                        format: weaker,
                        ..learned
                    },
                );
                tracing::info!(model = %target.model, format = ?weaker, "summarizer model rejected the response format; downgrading");
                return Attempt::Adjusted;
            }
        }
        if status == StatusCode::BAD_REQUEST
            && !learned.completion_param
            && text.contains("max_completion_tokens")
        {
            self.remember(
                &target.model,
                Learned {
                    completion_param: true,
                    ..learned
                },
            );
            return Attempt::Adjusted;
        }
        let detail = CallError::Status {
            status,
            body: snippet(&bytes),
        };
        if status == StatusCode::TOO_MANY_REQUESTS
            || status.is_server_error()
            || status == StatusCode::REQUEST_TIMEOUT
        {
            Attempt::Retry(detail)
        } else {
            Attempt::Fatal(detail)
        }
    }

    fn learned(&self, model: &str) -> Learned {
        let map = self.learned.lock().unwrap_or_else(|p| p.into_inner());
        map.get(model).copied().unwrap_or(Learned {
            format: Format::JsonSchema,
            completion_param: false,
        })
    }

    fn remember(&self, model: &str, learned: Learned) {
        let mut map = self.learned.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(model.to_string(), learned);
    }
}

/// Why a provider gets no summarizer call.
fn no_calls(target: &Target) -> CallError {
    CallError::NoApi(target.provider.name.clone())
}

/// POSTs the call to the target, on the route of the API its provider
/// speaks, and reads the whole answer.
async fn post(
    target: &Target,
    credentials: &Credentials,
    body: Value,
    timeout: Duration,
) -> Result<(StatusCode, Bytes), CallError> {
    let conversation = target.conversation.as_deref();
    let path = target
        .provider
        .api()
        .summary_path(&target.model, conversation);
    let mut req = Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body::full(body.to_string()))?;
    for (name, value) in &credentials.headers {
        req.headers_mut().insert(name, value.clone());
    }
    let span = crate::telemetry::current();
    crate::telemetry::inject(span.as_ref(), req.headers_mut());
    let response = target
        .provider
        .send_tail(req, timeout, credentials.drop_client_auth)
        .await?;
    let status = response.status();
    crate::telemetry::record_status(span.as_ref(), status);
    let bytes = response.into_body().collect().await?.to_bytes();
    Ok((status, bytes))
}

/// One summarizer call's model, provider and output limit.
struct Job<'a> {
    target: &'a Target,
    credentials: &'a Credentials,
    output_tokens: u32,
}

/// What a summarizer call answered.
struct Answer {
    text: String,
    /// Prompt plus completion tokens.
    tokens: u64,
    /// `finish_reason` was `length`: the output was cut off at the limit.
    cut_off: bool,
}

/// A successful answer as a summary, a partial one, or why it is unusable.
fn classify(answer: &Answer) -> Attempt {
    match parse_summary(&answer.text) {
        Ok(summary) => Attempt::Done(summary, answer.tokens, false),
        Err(_) if answer.cut_off => match parse_truncated(&answer.text) {
            Some(summary) => Attempt::Done(summary, answer.tokens, true),
            None => Attempt::Invalid {
                error: "the answer was cut off at the token limit".into(),
                truncated: true,
            },
        },
        Err(e) => Attempt::Invalid {
            error: e.to_string(),
            truncated: false,
        },
    }
}

/// The text, token usage and whether the output was cut off, as the API
/// of the provider that answered reads its answer
/// ([`crate::api::Provider::summary_answer`]).
fn read_completion(api: crate::api::Api, bytes: &[u8]) -> Result<Answer, CallError> {
    let v: Value = serde_json::from_slice(bytes).map_err(CallError::NotJson)?;
    let answer = api.summary_answer(&v);
    let text = answer
        .text
        .ok_or_else(|| CallError::NoContent(snippet(bytes)))?;
    Ok(Answer {
        text,
        tokens: answer.tokens,
        cut_off: answer.cut_off,
    })
}

/// The start of a body, for error messages.
fn snippet(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]);
    text.replace('\n', " ")
}

/// The answer's limit on a retry after a cut-off answer: twice the last
/// (at most twice the first), as far as the window leaves room beside the
/// prompt (counted at three bytes a token, more than a tokenizer counts),
/// and never below the last.
fn retry_limit(last: u32, first: u32, window: u32, user: &str) -> u32 {
    let prompt = (prompt::SYSTEM_PROMPT.len() + user.len()) / 3;
    let room = window.saturating_sub(u32::try_from(prompt).unwrap_or(u32::MAX));
    last.saturating_mul(2)
        .min(first.saturating_mul(2))
        .min(room)
        .max(last)
}

/// Rough tokens of a summary as the prompt carries it.
fn summary_tokens(summary: Option<&Summary>) -> u32 {
    summary.map_or(0, |s| {
        u32::try_from(s.render(0).len() / 3).unwrap_or(u32::MAX)
    })
}

/// Splits `messages` into runs whose tokens fit `budget` beside the current
/// summary. A message larger than the budget gets a chunk of its own.
fn chunks<'m, 'v>(
    messages: &'m [&'v Value],
    budget: u32,
    summary: u32,
    tokens: &(dyn Fn(&Value) -> u32 + Sync),
) -> Vec<&'m [&'v Value]> {
    // The summary grows as chunks fold in; leave it room on every call.
    let room = u64::from(budget.saturating_sub(summary.max(budget / 8)).max(1));
    let mut out = Vec::new();
    let (mut start, mut used) = (0usize, 0u64);
    for (i, message) in messages.iter().enumerate() {
        let t = u64::from(tokens(message));
        if i > start && used + t > room {
            out.push(&messages[start..i]);
            start = i;
            used = 0;
        }
        used += t;
    }
    if start < messages.len() {
        out.push(&messages[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_retry_raises_the_limit_only_as_far_as_the_window_has_room() {
        // Room to spare: twice the last limit, at most twice the first.
        assert_eq!(retry_limit(600, 600, 128_000, "short"), 1_200);
        assert_eq!(retry_limit(1_200, 600, 128_000, "short"), 1_200);
        // A prompt filling most of a 6k window: what is left of it.
        let user = "x".repeat(3 * 4_500);
        let prompt = (prompt::SYSTEM_PROMPT.len() + user.len()) / 3;
        let room = 6_000 - u32::try_from(prompt).unwrap();
        assert!(room > 600 && room < 1_200, "{room}");
        assert_eq!(retry_limit(600, 600, 6_000, &user), room);
        // Never below the limit that was cut off.
        assert_eq!(retry_limit(600, 600, 1_000, &user), 600);
    }

    #[test]
    fn chunks_respect_the_budget_and_keep_order() {
        let msgs: Vec<Value> = (0..10)
            .map(|i| json!({"role":"user","content":i.to_string()}))
            .collect();
        let refs: Vec<&Value> = msgs.iter().collect();
        let parts = chunks(&refs, 800, 0, &|_| 30);
        // Room is 800 - 100 = 700 tokens: 23 messages of 30 would fit, so one chunk.
        assert_eq!(parts.len(), 1);
        let parts = chunks(&refs, 100, 0, &|_| 30);
        assert!(parts.iter().all(|c| c.len() <= 3 && !c.is_empty()));
        let flat: Vec<&Value> = parts.iter().flat_map(|c| c.iter().copied()).collect();
        assert_eq!(flat, refs);
        // A giant message still goes, alone.
        let parts = chunks(&refs[..2], 10, 0, &|_| 1000);
        assert_eq!(parts.len(), 2);
    }
}
