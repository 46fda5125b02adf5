//! One chat request's fold decision and, when needed, the fold itself.

use super::key;
use crate::config::{OnFailure, Policy};
use crate::error::ApiError;
use crate::fold::{self, Budget, CannotFit, Decision, FoldChain, FoldPlan, FoldState, Reason, ViewInfo};
use crate::metrics::Metrics;
use crate::proxy::App;
use crate::state::ConvKey;
use crate::summarize::{Credentials, Target};
use crate::tokens::Estimate;
use http::HeaderMap;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Room the summarizer's own prompt takes in its window.
const SUMMARIZER_PROMPT_TOKENS: u32 = 1_000;

/// What to forward, and what the response headers report.
#[derive(Debug)]
pub struct Prepared {
    /// The view to send; `None` sends the client's bytes unchanged.
    pub view: Option<Vec<Value>>,
    /// `none`, `reused` or `new`.
    pub label: &'static str,
    /// Estimated tokens of the client's messages (calibrated).
    pub tokens_in: u32,
    /// Estimated tokens of the forwarded prompt (calibrated).
    pub tokens_out: u32,
    /// The same, uncalibrated, for calibration against upstream usage.
    pub raw_tokens_out: u32,
    /// A note for `x-foldgate-warning` (e.g. the summarizer failed).
    pub warning: Option<String>,
}

/// One request's view of its conversation.
pub struct Turn<'a> {
    app: &'a App,
    model: &'a str,
    provider: &'a str,
    key: Option<ConvKey>,
    messages: &'a [Value],
    policy: Policy,
    budget: Budget,
    estimate: &'a Estimate,
    credentials: Credentials,
}

impl<'a> Turn<'a> {
    /// Gathers what the decision needs.
    pub fn new(
        app: &'a App,
        model: &'a str,
        provider: &'a str,
        headers: &HeaderMap,
        request: &serde_json::Map<String, Value>,
        messages: &'a [Value],
        estimate: &'a Estimate,
    ) -> Self {
        let config = &app.config;
        // A default reserve must not claim most of a small window by itself.
        let explicit = ["max_completion_tokens", "max_tokens"].iter().any(|k| request.get(*k).is_some_and(|v| v.is_u64()));
        let output_reserve = if explicit {
            estimate.output_reserve
        } else {
            estimate.output_reserve.min(estimate.context_window / 4)
        };
        let budget = Budget {
            context_window: estimate.context_window,
            output_reserve,
            overhead: estimate.calibrated(u64::from(estimate.overhead)),
            summary_reserve: config.summarizer.max_summary_tokens,
        };
        let mut auth = HeaderMap::new();
        for name in [http::header::AUTHORIZATION.as_str(), "x-api-key"] {
            if let Some(v) = headers.get(name) {
                auth.insert(name, v.clone());
            }
        }
        Self {
            app,
            model,
            provider,
            key: key::conversation_key(headers, messages, &config.conversation),
            messages,
            policy: config.policy_for(provider, model),
            budget,
            estimate,
            credentials: Credentials { headers: auth, drop_client_auth: !config.server.api_keys.is_empty() },
        }
    }

    /// After the upstream said the prompt is too long: plan again against
    /// a window no larger than `window`, which forces an emergency fold.
    pub fn shrink_window(&mut self, window: u32) {
        self.budget.context_window = self.budget.context_window.min(window.max(1));
    }

    /// Decides, folds if needed, and returns what to forward.
    pub async fn prepare(&self) -> Result<Prepared, ApiError> {
        let chain = self.load().await;
        match self.decide(chain.as_deref()) {
            Decision::NoFold(info) => self.no_fold(&info),
            Decision::CannotFit(c) => self.cannot_fit(&c),
            Decision::Fold(_) => self.fold().await,
        }
    }

    /// Folds under the conversation's lock. A request that waited for
    /// another's fold plans again and usually just reuses that fold.
    async fn fold(&self) -> Result<Prepared, ApiError> {
        let _guard = match &self.key {
            Some(key) => Some(self.app.chat.store.lock(key).await),
            None => None,
        };
        let chain = self.load().await;
        match self.decide(chain.as_deref()) {
            Decision::NoFold(info) => self.no_fold(&info),
            Decision::CannotFit(c) => self.cannot_fit(&c),
            Decision::Fold(plan) => self.run_fold(plan, chain).await,
        }
    }

    async fn load(&self) -> Option<Arc<FoldChain>> {
        match &self.key {
            Some(key) => self.app.chat.store.load(key).await,
            None => None,
        }
    }

    fn decide(&self, chain: Option<&FoldChain>) -> Decision {
        let counter = |m: &Value| self.count(m);
        fold::plan(self.messages, chain, &self.policy, &self.budget, &counter, self.app.config.summary.placement)
    }

    /// Calibrated tokens of one message.
    fn count(&self, message: &Value) -> u32 {
        self.estimate.calibrated(u64::from(self.app.chat.tokens.message_tokens(self.model, message)))
    }

