//! Fold states: what one fold produced, the plan of the next one (a
//! [`FoldPlan`] is a state less its summary: [`FoldState::after`] completes
//! it), and the bounded chain of recent folds a conversation keeps.
//!
//! A [`FoldState`] spans `covered` messages after the pinned head. All of
//! them are folded into its summary except `kept_user`, the last user
//! message of an agent loop, which the view still shows verbatim. The
//! state's `chain` hashes exactly the covered messages, so it is applied only
//! to a request whose messages at those positions are byte-for-byte the ones
//! it was made from ([`FoldChain::best_match`]).

use super::audit::{Audit, FailureRecord, FoldRecord};
pub use super::audit::{Reason, SummarizerRun};
use super::hash::{ChainHash, MessageId, PrefixChain, ids_of};
use super::ledger::Ledger;
use super::plan_call::PlanCall;
use super::summary::Summary;
use crate::message::pinned_len;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// One fold: the summary and exactly which messages it stands for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FoldState {
    /// Derived from `chain` and `kept_user`: equal spans give equal ids.
    pub id: String,
    /// The state this fold rewrote, if any.
    pub parent: Option<String>,
    /// 1 for a first fold, parent's depth + 1 after.
    pub depth: u32,
    /// The summary of every covered message except `kept_user`.
    pub summary: Summary,
    /// The specifics of the folded messages that `summary` lacks, kept by
    /// foldgate itself (rendered after the summary).
    #[serde(default)]
    pub ledger: Ledger,
    /// Messages after the pinned head that this state spans.
    pub covered: usize,
    /// Index (relative to the pinned head, `< covered`) of the last user
    /// message of an agent loop, shown verbatim after the summary.
    pub kept_user: Option<usize>,
    /// Hash chain over exactly the `covered` messages.
    pub chain: ChainHash,
    /// User messages in the request that produced this fold.
    pub user_turns: usize,
    /// Messages in the request that produced this fold.
    pub messages: usize,
    /// Unix seconds when the fold was made.
    pub created_at: u64,
    /// Estimated prompt tokens of the view before the fold.
    pub tokens_before: u32,
    /// Expected prompt tokens of the view after it (with the summary reserve).
    pub tokens_after: u32,
    /// The trigger that caused the fold.
    pub reason: Reason,
    /// The API the conversation speaks (its name: `chat`, `anthropic`…).
    #[serde(default = "api_before_it_was_recorded")]
    pub api: String,
    /// Who wrote the summary and what it took, when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarizer: Option<SummarizerRun>,
    /// Whether the summary tells the model that the folded messages can
    /// be looked up with the recall tool (the fold was made with recall on).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recall: bool,
    /// What the view keeps besides the summary: pins, stubs, the plan.
    #[serde(default, skip_serializing_if = "Retained::is_empty")]
    pub retained: Retained,
    /// Whether the fold ran in the background (else a request waited for it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub background: bool,
    /// Whether this state is a restub of its parent (the same summary,
    /// more stubs, no summarizer call) rather than a fold.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restub: bool,
}

/// What a fold keeps in the view besides its summary and kept user message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Retained {
    /// Pinned messages inside the covered span (relative to the pinned
    /// head, ascending), shown verbatim ahead of the summary.
    pub pins: Vec<usize>,
    /// Pins this fold had to fold because the pins outgrew their budget.
    pub pins_folded: usize,
    /// Every stub-eligible tool result before this message index (of the
    /// request) that the view shows is shown as its stub: the stubs that
    /// rode on a fold stay, so the prompt stays stable until the next one.
    pub stubs_before: usize,
    /// The newest plan-tool call among the folded messages (or the base's).
    pub plan: Option<PlanCall>,
    /// Tokens the conversation added per step when this fold was made
    /// (the mean of its newest steps; 0: not measured), which sized the
    /// fold's depth.
    pub step_tokens: u32,
}

