//! What a request forwards ([`Prepared`]): the view, or the client's
//! bytes, and what the response headers report about it.

use crate::fold::MessageId;
use crate::fold::view::Item;
use crate::state::TurnFold;
use crate::tokens::Estimate;
use std::sync::Arc;

/// What to forward, and what the response headers report.
#[derive(Debug)]
pub struct Prepared {
    /// The view to send, laid out over the engine's messages; `None`
    /// sends the client's bytes unchanged.
    pub view: Option<Vec<Item>>,
    /// How the view came about (`x-foldgate-fold`).
    pub fold: TurnFold,
    /// Estimated tokens of the client's messages (calibrated).
    pub tokens_in: u32,
    /// Estimated tokens of the forwarded prompt (calibrated).
    pub tokens_out: u32,
    /// The same, uncalibrated, for calibration against upstream usage.
    pub raw_tokens_out: u32,
    /// A note for `x-foldgate-warning` (e.g. the summarizer failed).
    pub warning: Option<String>,
    /// Messages the view shows compressed to stubs.
    pub compressed: usize,
    /// Recalled excerpts injected before the last user message.
    pub injected: usize,
    /// Messages the request that made the view's fold had (`None`: no
    /// fold in the view): what the conversation has said since is growth.
    pub landed: Option<usize>,
    /// The identities of the forwarded messages, in order (for the
    /// dashboard's cache-stable share).
    pub view_ids: Arc<[u128]>,
}

impl Prepared {
    /// The client's request forwarded as it is, by this estimate.
    pub fn untouched(estimate: &Estimate, ids: &[MessageId]) -> Self {
        Self {
            view: None,
            fold: TurnFold::None,
            tokens_in: estimate.input_tokens,
            tokens_out: estimate.input_tokens,
            raw_tokens_out: estimate.raw_input_tokens,
            warning: None,
            compressed: 0,
            injected: 0,
            landed: None,
            view_ids: ids.into(),
        }
    }
}

/// The clock, in Unix seconds.
pub(super) fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
