//! Every fold's audit record. A conversation's [`FoldChain`] keeps its last
//! [`FoldChain::MAX`] states for matching requests; beside them it keeps a
//! short record of every fold it made (trigger, depth, span, tokens,
//! summarizer), for the admin API and the dashboard, up to
//! [`Audit::MAX`] records, and the count of all; and every fold that was
//! tried and failed ([`FailureRecord`]), so a later success does not
//! erase it.
//!
//! [`FoldChain`]: super::FoldChain
//! [`FoldChain::MAX`]: super::FoldChain::MAX
//! [`FoldState`]: super::FoldState

use serde::{Deserialize, Serialize};

/// Why a fold happened, in trigger priority order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// View tokens plus the output reserve exceed the window.
    Emergency,
    /// View tokens reached `trigger_ratio` of the window.
    Token,
    /// More than `preserve_recent + overflow_buffer` unfolded messages.
    Overflow,
    /// `safety_user_turns` user messages since the last fold.
    Safety,
    /// No fold for `idle_fold_after` and more than `preserve_recent`
    /// messages unfolded.
    Idle,
}

impl Reason {
    /// A short lower-case label for logs, headers and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Emergency => "emergency",
            Self::Token => "token",
            Self::Overflow => "overflow",
            Self::Safety => "safety",
            Self::Idle => "idle",
        }
    }

    /// Every reason, in priority order (the metrics' label order).
    pub const ALL: [Reason; 5] = [
        Self::Emergency,
        Self::Token,
        Self::Overflow,
        Self::Safety,
        Self::Idle,
    ];
}

/// The summarizer's part in one fold, for the audit trail and dashboard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummarizerRun {
    /// The model that wrote the summary.
    pub model: String,
    /// Wall time of the whole fold's summarizer calls, in milliseconds.
    pub latency_ms: u64,
    /// HTTP calls made, retries and chunks included.
    pub calls: u32,
}

/// What the audit keeps of one fold: a [`FoldState`] without its summary,
/// ledger and hash chain (the fields keep their names, so a record reads
/// like the state it came from).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FoldRecord {
    pub id: String,
    pub parent: Option<String>,
    pub depth: u32,
    pub reason: Reason,
    pub covered: usize,
    pub kept_user: Option<usize>,
    pub created_at: u64,
    pub tokens_before: u32,
    pub tokens_after: u32,
    pub api: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarizer: Option<SummarizerRun>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub background: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restub: bool,
}

/// A fold that was tried and not made: when, why it was tried, and what
/// went wrong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureRecord {
    /// Unix seconds when the fold gave up.
    pub at: u64,
    /// The trigger that asked for the fold.
    pub reason: Reason,
    /// Whether it ran in the background (else the request waited for it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub background: bool,
    /// Estimated prompt tokens of the view it would have folded.
    pub tokens_before: u32,
    /// What failed, in short (the summarizer's error).
    pub error: String,
}

impl FailureRecord {
    /// Longest error text kept, in bytes.
    pub const MAX_ERROR: usize = 300;

    /// A record of a failure at `at`, its error cut to [`Self::MAX_ERROR`].
    pub fn new(at: u64, reason: Reason, background: bool, tokens_before: u32, error: &str) -> Self {
        let mut end = error.len().min(Self::MAX_ERROR);
        while !error.is_char_boundary(end) {
            end -= 1;
        }
        Self {
            at,
            reason,
            background,
            tokens_before,
            error: error[..end].to_owned(),
        }
    }
}

/// A conversation's fold records, oldest first, and how many folds it made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Audit {
    /// Folds and restubs made, every one counted (also those whose
    /// record was dropped).
    pub total: u64,
    /// Restubs among them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restubs: u64,
    /// The newest records, oldest first, at most [`Audit::MAX`].
    pub records: Vec<FoldRecord>,
    /// Failed folds, every one counted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: u64,
    /// The newest failures, oldest first, at most [`Audit::MAX_FAILURES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<FailureRecord>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Audit {
    /// Records kept per conversation. A record is about 200 bytes, so a
    /// conversation's audit stays under ~200 KB however long it runs, and
    /// a memory bound on states still levels off. 1,000 folds is far more
    /// than a conversation makes before `state.ttl` or `archive.ttl`.
    pub const MAX: usize = 1_000;

    /// Failure records kept per conversation (a failing summarizer is
    /// backed off, so they come slowly; the count goes on).
    pub const MAX_FAILURES: usize = 100;

    /// The audit of these records alone (a chain stored before the
    /// audit was).
    pub fn of(records: Vec<FoldRecord>) -> Self {
        Self {
            total: records.len() as u64,
            restubs: records.iter().filter(|r| r.restub).count() as u64,
            records,
            ..Self::default()
        }
    }

    /// Records a failed fold, dropping the oldest failure beyond the cap.
    pub fn push_failure(&mut self, failure: FailureRecord) {
        self.failed = self.failed.saturating_add(1);
        self.failures.push(failure);
        if self.failures.len() > Self::MAX_FAILURES {
            let excess = self.failures.len() - Self::MAX_FAILURES;
            self.failures.drain(..excess);
        }
    }

    /// Records one more fold or restub, dropping the oldest record beyond the cap.
    pub fn push(&mut self, record: FoldRecord) {
        self.total = self.total.saturating_add(1);
        self.restubs = self.restubs.saturating_add(u64::from(record.restub));
        self.records.push(record);
        if self.records.len() > Self::MAX {
            let excess = self.records.len() - Self::MAX;
            self.records.drain(..excess);
        }
    }
}
