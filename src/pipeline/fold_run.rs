//! When a request folds and carrying the fold out: the decision's modes
//! (inline, background, postponed), the summarizer call, the ledger, the
//! new state, the event log. Inline folds run in a task of their own too,
//! so a client that hangs up does not cancel a fold it started.

use super::prepared::{Prepared, now_unix};
use super::turn::FoldRequest;
use crate::archive::SpoolFull;
use crate::background::Job;
use crate::config::{Mode, OnFailure};
use crate::error::{ApiError, fold_failed};
use crate::fold::ledger::{Ledger, LedgerUpdate};
use crate::fold::{
    Decision, FailureRecord, FoldChain, FoldPlan, FoldState, PlanCall, Reason, Summary,
};
use crate::state::TurnFold;
use crate::summarize::{Outcome, Target};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// Room the summarizer's own instructions and framing take in its window.
const SUMMARIZER_PROMPT_TOKENS: u32 = 500;

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

impl FoldRequest {
    /// Decides, folds if this request must wait for it, and returns what
    /// to forward; the messages the view compresses are archived first.
    /// `chain` is the conversation's fold chain as the request loaded it.
    pub async fn prepare(&self, chain: Option<Arc<FoldChain>>) -> Result<Prepared, ApiError> {
        let mut prepared = self.decide_and_fold(chain).await?;
        self.archive_compressed(&mut prepared);
        Ok(prepared)
    }

    async fn decide_and_fold(&self, chain: Option<Arc<FoldChain>>) -> Result<Prepared, ApiError> {
        let decision = self.decide(chain.as_deref(), &self.data.policy);
        let background = self.data.policy.mode == Mode::Background && self.data.key.is_some();
        let postponed = self.backing_off();
        match decision {
            Decision::CannotFit(c) => self.cannot_fit(&c),
            Decision::NoFold(info) => {
                if background && !postponed && info.prefold {
                    self.prefold(chain.as_deref());
                }
                self.no_fold(&info)
            }
            Decision::Fold(plan) if postponed && plan.reason != Reason::Emergency => {
                self.postpone(plan.base.as_ref())
            }
            Decision::Fold(plan) if background && plan.reason != Reason::Emergency => {
                // The view still fits: forward it now, fold off the request path.
                self.start_background();
                self.reuse(plan.base.as_ref(), None)
            }
            Decision::Fold(plan) => {
                let wait = (background && plan.reason == Reason::Emergency)
                    .then_some(self.app.config.summarizer.emergency_wait);
                self.fold_inline(wait, plan.base.as_ref()).await
            }
        }
    }

    /// In background mode, once the decision found the view at the
    /// prefold ratio ([`crate::fold::Due::prefold`]): starts a fold, with
    /// the trigger band shifted down to match.
    fn prefold(&self, chain: Option<&FoldChain>) {
        // While a fold runs, this request only becomes the pending one; the
        // fold task plans it afterwards, so it is not planned twice here.
        if self.mark_pending() {
            return;
        }
        if let Decision::Fold(_) = self.decide_background(chain) {
            self.start_background();
        }
    }

    /// When a background fold of this conversation runs, makes this request
    /// the one to fold after it and returns true.
    pub(super) fn mark_pending(&self) -> bool {
        match &self.data.key {
            Some(key) => self.app.background.mark_pending(key, self.background_job()),
            None => false,
        }
    }

    /// Starts a background fold of this request's history (or marks one
    /// pending when a fold of the conversation already runs).
    pub(super) fn start_background(&self) {
        if let Some(key) = &self.data.key {
            self.app.background.start(key, self.background_job());
        }
    }

    /// A background fold of this request's history, logged in the span of
    /// the request that asked for it.
    fn background_job(&self) -> Job {
        let turn = self.clone();
        let span = tracing::Span::current();
        let trace = crate::telemetry::current();
        Box::new(move || {
            let fold = crate::telemetry::fold(trace.as_ref(), "background");
            let job = async move {
                if let Err(e) = turn.fold_locked(Started::Background, None).await {
                    let conversation = turn.data.key.as_ref().map(ToString::to_string);
                    tracing::warn!(conversation, error = %e, "background fold failed");
                }
            };
            Box::pin(crate::telemetry::within(fold, job).instrument(span))
        })
    }

