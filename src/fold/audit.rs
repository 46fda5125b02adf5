//! Every fold's audit record. A conversation's [`FoldChain`] keeps its last
//! [`FoldChain::MAX`] states for matching requests; beside them it keeps a
//! short record of every fold it made (trigger, depth, span, tokens,
//! summarizer), for the admin API and the dashboard, up to
//! [`Audit::MAX`] records, and the count of all.
//!
//! [`FoldChain`]: super::FoldChain
//! [`FoldChain::MAX`]: super::FoldChain::MAX

use super::state::{FoldState, Reason, SummarizerRun};
use serde::{Deserialize, Serialize};

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
        }
    }
}

/// A conversation's fold records, oldest first, and how many folds it made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Audit {
    /// Folds made, every one counted (also those whose record was dropped).
    pub total: u64,
    /// The newest records, oldest first, at most [`Audit::MAX`].
    pub records: Vec<FoldRecord>,
}

impl Audit {
    /// Records kept per conversation. A record is about 200 bytes, so a
    /// conversation's audit stays under ~200 KB however long it runs, and
    /// a memory bound on states still levels off. 1,000 folds is far more
    /// than a conversation makes before `state.ttl` or `archive.ttl`.
    pub const MAX: usize = 1_000;

    /// The audit of `states` alone (a chain stored before the audit was).
    pub fn of(states: &[FoldState]) -> Self {
        Self {
            total: states.len() as u64,
            records: states.iter().map(FoldRecord::from).collect(),
        }
    }

    /// Records one more fold, dropping the oldest record beyond the cap.
    pub fn push(&mut self, state: &FoldState) {
        self.total = self.total.saturating_add(1);
        self.records.push(FoldRecord::from(state));
        if self.records.len() > Self::MAX {
            let excess = self.records.len() - Self::MAX;
            self.records.drain(..excess);
        }
    }
}