    /// Summarizes the plan's messages and stores the new state.
    async fn run_fold(&self, plan: FoldPlan, chain: Option<Arc<FoldChain>>) -> Result<Prepared, ApiError> {
        let chat = &self.app.chat;
        let to_fold = plan.to_fold(self.messages);
        let raw = |m: &Value| chat.tokens.message_tokens(self.model, m);
        let current = plan.base.as_ref().map(|b| &b.summary);
        let result = chat.summarizer.summarize(&self.targets(), &self.credentials, current, &to_fold, &raw).await;
        let conversation = self.key.as_ref().map(ToString::to_string).unwrap_or_else(|| "-".into());
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(e) => {
                Metrics::inc(&chat.metrics.fold_failures);
                tracing::warn!(
                    target: "foldgate::fold", conversation, reason = plan.reason.as_str(), mode = "inline",
                    folded = to_fold.len(), tokens_before = plan.tokens_before, outcome = "failed", error = %e,
                );
                return match self.app.config.summarizer.on_failure {
                    OnFailure::Error => Err(ApiError::Unavailable(format!(
                        "the conversation needs a fold and the summarizer failed: {e}"
                    ))),
                    OnFailure::Passthrough => self.reuse(plan.base.as_ref(), Some("summarizer failed; forwarded without a new fold")),
                };
            }
        };
        chat.metrics.summarizer_calls.fetch_add(u64::from(outcome.calls), Ordering::Relaxed);
        chat.metrics.summarizer_tokens.fetch_add(outcome.tokens, Ordering::Relaxed);
        chat.metrics.summarizer_ms.fetch_add(outcome.latency.as_millis() as u64, Ordering::Relaxed);
        Metrics::inc(&chat.metrics.folds_new[reason_index(plan.reason)]);
        let state = FoldState::after(&plan, outcome.summary, now_unix());
        let view = self.view_of(Some(&state))?;
        let prepared = self.prepared(Some(view), "new", None);
        tracing::info!(
            target: "foldgate::fold", conversation, reason = plan.reason.as_str(), mode = "inline",
            depth = state.depth, folded = to_fold.len(), tokens_before = plan.tokens_before,
            tokens_after = prepared.tokens_out, summarizer_model = %outcome.model,
            latency_ms = outcome.latency.as_millis() as u64, calls = outcome.calls, outcome = "ok",
        );
        if let Some(key) = &self.key {
            let mut next = chain.map(|c| (*c).clone()).unwrap_or_default();
            next.push(state);
            chat.store.save(key, Arc::new(next)).await;
        }
        Ok(prepared)
    }

    /// The summarizer models to try, in order.
    fn targets(&self) -> Vec<Target> {
        let cfg = &self.app.config.summarizer;
        let provider = self.app.upstreams.by_name(cfg.provider.as_deref().unwrap_or(self.provider));
        let first = cfg.model.as_deref().unwrap_or(self.model);
        std::iter::once(first)
            .chain(cfg.fallback_models.iter().map(String::as_str))
            .map(|model| {
                let window = self.app.chat.tokens.limits(model).context_window;
                Target {
                    provider: provider.clone(),
                    model: model.to_string(),
                    input_budget: window.saturating_sub(cfg.max_summary_tokens + SUMMARIZER_PROMPT_TOKENS).max(256),
                }
            })
            .collect()
    }

    /// Forwards the view of `base` (or the messages unchanged).
    fn reuse(&self, base: Option<&FoldState>, warning: Option<&str>) -> Result<Prepared, ApiError> {
        match base {
            None => Ok(self.prepared(None, "none", warning)),
            Some(state) => {
                Metrics::inc(&self.app.chat.metrics.folds_reused);
                let view = self.view_of(Some(state))?;
                Ok(self.prepared(Some(view), "reused", warning))
            }
        }
    }

    /// Even the smallest valid view overflows the window: refuse clearly
    /// rather than drop a message the summary does not hold.
    fn cannot_fit(&self, c: &CannotFit) -> Result<Prepared, ApiError> {
        Metrics::inc(&self.app.chat.metrics.cannot_fit);
        Err(ApiError::ContextLength(format!(
            "the conversation cannot fit {}'s context window of {} tokens: the messages that must stay verbatim \
             (pinned, the last user message and the most recent ones) need about {} tokens plus {} for the output",
            self.model,
            self.budget.context_window,
            c.smallest.unwrap_or(c.view.tokens),
            self.budget.output_reserve,
        )))
    }

    /// No trigger fired, or one fired without a valid cut (the view fits).
    fn no_fold(&self, info: &ViewInfo) -> Result<Prepared, ApiError> {
        let warning = info.skipped.map(|reason| {
            tracing::debug!(model = self.model, reason = reason.as_str(), "fold trigger fired but no valid cut exists");
            "fold trigger fired but no valid cut exists"
        });
        self.reuse(info.base.as_ref(), warning)
    }

    fn view_of(&self, state: Option<&FoldState>) -> Result<Vec<Value>, ApiError> {
        fold::build_view(self.messages, state, self.app.config.summary.placement)
            .map_err(|e| ApiError::Internal(e.to_string()))
    }

    fn prepared(&self, view: Option<Vec<Value>>, label: &'static str, warning: Option<&str>) -> Prepared {
        let overhead = u64::from(self.estimate.overhead);
        let raw_in = u64::from(self.estimate.raw_input_tokens);
        let raw_out = match &view {
            None => raw_in,
            Some(v) => overhead + v.iter().map(|m| u64::from(self.app.chat.tokens.message_tokens(self.model, m))).sum::<u64>(),
        };
        Prepared {
            view,
            label,
            tokens_in: self.estimate.input_tokens,
            tokens_out: self.estimate.calibrated(raw_out),
            raw_tokens_out: u32::try_from(raw_out).unwrap_or(u32::MAX),
            warning: warning.map(str::to_string),
        }
    }
}

fn reason_index(reason: Reason) -> usize {
    match reason {
        Reason::Emergency => 0,
        Reason::Token => 1,
        Reason::Overflow => 2,
        Reason::Safety => 3,
    }
}

fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
