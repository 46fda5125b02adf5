//! The fold engine: when to fold, what to fold, and the view sent upstream.
//! Pure functions, no IO, no clock — property-tested in `tests/fold_props.rs`.
//!
//! # Contract (docs/folding.md, "Keys, triggers and the summarizer")
//!
//! A request's `messages` are `M[0..n)`; the leading `system`/`developer`
//! messages (`p` of them) are *pinned* and always sent verbatim. A
//! [`FoldState`] spans `covered` messages after the pinned head; its summary
//! stands for all of them except `kept_user` (the last user message of an
//! agent loop, shown verbatim). The view is
//!
//! ```text
//! pinned + (pins) + [summary] + (M[p + kept_user]) + M[p + covered..n)
//! ```
//!
//! Pins ([`pins`]) are covered messages the state shows verbatim; the
//! summary stands for the others.
//!
//! Invariants every caller and test relies on:
//!
//! - **Reuse only on a match.** A state applies only when the request's
//!   `M[p..p+covered)` hash to its chain ([`FoldChain::best_match`]); an
//!   edited or branched history gets the longest matching fold, or none.
//! - **No drop without fold.** Every message absent from the view is folded
//!   into the summary in the view.
//! - **One fold per request**, chosen by [`plan`] from the triggers in
//!   [`trigger`] and the cut rules in [`cut`].
//! - **Frozen bytes.** The same state renders to the same view bytes.
//!
//! # Request path
//!
//! 1. [`plan`] matches the conversation's [`FoldChain`] against the request
//!    (the deepest fold whose hash chain equals the request's messages),
//!    measures the view with that fold applied, evaluates the triggers and,
//!    when one fires, plans the cut. It returns a [`Decision`]:
//!    - [`Decision::NoFold`]: forward `build_view(messages, info.base)`;
//!      `info.skipped` names a trigger that fired without any valid cut
//!      (the view already fits the window);
//!    - [`Decision::Fold`]: summarize `plan.base`'s summary plus
//!      [`FoldPlan::to_fold`], then [`FoldState::after`] gives the new state;
//!      store it in the chain ([`FoldChain::push`]) and forward
//!      `build_view(messages, Some(&state))`; a restub plan
//!      ([`FoldPlan::restub`]) summarizes nothing: [`FoldState::restubbed`]
//!      gives the new state;
//!    - [`Decision::CannotFit`]: an emergency no cut can solve (one giant
//!      message); nothing was dropped, the caller refuses or forwards as is.
//! 2. [`build_view`] renders the view (re-checking the state's hash chain);
//!    with no state the view is the messages themselves, and
//!    [`view_differs`] / [`ViewInfo::changed`] tell the proxy it can forward
//!    the client's original bytes.

pub mod audit;
pub mod compress;
pub mod cut;
pub mod extract;
pub mod fill;
pub mod hash;
pub mod ledger;
pub mod pins;
mod plan;
pub mod plan_call;
pub mod state;
pub mod summary;
pub mod trigger;
pub mod view;

pub use crate::message::pinned_len;
pub use audit::{Audit, FailureRecord, FoldRecord};
pub use compress::Compression;
pub use compress::build_view_with;
pub use hash::{ChainHash, MessageId};
pub use plan::{CannotFit, Decision, Due, Measured, ViewInfo, due, plan};
pub use plan_call::PlanCall;
pub use state::{FoldChain, FoldPlan, FoldState, Reason, Retained, SummarizerRun};
pub use summary::Summary;
pub use view::{ACK_TEXT, build_view, view_differs};

use crate::config::{Config, Policy, default_reserve};
use crate::tokens::Estimate;
use serde_json::Value;

