//! The fast path: decides from the request's raw JSON whether it goes
//! upstream untouched, without building a `Value` tree. Most chat requests
//! (no stored fold, no trigger near) end here; the others take the full
//! pipeline in [`super::turn`].

use super::key;
use super::prepared::{Prepared, now_unix};
use crate::api::codec::RawRequest;
use crate::app::App;
use crate::config::Mode;
use crate::error::ApiError;
use crate::fold::trigger::{Observed, evaluate};
use crate::fold::{FoldChain, compress};
use crate::message::{MessageId, Role, pinned_count};
use crate::state::ConvKey;
use crate::tokens::Estimate;
use http::HeaderMap;
use std::sync::Arc;

/// What the first look found: the conversation key, the estimate, the
/// conversation's fold chain (read once, here), and whether the request
/// can go upstream untouched.
pub(super) struct Look {
    pub key: Option<ConvKey>,
    /// Each message's identity (the hash of its text as sent).
    pub ids: Vec<MessageId>,
    pub estimate: Estimate,
    pub chain: Option<Arc<FoldChain>>,
    /// `Some` when the request goes upstream untouched.
    pub untouched: Option<Prepared>,
}

/// The conversation key, and where the request goes: untouched when no
/// fold of the conversation is stored, no trigger fires, and (in background
/// mode) the prompt is below the prefold ratio.
pub(super) async fn route(
    app: &App,
    headers: &HeaderMap,
    raw: &RawRequest<'_>,
    provider: &str,
) -> Result<Look, ApiError> {
    let tokens = &app.tokens;
    let counted = tokens
        .raw_messages(&raw.model, raw.messages.iter().map(|m| m.get()))
        .map_err(|i| ApiError::BadRequest {
            message: format!("messages[{i}] must be an object with a string `role`"),
            param: Some("messages"),
        })?;
    let roles: Vec<Role> = counted.iter().map(|c| c.role).collect();
    let counts: Vec<u32> = counted.iter().map(|c| c.tokens).collect();
    let ids: Vec<MessageId> = counted.iter().map(|c| c.id).collect();
    let pinned = pinned_count(roles.iter().copied().map(Some));
    let fingerprint = || {
        let first_user = roles.iter().skip(pinned).position(|r| *r == Role::User)? + pinned;
        let head = raw.messages[..pinned].iter().map(|m| m.get());
        Some(key::fingerprint(head, raw.messages[first_user].get()))
    };
    let key = key::conversation_key(headers, fingerprint, &app.config.conversation);
    let estimate = tokens.estimate_with(&raw.model, &raw.rest, counts);
    let chain = match &key {
        Some(k) => app.store.load(k).await.filter(|chain| !chain.is_empty()),
        None => None,
    };
    let full = |key, ids, estimate, chain| Look {
        key,
        ids,
        estimate,
        chain,
        untouched: None,
    };
    if chain.is_some() {
        return Ok(full(key, ids, estimate, chain));
    }
    let policy = app.config.policy_for(provider, &raw.model);
    let budget = crate::fold::Budget::for_request(&app.config, &policy, &estimate, now_unix());
    let messages_tokens: u64 = estimate
        .messages
        .iter()
        .map(|&c| u64::from(estimate.calibrated(u64::from(c))))
        .sum();
    let seen = Observed {
        view_tokens: u64::from(budget.overhead) + messages_tokens,
        messages: roles.len(),
        unfolded: roles.len() - pinned,
        user_messages: roles.iter().filter(|r| **r == Role::User).count(),
        base: None,
        now_unix: budget.now_unix,
    };
    let prefold = policy.mode == Mode::Background
        && key.is_some()
        && seen.view_tokens as f64 >= policy.prefold_ratio * f64::from(budget.context_window);
    // Older turns to compress need the full path too (one rule: `select`).
    let compress = || {
        let settings = app.config.compress_for(provider, &raw.model);
        let roles: Vec<Option<Role>> = roles.iter().copied().map(Some).collect();
        app.archive.enabled()
            && key.is_some()
            && !compress::select(
                &roles,
                &estimate.messages,
                &settings,
                policy.preserve_recent,
            )
            .is_empty()
    };
    if prefold || evaluate(&seen, &policy, &budget).is_some() || compress() {
        return Ok(full(key, ids, estimate, None));
    }
    let prepared = Prepared::untouched(&estimate, &ids);
    Ok(Look {
        untouched: Some(prepared),
        ..full(key, ids, estimate, None)
    })
}
