//! The summarizer: an LLM call that rewrites a conversation's summary to
//! cover newly folded messages.
//!
//! One fold may take several calls: input larger than the summarizer's own
//! window is folded in sequential chunks; each call retries transport
//! errors, timeouts, 429, 5xx and invalid output with backoff; a model that
//! rejects `response_format` is asked again with a weaker format (and the
//! format it accepts is remembered); `fallback_models` are tried in order.

mod parse;
pub mod prompt;

pub use parse::{InvalidOutput, parse_summary};
pub use prompt::Format;

use crate::body;
use crate::config::SummarizerConfig;
use crate::fold::Summary;
use crate::upstream::Provider;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One model to call, with the credentials to call it with.
#[derive(Debug, Clone)]
pub struct Target {
    /// The provider serving the model.
    pub provider: Arc<Provider>,
    /// The model name.
    pub model: String,
    /// Input budget of one call in tokens (the model's window less the
    /// summary's own room).
    pub input_budget: u32,
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
}

/// The result of one HTTP attempt.
enum Attempt {
    Done(Summary, u64),
    /// Worth another try after a backoff.
    Retry(String),
    /// The model answered in a way retries will not fix.
    Fatal(String),
    /// Try again at once with what was just learned.
    Adjusted,
}

impl Summarizer {
    /// A summarizer with the given settings.
    pub fn new(config: SummarizerConfig) -> Self {
        Self {
            config,
            learned: Mutex::new(HashMap::new()),
        }
    }

    /// The format currently used for `model` (for tests and metrics).
    pub fn format_for(&self, model: &str) -> Format {
        self.learned(model).format
    }

    /// Folds `messages` into `current`, trying `targets` in order. `tokens`
    /// estimates one message's tokens, for chunking.
    pub async fn summarize(
        &self,
        targets: &[Target],
        credentials: &Credentials,
        current: Option<&Summary>,
        messages: &[&Value],
        tokens: &(dyn Fn(&Value) -> u32 + Sync),
    ) -> Result<Outcome, SummarizeError> {
        let started = Instant::now();
        let mut errors = Vec::new();
        for target in targets {
            match self
                .summarize_with(target, credentials, current, messages, tokens)
                .await
            {
                Ok((summary, calls, spent)) => {
                    return Ok(Outcome {
                        summary,
                        model: target.model.clone(),
                        calls,
                        tokens: spent,
                        latency: started.elapsed(),
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
        target: &Target,
        credentials: &Credentials,
        current: Option<&Summary>,
        messages: &[&Value],
        tokens: &(dyn Fn(&Value) -> u32 + Sync),
    ) -> Result<(Summary, u32, u64), String> {
        let mut summary = current.cloned();
        let (mut calls, mut spent) = (0u32, 0u64);
        for chunk in chunks(
            messages,
            target.input_budget,
            summary_tokens(summary.as_ref()),
            tokens,
        ) {
            let user = prompt::user_prompt(summary.as_ref(), &prompt::transcript(chunk));
            let (next, c, t) = self.call_model(target, credentials, &user).await?;
            summary = Some(next);
            calls += c;
            spent += t;
        }
        summary
            .map(|s| (s, calls, spent))
            .ok_or_else(|| "nothing to summarize".to_string())
    }

    /// Calls one model until it yields a valid summary or attempts run out.
    async fn call_model(
        &self,
        target: &Target,
        credentials: &Credentials,
        user: &str,
    ) -> Result<(Summary, u32, u64), String> {
        let (mut retries, mut calls) = (0u32, 0u32);
        loop {
            let learned = self.learned(&target.model);
            let body = prompt::request_body(
                &target.model,
                user.to_string(),
                learned.format,
                self.config.max_summary_tokens,
                learned.completion_param,
            );
            calls += 1;
            match self.attempt(target, credentials, body, learned).await {
                Attempt::Done(summary, spent) => return Ok((summary, calls, spent)),
                Attempt::Adjusted if calls < 8 => continue,
                Attempt::Adjusted => return Err("the model rejects every request format".into()),
                Attempt::Fatal(e) => return Err(e),
                Attempt::Retry(e) => {
                    if retries >= self.config.retries {
                        return Err(format!("{e} (after {calls} attempts)"));
                    }
                    let delay = self.config.backoff.saturating_mul(1 << retries.min(10));
                    tracing::debug!(model = %target.model, error = %e, ?delay, "summarizer retry");
                    retries += 1;
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// One HTTP call, classified.
    async fn attempt(
        &self,
        target: &Target,
        credentials: &Credentials,
        body: Value,
        learned: Learned,
    ) -> Attempt {
        let call = post(target, credentials, body, self.config.timeout);
        let (status, bytes) = match tokio::time::timeout(self.config.timeout, call).await {
            Err(_) => return Attempt::Retry(format!("timed out after {:?}", self.config.timeout)),
            Ok(Err(e)) => return Attempt::Retry(e),
            Ok(Ok(answer)) => answer,
        };
        if status.is_success() {
            return match read_completion(&bytes) {
                Ok((text, spent)) => match parse_summary(&text) {
                    Ok(summary) => Attempt::Done(summary, spent),
                    Err(e) => Attempt::Retry(e.to_string()),
                },
                Err(e) => Attempt::Retry(e),
            };
        }
        let text = String::from_utf8_lossy(&bytes).to_lowercase();
        let rejects_format = text.contains("response_format") || text.contains("json_schema");
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
        let detail = format!("status {status}: {}", snippet(&bytes));
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

/// POSTs a chat completion to the target and reads the whole answer.
async fn post(
    target: &Target,
    credentials: &Credentials,
    body: Value,
    timeout: Duration,
) -> Result<(StatusCode, Bytes), String> {
    let mut req = Request::post("/v1/chat/completions")
        .header(header::CONTENT_TYPE, "application/json")
        .body(body::full(body.to_string()))
        .map_err(|e| e.to_string())?;
    for (name, value) in &credentials.headers {
        req.headers_mut().insert(name, value.clone());
    }
    let response = target
        .provider
        .send(req, timeout, credentials.drop_client_auth)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, bytes))
}

/// The assistant text and token usage of a chat completion.
fn read_completion(bytes: &[u8]) -> Result<(String, u64), String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("answer is not JSON: {e}"))?;
    let text = v
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("answer has no message content: {}", snippet(bytes)))?;
    let spent = v
        .pointer("/usage/total_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Ok((text.to_string(), spent))
}

/// The start of a body, for error messages.
fn snippet(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]);
    text.replace('\n', " ")
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