/// A request's messages as the fold engine reads them: the values, each
/// one's identity and its prompt tokens, all computed once by the caller
/// (the request path has them from its first look at the raw JSON).
#[derive(Debug, Clone, Copy)]
pub struct Messages<'m> {
    /// The messages, `M[0..n)`.
    pub values: &'m [Value],
    /// Each message's role, as the request path read it.
    pub roles: &'m [crate::message::Role],
    /// Each message's identity: [`hash::message_id`], or for a message
    /// standing for several wire items [`crate::message::unit_id`].
    pub ids: &'m [hash::MessageId],
    /// Each message's prompt tokens, framing included (calibrated).
    pub counts: &'m [u32],
    /// Each message's tokens as a stub, where a fold may stub it (a long
    /// tool result; `compress.with_fold`), else its count. Empty: a fold
    /// stubs nothing.
    pub stubbed: &'m [u32],
}

/// Token counts for single messages, supplied by the caller (the real
/// estimator in production, a simple deterministic counter in tests).
pub trait CountTokens {
    /// Estimated prompt tokens of one message, framing included.
    fn message_tokens(&self, message: &Value) -> u32;
}

impl<F: Fn(&Value) -> u32> CountTokens for F {
    fn message_tokens(&self, message: &Value) -> u32 {
        self(message)
    }
}

/// The request's token budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Budget {
    /// The model's context window.
    pub context_window: u32,
    /// Tokens kept free for the completion (`max_tokens` or a default).
    pub output_reserve: u32,
    /// Prompt tokens outside the messages: tool definitions, priming.
    pub overhead: u32,
    /// Tokens a new summary (narrative and ledger) may take: the smaller
    /// of `summarizer.max_summary_tokens` and `policy.summary_ratio` of the
    /// window. The ledger is cut to fit it, so it bounds the real size.
    pub summary_reserve: u32,
    /// The clock, in Unix seconds, for `policy.idle_fold_after` (the fold
    /// engine reads no clock itself).
    pub now_unix: u64,
    /// The plan is carried out off the request path and first shown on a
    /// later request of the conversation (a background fold or restub).
    /// There this request's newest tool exchange is an older one, already
    /// answered, so the rewrite stubs its results too, as an inline fold
    /// on that later request would (docs/folding.md, *Background and
    /// inline folding*). `false`: the plan is shown on this very request.
    pub lands_later: bool,
}

impl Budget {
    /// A request's budget, one rule for the proxy and `foldgate replay`:
    /// the window and output reserve as the estimate has them (a default
    /// reserve already capped, see [`crate::config::default_reserve`]), the
    /// overhead calibrated, and the summary's share of the window.
    pub fn for_request(
        config: &Config,
        policy: &Policy,
        estimate: &Estimate,
        now_unix: u64,
    ) -> Self {
        Self {
            context_window: estimate.context_window,
            output_reserve: estimate.output_reserve,
            overhead: estimate.calibrated(u64::from(estimate.overhead)),
            summary_reserve: summary_budget(config, policy, estimate.context_window),
            now_unix,
            lands_later: false,
        }
    }
}

impl Budget {
    /// The same request's budget against a smaller `window` (what an
    /// upstream's context-length error taught): the summary's share and a
    /// default output reserve follow the window, so the fold planned for
    /// the same request fits it; an output limit the request asked for
    /// stays.
    pub fn shrunk(&self, config: &Config, policy: &Policy, window: u32) -> Self {
        let window = self.context_window.min(window.max(1));
        let configured = config.tokens.default_output_reserve;
        let output_reserve =
            match self.output_reserve == default_reserve(configured, self.context_window) {
                true => default_reserve(configured, window),
                false => self.output_reserve,
            };
        Self {
            context_window: window,
            output_reserve,
            summary_reserve: summary_budget(config, policy, window),
            ..*self
        }
    }
}

/// Tokens the summary message (narrative and ledger) may take in a window:
/// `policy.summary_ratio` of it, at most `summarizer.max_summary_tokens`.
pub fn summary_budget(config: &Config, policy: &Policy, window: u32) -> u32 {
    let share = (policy.summary_ratio * f64::from(window)).floor() as u32;
    config.summarizer.max_summary_tokens.min(share).max(1)
}

/// Misuse of the fold engine's outputs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FoldError {
    /// A state was applied to messages it was not made from.
    #[error("fold state {id} does not match the request's messages")]
    StateMismatch {
        /// The state's id.
        id: String,
    },
}