    /// Folds while the request waits, within what is left of the
    /// request's `policy.fold_deadline` (one allowance for every fold the
    /// request waits for); past it the request goes on without the fold
    /// (`base`'s view) as `on_failure` says, and the fold runs on for the
    /// next turn. With `wait`, a fold already running for the conversation
    /// is awaited up to that long first.
    pub(super) async fn fold_inline(
        &self,
        wait: Option<Duration>,
        base: Option<&FoldState>,
    ) -> Result<Prepared, ApiError> {
        let left = self.fold_time.left();
        if left.is_zero() {
            // An earlier fold of this request used the allowance up (and
            // was counted then).
            return self.past_deadline(base);
        }
        let turn = self.clone();
        let fold = async move { turn.fold_locked(Started::Inline, wait).await };
        let span = crate::telemetry::fold(crate::telemetry::current().as_ref(), "inline");
        let task = tokio::spawn(crate::telemetry::within(span, fold).in_current_span());
        let started = Instant::now();
        let joined = tokio::time::timeout(left, task).await;
        self.fold_time.spend(started.elapsed());
        match joined {
            Ok(joined) => {
                joined.map_err(|e| ApiError::Internal(format!("fold task failed: {e}")))?
            }
            Err(_) => {
                self.app.metrics.fold_deadlines.inc();
                self.fold_time.spend(left);
                self.past_deadline(base)
            }
        }
    }

    /// The request's fold deadline has passed with no fold made.
    fn past_deadline(&self, base: Option<&FoldState>) -> Result<Prepared, ApiError> {
        let limit = humantime_serde::re::humantime::format_duration(self.data.policy.fold_deadline);
        let conversation = self.data.key.as_ref().map(ToString::to_string);
        tracing::warn!(target: "foldgate::fold", conversation, deadline = %limit, "no fold within the request's fold deadline; going on without it");
        let why = format!("not done within policy.fold_deadline ({limit})");
        self.not_folded(base, &why, &"the fold goes on in the background")
    }

    /// Takes the conversation's fold lock, plans again (a fold that
    /// finished meanwhile usually makes this one unnecessary) and folds.
    pub(super) async fn fold_locked(
        &self,
        started: Started,
        wait: Option<Duration>,
    ) -> Result<Prepared, ApiError> {
        let asked = Instant::now();
        let mut patient = None;
        loop {
            let guard = self.take_lock(wait, patient).await;
            let chain = self.load().await;
            let decision = match started {
                Started::Inline => self.decide(chain.as_deref(), &self.data.policy),
                Started::Background => self.decide_background(chain.as_deref()),
            };
            // Redis has not answered for this conversation for a while
            // (less than `state.lock_wait`) and the view cannot go on
            // without a fold: another replica cut off too may hold that
            // fold already, or make it. Redis is waited for as another
            // replica's lock is (within `lock_wait` of the first ask), then
            // the fold is planned again from what it holds: folding alone
            // here made the failover test's extra summarizer calls
            // (docs/architecture.md, "What a failover costs").
            if patient.is_none() && self.must_fold_alone(&decision) {
                drop(guard);
                patient = Some(asked);
                continue;
            }
            return self.carry_out(decision, chain, started).await;
        }
    }

