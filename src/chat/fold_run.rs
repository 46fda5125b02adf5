//! Carrying out a fold: the summarizer call, the new state, the event log.
//! Inline folds run in a task of their own too, so a client that hangs up
//! does not cancel a fold it started.

use super::turn::{Prepared, Turn};
use crate::config::OnFailure;
use crate::error::ApiError;
use crate::fold::{Decision, FoldChain, FoldPlan, FoldState, Reason};
use crate::metrics::Metrics;
use crate::summarize::{Outcome, Target};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Room the summarizer's own prompt takes in its window.
const SUMMARIZER_PROMPT_TOKENS: u32 = 1_000;

/// How a fold was started, for the fold event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Started {
    Inline,
    Background,
}

impl Started {
    fn as_str(self) -> &'static str {
        match self {
            Self::Inline => "inline",
            Self::Background => "background",
        }
    }
}

impl Turn {
    /// Folds while the request waits. With `wait`, a fold already running
    /// for the conversation is awaited up to that long first.
    pub(super) async fn fold_inline(&self, wait: Option<Duration>) -> Result<Prepared, ApiError> {
        let turn = self.clone();
        let task = tokio::spawn(async move { turn.fold_locked(Started::Inline, wait).await });
        task.await
            .map_err(|e| ApiError::Internal(format!("fold task failed: {e}")))?
    }

    /// Takes the conversation's fold lock, plans again (a fold that
    /// finished meanwhile usually makes this one unnecessary) and folds.
    pub(super) async fn fold_locked(
        &self,
        started: Started,
        wait: Option<Duration>,
    ) -> Result<Prepared, ApiError> {
        let _guard = match (&self.data.key, wait) {
            (None, _) => None,
            (Some(key), None) => Some(self.app.chat.store.lock(key).await),
            (Some(key), Some(limit)) => {
                match tokio::time::timeout(limit, self.app.chat.store.lock(key)).await {
                    Ok(guard) => Some(guard),
                    Err(_) => {
                        tracing::warn!(conversation = %key, ?limit, "running fold did not finish in time; folding inline");
                        None
                    }
                }
            }
        };
        let policy = match started {
            Started::Inline => self.data.policy.clone(),
            Started::Background => self.prefold_policy(),
        };
        let chain = self.load().await;
        match self.decide(chain.as_deref(), &policy) {
            Decision::NoFold(info) => self.no_fold(&info),
            Decision::CannotFit(c) => self.cannot_fit(&c),
            Decision::Fold(plan) => self.run_fold(plan, chain, started).await,
        }
    }

    /// Summarizes the plan's messages and stores the new state.
    async fn run_fold(
        &self,
        plan: FoldPlan,
        chain: Option<Arc<FoldChain>>,
        started: Started,
    ) -> Result<Prepared, ApiError> {
        let chat = &self.app.chat;
        let messages = &self.data.messages;
        let to_fold = plan.to_fold(messages);
        let raw = |m: &Value| chat.tokens.message_tokens(&self.data.model, m);
        let current = plan.base.as_ref().map(|b| &b.summary);
        let credentials = &self.data.credentials;
        let result = chat
            .summarizer
            .summarize(&self.targets(), credentials, current, &to_fold, &raw)
            .await;
        let conversation = self
            .data
            .key
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_else(|| "-".into());
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(e) => {
                Metrics::inc(&chat.metrics.fold_failures);
                tracing::warn!(
                    target: "foldgate::fold", conversation, reason = plan.reason.as_str(), mode = started.as_str(),
                    folded = to_fold.len(), tokens_before = plan.tokens_before, outcome = "failed", error = %e,
                );
                return match self.app.config.summarizer.on_failure {
                    OnFailure::Error => Err(ApiError::Unavailable(format!(
                        "the conversation needs a fold and the summarizer failed: {e}"
                    ))),
                    OnFailure::Passthrough => self.reuse(
                        plan.base.as_ref(),
                        Some("summarizer failed; forwarded without a new fold"),
                    ),
                };
            }
        };
        self.count_outcome(&outcome, plan.reason);
        let state = FoldState::after(&plan, outcome.summary, now_unix());
        let view = self.view_of(Some(&state))?;
        let prepared = self.prepared(Some(view), "new", None);
        tracing::info!(
            target: "foldgate::fold", conversation, reason = plan.reason.as_str(), mode = started.as_str(),
            depth = state.depth, folded = to_fold.len(), tokens_before = plan.tokens_before,
            tokens_after = prepared.tokens_out, summarizer_model = %outcome.model,
            latency_ms = outcome.latency.as_millis() as u64, calls = outcome.calls, outcome = "ok",
        );
        if let Some(key) = &self.data.key {
            let mut next = chain.map(|c| (*c).clone()).unwrap_or_default();
            next.push(state);
            chat.store.save(key, Arc::new(next)).await;
        }
        Ok(prepared)
    }

    fn count_outcome(&self, outcome: &Outcome, reason: Reason) {
        let m = &self.app.chat.metrics;
        m.summarizer_calls
            .fetch_add(u64::from(outcome.calls), Ordering::Relaxed);
        m.summarizer_tokens
            .fetch_add(outcome.tokens, Ordering::Relaxed);
        m.summarizer_ms
            .fetch_add(outcome.latency.as_millis() as u64, Ordering::Relaxed);
        let index = match reason {
            Reason::Emergency => 0,
            Reason::Token => 1,
            Reason::Overflow => 2,
            Reason::Safety => 3,
        };
        Metrics::inc(&m.folds_new[index]);
    }

    /// The summarizer models to try, in order.
    fn targets(&self) -> Vec<Target> {
        let cfg = &self.app.config.summarizer;
        let provider = self
            .app
            .upstreams
            .by_name(cfg.provider.as_deref().unwrap_or(&self.data.provider));
        let first = cfg.model.as_deref().unwrap_or(&self.data.model);
        std::iter::once(first)
            .chain(cfg.fallback_models.iter().map(String::as_str))
            .map(|model| {
                let window = self.app.chat.tokens.limits(model).context_window;
                Target {
                    provider: provider.clone(),
                    model: model.to_string(),
                    input_budget: window
                        .saturating_sub(cfg.max_summary_tokens + SUMMARIZER_PROMPT_TOKENS)
                        .max(256),
                }
            })
            .collect()
    }
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