impl Retained {
    /// Whether nothing is retained (the field is then left out of JSON).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The API of a state stored before states recorded theirs: chat
/// completions, the only one foldgate spoke then. New states take their
/// request's (the pipeline names it).
fn api_before_it_was_recorded() -> String {
    "chat".to_string()
}

/// Everything the summarizer step needs to carry out one fold.
#[derive(Debug, Clone, PartialEq)]
pub struct FoldPlan {
    /// The state being rewritten (its summary goes to the summarizer).
    pub base: Option<FoldState>,
    /// The trigger that fired.
    pub reason: Reason,
    /// Indices into the request's messages to fold, ascending: a previously
    /// kept user message that is no longer kept, then the newly folded run.
    pub fold: Vec<usize>,
    /// Length of the pinned head.
    pub pinned: usize,
    /// The new state's span after the pinned head.
    pub covered: usize,
    /// The new state's kept user message (relative to the pinned head).
    pub kept_user: Option<usize>,
    /// Hash chain over the new span.
    pub chain: ChainHash,
    /// Prompt tokens of the view before the fold.
    pub tokens_before: u32,
    /// Expected prompt tokens after it, counting the summary reserve.
    pub tokens_after: u32,
    /// Messages in the request.
    pub messages: usize,
    /// User messages in the request.
    pub user_turns: usize,
    /// The base summary has been rewritten `policy.max_depth` times: this
    /// fold summarizes the raw messages again (`fold` holds every message of
    /// the new span but the kept one and the pins) instead of the base summary.
    pub rebuild: bool,
    /// What the new state keeps in the view besides the summary.
    pub retained: Retained,
    /// Only the stub mark moves (`retained.stubs_before`): the base's
    /// summary stands, nothing is folded and no summarizer is called; the
    /// messages newly shown as stubs are archived as they are forwarded
    /// ([`FoldState::restubbed`]).
    pub restub: bool,
}

impl FoldPlan {
    /// The messages to fold, in order.
    pub fn to_fold<'m>(&self, messages: &'m [Value]) -> Vec<&'m Value> {
        self.fold.iter().filter_map(|&i| messages.get(i)).collect()
    }
}

impl FoldState {
    /// The next state: `plan` carried out with the summarizer's `summary`
    /// (a complete rewrite of the base summary plus the folded messages)
    /// and `ledger`. A rebuild from the raw messages starts at depth 1 again.
    /// Its [`Self::api`] is left empty: the engine knows no API, the
    /// caller names its request's.
    pub fn after(plan: &FoldPlan, summary: Summary, ledger: Ledger, now_unix: u64) -> Self {
        let base = plan.base.as_ref();
        let depth = match base {
            Some(b) if !plan.rebuild => b.depth.saturating_add(1),
            _ => 1,
        };
        Self {
            id: state_id(&plan.chain, plan.covered, plan.kept_user),
            parent: base.map(|b| b.id.clone()),
            depth,
            summary,
            ledger,
            covered: plan.covered,
            kept_user: plan.kept_user,
            chain: plan.chain,
            user_turns: plan.user_turns,
            messages: plan.messages,
            created_at: now_unix,
            tokens_before: plan.tokens_before,
            tokens_after: plan.tokens_after,
            reason: plan.reason,
            api: String::new(),
            summarizer: None,
            recall: false,
            retained: plan.retained.clone(),
            background: false,
            restub: false,
        }
    }

    /// The state of a restub plan ([`FoldPlan::restub`]): its base with the
    /// plan's stub mark and step measure, made `now_unix`. The summary,
    /// ledger, depth and span are the base's; the id also hashes the stub
    /// mark, so the restubbed state is told apart from its base (and is
    /// preferred to it, being newer at the same span and depth). `None`
    /// when the plan has no base.
    pub fn restubbed(plan: &FoldPlan, now_unix: u64) -> Option<Self> {
        let base = plan.base.as_ref()?;
        let mut h = Sha256::new();
        h.update(base.id.as_bytes());
        h.update((plan.retained.stubs_before as u64).to_le_bytes());
        Some(Self {
            id: ChainHash(h.finalize().into()).to_hex()[..16].to_string(),
            parent: Some(base.id.clone()),
            messages: plan.messages,
            user_turns: plan.user_turns,
            created_at: now_unix,
            tokens_before: plan.tokens_before,
            tokens_after: plan.tokens_after,
            reason: plan.reason,
            summarizer: None,
            background: false,
            restub: true,
            retained: Retained {
                stubs_before: plan.retained.stubs_before,
                step_tokens: plan.retained.step_tokens,
                ..base.retained.clone()
            },
            ..base.clone()
        })
    }