    /// The conversation's fold lock (`None` without a key): waiting for
    /// Redis too when `patient` ([`crate::state::Store::lock_awaiting`]),
    /// for at most half the request's fold time left, so the fold still
    /// has the other half; with `wait`, for at most that long, then none.
    async fn take_lock(
        &self,
        wait: Option<Duration>,
        patient: Option<Instant>,
    ) -> Option<crate::state::FoldGuard> {
        let key = self.data.key.as_ref()?;
        let store = &self.app.store;
        let lock = async {
            match patient {
                Some(since) => {
                    let limit = self.fold_time.left() / 2;
                    store.lock_awaiting(key, since, limit).await
                }
                None => store.lock(key).await,
            }
        };
        let Some(limit) = wait else {
            return Some(lock.await);
        };
        match tokio::time::timeout(limit, lock).await {
            Ok(guard) => Some(guard),
            Err(_) => {
                tracing::warn!(conversation = %key, ?limit, "running fold did not finish in time; folding inline");
                None
            }
        }
    }

    /// Whether `decision` is a fold the view cannot go on without that
    /// this replica would make alone, Redis silent for the conversation
    /// (less than `state.lock_wait`).
    fn must_fold_alone(&self, decision: &Decision) -> bool {
        matches!(decision, Decision::Fold(plan) if plan.reason == Reason::Emergency && !plan.restub)
            && self.fold_may_wait()
    }

    /// What the decision made under the fold lock says to do.
    async fn carry_out(
        &self,
        decision: Decision,
        chain: Option<Arc<FoldChain>>,
        started: Started,
    ) -> Result<Prepared, ApiError> {
        match decision {
            Decision::NoFold(info) => self.no_fold(&info),
            Decision::CannotFit(c) => self.cannot_fit(&c),
            // A pending fold queued behind one that just failed waits too.
            Decision::Fold(plan)
                if started == Started::Background
                    && plan.reason != Reason::Emergency
                    && self.backing_off() =>
            {
                self.postpone(plan.base.as_ref())
            }
            Decision::Fold(plan) if plan.restub => self.restub(&plan, chain, started).await,
            // Redis has not answered for this conversation for a while
            // (less than `state.lock_wait`): a fold made now would be this
            // replica's alone, and another replica cut off too may make
            // the same one. A view that can go on without it waits a turn.
            Decision::Fold(plan) if plan.reason != Reason::Emergency && self.fold_may_wait() => {
                self.app.metrics.folds_postponed.inc();
                let why = "fold postponed: the state store does not answer for this conversation";
                self.reuse(plan.base.as_ref(), Some(why))
            }
            Decision::Fold(plan) => self.run_fold(plan, chain, started).await,
        }
    }

    /// Whether a fold of this conversation the request can do without
    /// should wait a turn ([`crate::state::Store::fold_may_wait`]).
    fn fold_may_wait(&self) -> bool {
        self.data
            .key
            .as_ref()
            .is_some_and(|key| self.app.store.fold_may_wait(key))
    }

    /// Carries out a restub ([`FoldPlan::restub`]): the base state with
    /// its stub mark moved, stored without a summarizer call. The messages
    /// it newly shows as stubs are archived before the view is forwarded
    /// ([`Self::prepare`]), as every stub is.
    async fn restub(
        &self,
        plan: &FoldPlan,
        chain: Option<Arc<FoldChain>>,
        started: Started,
    ) -> Result<Prepared, ApiError> {
        let Some(state) = FoldState::restubbed(plan, now_unix()) else {
            return self.reuse(None, None);
        };
        let state = FoldState {
            background: started == Started::Background,
            ..state
        };
        let prepared = self.prepared(Some(&state), TurnFold::Reused, None);
        self.app.metrics.restubs.inc();
        let conversation = self.data.key.as_ref().map(ToString::to_string);
        tracing::info!(
            target: "foldgate::fold", conversation, reason = plan.reason.as_str(), mode = started.as_str(),
            stubs_before = plan.retained.stubs_before, tokens_before = plan.tokens_before,
            tokens_after = prepared.tokens_out, outcome = "restub",
        );
        if let Some(key) = &self.data.key {
            let mut next = chain.map(|c| (*c).clone()).unwrap_or_default();
            next.push(state);
            self.app.store.save(key, Arc::new(next)).await;
        }
        Ok(prepared)
    }

