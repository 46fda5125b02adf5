//! `GET /foldgate/totals`: the dashboard's totals, summed from the fold
//! history the state store keeps (every conversation the credential may
//! read, as `/foldgate/conversations` lists them), so that after a restart
//! they still agree with the table below them. Counters of this process
//! alone (requests, reuses, tokens saved) stay in `/foldgate/metrics`.

use super::access::Access;
use crate::app::App;
use crate::error::ApiError;
use crate::fold::FoldChain;
use crate::state::{ListQuery, MAX_LIMIT};
use serde_json::{Value, json};

/// Pages of [`MAX_LIMIT`] conversations read at most per answer (20,000
/// conversations): a store holding more answers with `complete: false`
/// rather than reading every state on each dashboard refresh.
const MAX_PAGES: usize = 40;

/// What the fold history of some conversations adds up to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Conversations with a fold state.
    pub conversations: u64,
    /// Folds made, every one counted (as the listing's `folds`).
    pub folds: u64,
    /// Restubs made, every one counted (as the listing's `restubs`).
    pub restubs: u64,
    /// Folds tried and not made (as the listing's `failed_folds`).
    pub failed_folds: u64,
    /// Folds whose summarizer run is on record.
    pub summarized: u64,
    /// Those runs' summarizer calls, retries and chunks included.
    pub summarizer_calls: u64,
    /// Those runs' wall time, in milliseconds.
    pub summarizer_ms: u64,
}

impl Totals {
    /// Adds one conversation's chain: its fold and failure counts, and the
    /// summarizer runs of the folds its audit still holds.
    pub fn add(&mut self, chain: &FoldChain) {
        self.conversations += 1;
        self.folds += chain.folds_made();
        self.restubs += chain.restubs_made();
        self.failed_folds += chain.failed_folds();
        let older = chain.older().iter().map(|r| r.summarizer.as_ref());
        let held = chain.states().iter().map(|s| s.summarizer.as_ref());
        for run in older.chain(held).flatten() {
            self.summarized += 1;
            self.summarizer_calls += u64::from(run.calls);
            self.summarizer_ms += run.latency_ms;
        }
    }
}

/// The totals of every conversation `access` may read.
pub async fn of(app: &App, access: &Access) -> Result<Value, ApiError> {
    let mut query = ListQuery {
        tenant: access.tenant().map(str::to_string),
        after: None,
        limit: MAX_LIMIT,
    };
    let mut totals = Totals::default();
    let mut complete = false;
    for _ in 0..MAX_PAGES {
        let page = app.store.list(&query).await;
        for (_, chain) in &page.conversations {
            totals.add(chain);
        }
        match page.next {
            Some(next) => query.after = Some(next),
            None => {
                complete = true;
                break;
            }
        }
    }
    let mean = (totals.summarized > 0).then(|| totals.summarizer_ms / totals.summarized);
    Ok(json!({
        "conversations": totals.conversations,
        "folds": totals.folds,
        "restubs": totals.restubs,
        "failed_folds": totals.failed_folds,
        "summarizer": {
            "folds": totals.summarized,
            "calls": totals.summarizer_calls,
            "milliseconds": totals.summarizer_ms,
            "mean_ms_per_fold": mean,
        },
        "complete": complete,
    }))
}