    /// This state with the summarizer's model, latency and calls recorded.
    pub fn with_summarizer(
        mut self,
        model: &str,
        latency: std::time::Duration,
        calls: u32,
    ) -> Self {
        self.summarizer = Some(SummarizerRun {
            model: model.to_string(),
            latency_ms: u64::try_from(latency.as_millis()).unwrap_or(u64::MAX),
            calls,
        });
        self
    }

    /// How many messages the summary stands for.
    pub fn folded(&self) -> usize {
        self.covered - usize::from(self.kept_user.is_some()) - self.retained.pins.len()
    }

    /// The text of the summary message: the summary, then the ledger.
    /// The same state renders to the same bytes.
    pub fn render(&self) -> String {
        let mut text = self.summary.render(self.folded());
        if let Some(plan) = &self.retained.plan {
            text.push_str("\n\n");
            text.push_str(&plan.render());
        }
        let ledger = self.ledger.render();
        if !ledger.is_empty() {
            text.push_str("\n\n");
            text.push_str(&ledger);
        }
        if self.recall {
            text.push_str("\n\n");
            text.push_str(&super::summary::recall_hint());
        }
        text
    }

    /// Whether this state applies to `messages`: the covered range exists,
    /// at least one message follows it, and it hashes to `chain`.
    pub fn matches(&self, messages: &[Value]) -> bool {
        let p = pinned_len(messages);
        self.matches_ids(&ids_of(&messages[p..]))
    }

    /// [`FoldState::matches`] for the messages after the pinned head, given
    /// by identity.
    pub fn matches_ids(&self, after_pinned: &[MessageId]) -> bool {
        self.matches_prefix(after_pinned.len(), &mut PrefixChain::new(after_pinned))
    }

    /// [`FoldState::matches`] against precomputed prefix hashes of the
    /// `after_pinned` messages that follow the pinned head.
    pub(crate) fn matches_prefix(&self, after_pinned: usize, prefix: &mut PrefixChain<'_>) -> bool {
        self.covered < after_pinned
            && self.kept_user.is_none_or(|k| k < self.covered)
            && prefix.get(self.covered) == Some(self.chain)
    }
}

/// Deterministic id: 16 hex digits of `sha256(chain || covered || kept)`.
fn state_id(chain: &ChainHash, covered: usize, kept_user: Option<usize>) -> String {
    let mut h = Sha256::new();
    h.update(chain.0);
    h.update((covered as u64).to_le_bytes());
    h.update(kept_user.map_or(0, |k| k as u64 + 1).to_le_bytes());
    ChainHash(h.finalize().into()).to_hex()[..16].to_string()
}

/// A conversation's recent folds, oldest first, at most [`FoldChain::MAX`],
/// and the audit record of every fold it made ([`Audit`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "Stored")]
pub struct FoldChain {
    states: Vec<FoldState>,
    audit: Audit,
}

/// A chain as stored: the states alone before the audit existed, then
/// both.
#[derive(Deserialize)]
#[serde(untagged)]
enum Stored {
    States(Vec<FoldState>),
    Chain {
        states: Vec<FoldState>,
        #[serde(default)]
        audit: Option<Audit>,
    },
}

impl From<Stored> for FoldChain {
    fn from(stored: Stored) -> Self {
        let (states, audit) = match stored {
            Stored::States(states) => (states, None),
            Stored::Chain { states, audit } => (states, audit),
        };
        let audit =
            audit.unwrap_or_else(|| Audit::of(states.iter().map(FoldRecord::from).collect()));
        Self { states, audit }
    }
}