    /// Summarizes the plan's messages, adds the ledger and stores the new
    /// state.
    async fn run_fold(
        &self,
        plan: FoldPlan,
        chain: Option<Arc<FoldChain>>,
        started: Started,
    ) -> Result<Prepared, ApiError> {
        let app = &*self.app;
        let messages = &self.data.messages;
        // Checked before the summarizer call, so a full spool costs no
        // summary that would be thrown away.
        if self.data.key.is_some() {
            if let Err(full) = app.archive.room(&plan.fold, messages, &self.data.ids) {
                return self.vetoed(&plan, started, &full);
            }
        }
        let to_fold = self.to_fold(&plan);
        let result = self.summarize(&plan, &to_fold).await;
        let conversation = self
            .data
            .key
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_else(|| "-".into());
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(e) => {
                self.record_failure(&plan, chain, started, &e).await;
                tracing::warn!(
                    target: "foldgate::fold", conversation, reason = plan.reason.as_str(), mode = started.as_str(),
                    folded = to_fold.len(), tokens_before = plan.tokens_before, outcome = "failed", error = %e,
                );
                return self.not_folded(plan.base.as_ref(), "the summarizer failed", &e.0);
            }
        };
        if let Some(key) = &self.data.key {
            app.background.record_success(key);
        }
        self.count_outcome(&outcome);
        let mut summary = outcome.summary;
        let ledger = self.fit_summary(&plan, &mut summary, &to_fold);
        let state = FoldState {
            api: self.data.api.name().to_string(),
            recall: self.recall(),
            background: started == Started::Background,
            ..FoldState::after(&plan, summary, ledger, now_unix())
        }
        .with_summarizer(&outcome.model, outcome.latency, outcome.calls);
        let prepared = self.prepared(
            Some(&state),
            TurnFold::New,
            pins_warning(&state, &conversation),
        );
        // Archived first: a fold whose messages the archive cannot hold is
        // not made, so nothing leaves the view unarchived.
        let archived = match &self.data.key {
            Some(key) => app
                .archive
                .record(key, &state, &plan.fold, messages, &self.data.ids),
            None => Ok(()),
        };
        if let Err(full) = archived {
            return self.vetoed(&plan, started, &full);
        }
        if let Some(index) = Reason::ALL.iter().position(|&r| r == plan.reason) {
            app.metrics.folds_new[index].inc();
        }
        tracing::info!(
            target: "foldgate::fold", conversation, reason = plan.reason.as_str(), mode = started.as_str(),
            depth = state.depth, rebuild = plan.rebuild, folded = to_fold.len(), tokens_before = plan.tokens_before,
            tokens_after = prepared.tokens_out, ledger_items = state.ledger.len(),
            inventions = outcome.inventions, unsupported = outcome.unsupported, swaps = outcome.swaps,
            unconfirmed = outcome.unconfirmed, summarizer_model = %outcome.model,
            latency_ms = outcome.latency.as_millis() as u64, calls = outcome.calls, outcome = "ok",
        );
        if let Some(key) = &self.data.key {
            let mut next = chain.map(|c| (*c).clone()).unwrap_or_default();
            next.push(state);
            app.store.save(key, Arc::new(next)).await;
        }
        Ok(prepared)
    }

    /// The summarizer's summary of `to_fold`, updating the base's summary
    /// (a rebuild summarizes the raw messages, not the base summary).
    async fn summarize(
        &self,
        plan: &FoldPlan,
        to_fold: &[&Value],
    ) -> Result<Outcome, crate::summarize::SummarizeError> {
        let app = &*self.app;
        let raw = |m: &Value| app.tokens.message_tokens(&self.data.model, m);
        let current = plan
            .base
            .as_ref()
            .filter(|_| !plan.rebuild)
            .map(|b| &b.summary);
        app.summarizer
            .summarize(
                &self.targets(),
                &self.data.credentials,
                current,
                to_fold,
                &raw,
                self.narrative_tokens(),
            )
            .await
    }

    /// The plan's messages as the summarizer gets them: a message the
    /// view showed as its stub (archived when shown) as that stub (its
    /// specifics are in it, and the summarizer's input stays near the
    /// view's size: one call).
    fn to_fold(&self, plan: &FoldPlan) -> Vec<&Value> {
        let mark = plan.base.as_ref().map_or(0, |b| b.retained.stubs_before);
        let compression = &self.data.compression;
        plan.fold
            .iter()
            .filter_map(|&i| {
                compression
                    .shown_stub(i, mark)
                    .or_else(|| self.data.messages.get(i))
            })
            .collect()
    }

    /// Counts a failed fold and, for a keyed conversation, backs its next
    /// folds off and keeps the failure with its fold history (stored with
    /// it, so a later success does not erase it).
    async fn record_failure(
        &self,
        plan: &FoldPlan,
        chain: Option<Arc<FoldChain>>,
        started: Started,
        error: &crate::summarize::SummarizeError,
    ) {
        let app = &*self.app;
        app.metrics.fold_failures.inc();
        let Some(key) = &self.data.key else {
            return;
        };
        app.background
            .record_failure(key, app.config.summarizer.failure_backoff);
        let mut kept = chain.as_deref().cloned().unwrap_or_default();
        kept.push_failure(FailureRecord::new(
            now_unix(),
            plan.reason,
            started == Started::Background,
            plan.tokens_before,
            &error.to_string(),
        ));
        app.store.save(key, Arc::new(kept)).await;
    }

    /// The archive spool cannot take the rows of the plan's folded
    /// messages: the fold is not made, rather than drop them.
    fn vetoed(
        &self,
        plan: &FoldPlan,
        started: Started,
        full: &SpoolFull,
    ) -> Result<Prepared, ApiError> {
        self.app.metrics.archive_vetoes.inc();
        let conversation = self.data.key.as_ref().map(ToString::to_string);
        tracing::warn!(
            target: "foldgate::fold", conversation, reason = plan.reason.as_str(), mode = started.as_str(),
            folded = plan.fold.len(), outcome = "vetoed", error = %full,
        );
        self.not_folded(plan.base.as_ref(), "the archive spool is full", full)
    }

    /// A fold the request needed was not made (`why`, for the client;
    /// `error`, the cause): `summarizer.on_failure` says whether the
    /// request fails or goes on with the base state; either way the
    /// response says so in `x-foldgate-warning`.
    fn not_folded(
        &self,
        base: Option<&FoldState>,
        why: &str,
        error: &dyn std::fmt::Display,
    ) -> Result<Prepared, ApiError> {
        match self.app.config.summarizer.on_failure {
            OnFailure::Error => Err(ApiError::NotFolded {
                why: why.to_string(),
                detail: error.to_string(),
            }),
            OnFailure::Passthrough => self.reuse(base, Some(&fold_failed(why))),
        }
    }

    /// The new ledger: the specifics of the folded messages, of the previous
    /// ledger and of the previous summary that the new summary lacks. The
    /// ledger gets what the summary leaves of the summary budget, and at
    /// least half of it: the summarizer may lose specifics, foldgate may
    /// not. A summary too long for the rest is trimmed ([`Summary::trim_to`])
    /// and the ledger made again against what remains.
    fn fit_summary(&self, plan: &FoldPlan, summary: &mut Summary, folded: &[&Value]) -> Ledger {
        let tokens = &self.app.tokens;
        let model = &self.data.model;
        let count =
            |text: &str| tokens.message_tokens(model, &json!({"role": "system", "content": text}));
        let base = plan.base.as_ref();
        let folded_count = plan.covered - usize::from(plan.kept_user.is_some());
        let previous_summary = base.map(|b| b.summary.render(b.folded()));
        let previous = base.map(|b| b.ledger.clone()).unwrap_or_default();
        // The recall hint closes the summary: its room comes first.
        let hint = if self.recall() {
            count(&crate::fold::summary::recall_hint())
        } else {
            0
        };
        let reserve = self.budget.summary_reserve.saturating_sub(hint);
        // Items the newest plan call marks completed are kept apart.
        let completed = plan
            .retained
            .plan
            .as_ref()
            .map(PlanCall::completed)
            .unwrap_or_default();
        let mut attempts = 0;
        let LedgerUpdate { ledger, evicted } = loop {
            attempts += 1;
            let text = summary.render(folded_count);
            let narrative = count(&text);
            let mut update = Ledger::after_fold(
                &previous,
                previous_summary.as_deref(),
                folded,
                &text,
                reserve.saturating_sub(narrative).max(reserve / 2),
                &count,
            );
            update.ledger.mark_done(&completed);
            let room = reserve.saturating_sub(count(&update.ledger.render()));
            if narrative <= room || attempts == 3 || !summary.trim_to(folded_count, room, &count) {
                break update;
            }
        };
        let m = &self.app.metrics;
        let added = ledger
            .items()
            .iter()
            .filter(|i| !previous.items().iter().any(|p| p.value == i.value))
            .count();
        m.ledger_items.inc_by(added as u64);
        m.ledger_evictions.inc_by(evicted.len() as u64);
        ledger
    }

    /// The summarizer's output limit: two thirds of the summary budget, so
    /// at least a third is left to the ledger.
    fn narrative_tokens(&self) -> u32 {
        (self.budget.summary_reserve.saturating_mul(2) / 3).max(64)
    }

    fn count_outcome(&self, outcome: &Outcome) {
        let m = &self.app.metrics;
        m.summarizer_calls.inc_by(u64::from(outcome.calls));
        m.summarizer_tokens.inc_by(outcome.tokens);
        m.summarizer_ms.inc_by(outcome.latency.as_millis() as u64);
        m.latency.summarizer.observe(outcome.latency.as_secs_f64());
        m.summary_inventions.inc_by(u64::from(outcome.inventions));
        let [invented, unsupported, swap, unconfirmed] = &m.summary_items_dropped;
        invented.inc_by(u64::from(outcome.inventions));
        unsupported.inc_by(u64::from(outcome.unsupported));
        swap.inc_by(u64::from(outcome.swaps));
        unconfirmed.inc_by(u64::from(outcome.unconfirmed));
        m.summary_truncations.inc_by(u64::from(outcome.truncated));
    }

    /// The summarizer models to try, in order.
    fn targets(&self) -> Vec<Target> {
        let cfg = &self.app.config.summarizer;
        let name = cfg.provider.as_deref().unwrap_or(&self.data.provider);
        let provider = self.app.upstreams.by_name(name);
        // Calls to the conversation's own provider follow its route.
        let own = (name == self.data.provider).then(|| self.data.tail.clone());
        let first = cfg.model.as_deref().unwrap_or(&self.data.model);
        std::iter::once(first)
            .chain(cfg.fallback_models.iter().map(String::as_str))
            .map(|model| {
                // A summarizer model whose window is not known gets the
                // conversation's (known by now: an unknown one never folds).
                let limits = self.app.tokens.limits(model);
                let window = match limits.known() {
                    true => limits.context_window,
                    false => self.budget.context_window,
                };
                // Room for the answer's limit; a retry after a cut-off
                // answer doubles it only as far as the window has room.
                let answer = self.narrative_tokens();
                Target {
                    provider: provider.clone(),
                    conversation: own.clone(),
                    model: model.to_string(),
                    input_budget: window
                        .saturating_sub(answer + SUMMARIZER_PROMPT_TOKENS)
                        .max(256),
                    window,
                }
            })
            .collect()
    }
}

/// The warning a fold that had to fold pinned messages answers with (and
/// logs), when it did.
fn pins_warning(state: &FoldState, conversation: &str) -> Option<&'static str> {
    let pins_folded = state.retained.pins_folded;
    if pins_folded == 0 {
        return None;
    }
    tracing::warn!(target: "foldgate::fold", conversation, pins_folded, "pinned messages over their budget (policy.pin_ratio); the oldest were folded");
    Some("pinned messages over policy.pin_ratio: the oldest were folded")
}