impl FoldChain {
    /// States kept for matching requests; older ones are dropped (their
    /// audit records stay, see [`Audit::MAX`]).
    pub const MAX: usize = 8;

    /// An empty chain.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a state and its audit record, dropping the oldest state
    /// beyond [`FoldChain::MAX`].
    pub fn push(&mut self, state: FoldState) {
        self.audit.push(FoldRecord::from(&state));
        self.states.push(state);
        if self.states.len() > Self::MAX {
            let excess = self.states.len() - Self::MAX;
            self.states.drain(..excess);
        }
    }

    /// The states, oldest first.
    pub fn states(&self) -> &[FoldState] {
        &self.states
    }

    /// Folds made in this conversation, all of them (restubs not counted).
    pub fn folds_made(&self) -> u64 {
        self.audit
            .total
            .max(self.states.len() as u64)
            .saturating_sub(self.audit.restubs)
    }

    /// Restubs made in this conversation, all of them.
    pub fn restubs_made(&self) -> u64 {
        self.audit.restubs
    }

    /// The audit records of the folds no longer held as states, oldest
    /// first (the newest records are those of [`FoldChain::states`]).
    pub fn older(&self) -> &[FoldRecord] {
        let records = &self.audit.records;
        &records[..records.len().saturating_sub(self.states.len())]
    }

    /// Audit records held (for the memory bound's weight).
    pub fn records(&self) -> usize {
        self.audit.records.len() + self.audit.failures.len()
    }

    /// Records a fold that was tried and failed.
    pub fn push_failure(&mut self, failure: FailureRecord) {
        self.audit.push_failure(failure);
    }

    /// The newest failed folds, oldest first.
    pub fn failures(&self) -> &[FailureRecord] {
        &self.audit.failures
    }

    /// Failed folds in this conversation, all of them.
    pub fn failed_folds(&self) -> u64 {
        self.audit.failed
    }

    /// The most recent state.
    pub fn latest(&self) -> Option<&FoldState> {
        self.states.last()
    }

    /// Number of states held.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// Whether no fold is held.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// The state spanning the most messages that matches `messages` (an
    /// edited or branched history gets the longest fold still matching, or
    /// none). Hashes the request's prefix once, up to the longest candidate.
    pub fn best_match(&self, messages: &[Value]) -> Option<&FoldState> {
        let p = pinned_len(messages);
        let ids = ids_of(&messages[p..]);
        self.best_match_prefix(ids.len(), &mut PrefixChain::new(&ids))
    }

    /// [`FoldChain::best_match`] with precomputed prefix hashes.
    pub(crate) fn best_match_prefix(
        &self,
        after_pinned: usize,
        prefix: &mut PrefixChain<'_>,
    ) -> Option<&FoldState> {
        self.matching_prefix(after_pinned, prefix)
            .into_iter()
            .next()
    }

    /// Every state matching the request, best first: longest span, then
    /// deepest, then newest.
    pub(crate) fn matching_prefix(
        &self,
        after_pinned: usize,
        prefix: &mut PrefixChain<'_>,
    ) -> Vec<&FoldState> {
        // Newest first, then a stable sort: longest span, then deepest.
        let mut candidates: Vec<&FoldState> = self.states.iter().rev().collect();
        candidates.sort_by_key(|s| std::cmp::Reverse((s.covered, s.depth)));
        candidates.retain(|s| s.matches_prefix(after_pinned, prefix));
        candidates
    }
}

impl From<&FoldState> for FoldRecord {
    fn from(s: &FoldState) -> Self {
        Self {
            id: s.id.clone(),
            parent: s.parent.clone(),
            depth: s.depth,
            reason: s.reason,
            covered: s.covered,
            kept_user: s.kept_user,
            created_at: s.created_at,
            tokens_before: s.tokens_before,
            tokens_after: s.tokens_after,
            api: s.api.clone(),
            summarizer: s.summarizer.clone(),
            background: s.background,
            restub: s.restub,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `n` user messages, numbered.
    fn users(n: usize) -> Vec<Value> {
        (0..n)
            .map(|i| json!({"role": "user", "content": i}))
            .collect()
    }

    fn state(ms: &[Value], covered: usize, depth: u32) -> FoldState {
        FoldState {
            id: state_id(&super::super::hash::chain_of(&ms[..covered]), covered, None),
            parent: None,
            depth,
            summary: Summary::default(),
            ledger: Ledger::default(),
            covered,
            kept_user: None,
            chain: super::super::hash::chain_of(&ms[..covered]),
            user_turns: 0,
            messages: ms.len(),
            created_at: 0,
            tokens_before: 0,
            tokens_after: 0,
            reason: Reason::Token,
            api: "chat".into(),
            recall: false,
            summarizer: None,
            retained: Retained::default(),
            background: false,
            restub: false,
        }
    }

    #[test]
    fn the_audit_is_bounded_and_chains_stored_before_it_still_load() {
        let ms = users(4);
        let mut chain = FoldChain::new();
        for _ in 0..Audit::MAX + 5 {
            chain.push(state(&ms, 2, 1));
        }
        assert_eq!(chain.folds_made(), Audit::MAX as u64 + 5);
        assert_eq!(chain.records(), Audit::MAX);
        assert_eq!(chain.older().len(), Audit::MAX - FoldChain::MAX);
        let json = serde_json::to_string(&chain).unwrap_or_default();
        let back: FoldChain = serde_json::from_str(&json).unwrap_or_default();
        assert_eq!(back, chain);

        let states = vec![state(&ms, 1, 1), state(&ms, 2, 2)];
        let old = serde_json::to_string(&states).unwrap_or_default();
        let back: FoldChain = serde_json::from_str(&old).unwrap_or_default();
        assert_eq!(back.states(), states.as_slice());
        assert_eq!(back.folds_made(), 2);
        assert!(back.older().is_empty());
    }

    #[test]
    fn restubs_are_counted_apart_from_folds_after_their_records_are_dropped() {
        let ms = users(4);
        let mut chain = FoldChain::new();
        for i in 0..Audit::MAX + 6 {
            let restub = i % 3 == 2;
            chain.push(FoldState {
                restub,
                ..state(&ms, 2, 1)
            });
        }
        let restubs = (Audit::MAX as u64 + 6) / 3;
        assert_eq!(chain.restubs_made(), restubs);
        assert_eq!(chain.folds_made(), Audit::MAX as u64 + 6 - restubs);
        let json = serde_json::to_string(&chain).unwrap_or_default();
        let back: FoldChain = serde_json::from_str(&json).unwrap_or_default();
        assert_eq!(back.restubs_made(), restubs, "the count is stored");
        assert!(
            back.older().iter().any(|r| r.restub),
            "and each record says"
        );
    }

    #[test]
    fn chain_is_bounded_and_prefers_the_longest_match() {
        let ms = users(20);
        let mut chain = FoldChain::new();
        for covered in 1..=10 {
            chain.push(state(&ms, covered, covered as u32));
        }
        assert_eq!(chain.len(), FoldChain::MAX);
        assert_eq!(chain.states()[0].covered, 3);
        assert_eq!(chain.folds_made(), 10, "the audit counts every fold");
        let older: Vec<usize> = chain.older().iter().map(|r| r.covered).collect();
        assert_eq!(older, [1, 2], "and keeps the records of those dropped");
        assert_eq!(chain.best_match(&ms).map(|s| s.covered), Some(10));
        assert_eq!(chain.best_match(&ms[..11]).map(|s| s.covered), Some(10));
        // A state must leave at least one message after its span.
        assert_eq!(chain.best_match(&ms[..10]).map(|s| s.covered), Some(9));
        let mut edited = ms.clone();
        edited[5]["content"] = json!("x");
        assert_eq!(chain.best_match(&edited).map(|s| s.covered), Some(5));
    }
}
