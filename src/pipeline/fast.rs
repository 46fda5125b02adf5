//! The fast path: decides from the request's raw JSON whether it goes
//! upstream untouched, without building a `Value` tree, on every API with
//! a shallow reader. Most requests (no stored fold, no trigger near) end
//! here; the others take the full pipeline in [`super::turn`].

use super::key;
use super::prepared::{Prepared, now_unix};
use crate::api::Api;
use crate::api::codec::{RawRequest, raw_pinned, raw_unit};
use crate::app::App;
use crate::config::Compress;
use crate::fold::{self, Budget, FoldChain, Measured, compress};
use crate::message::{MessageId, Role};
use crate::state::ConvKey;
use crate::tokens::{Estimate, RawCount, RawUnits};
use http::HeaderMap;
use std::sync::Arc;
use twox_hash::{XxHash3_64, XxHash3_128};

/// What the first look found: the conversation key, the estimate, the
/// conversation's fold chain (read once, here), and whether the request
/// can go upstream untouched.
pub(super) struct Look {
    pub key: Option<ConvKey>,
    /// Each message's identity (the hash of its text as sent).
    pub ids: Vec<MessageId>,
    /// Each message's role, where the first look read them (the fold
    /// decision reads them from here; empty for a body the decoder found
    /// opaque).
    pub roles: Vec<Role>,
    pub estimate: Estimate,
    pub chain: Option<Arc<FoldChain>>,
    /// `Some` when the request goes upstream untouched.
    pub untouched: Option<Prepared>,
}

/// The conversation key, and where the request goes: untouched when the
/// model's window is not known, or when no fold of the conversation is
/// stored, no trigger fires, and (in background mode) the prompt is below
/// the prefold ratio. `None` when a unit cannot
/// be read from its text: the decoder then reads the body and says why.
pub(super) async fn route(
    app: &App,
    api: Api,
    headers: &HeaderMap,
    raw: &RawRequest<'_>,
    provider: &str,
) -> Option<Look> {
    let units = app.tokens.raw_units(&raw.model);
    let counted = count(&units, api, raw)?;
    let roles: Vec<Role> = counted.iter().map(|c| c.role).collect();
    let counts: Vec<u32> = counted.iter().map(|c| c.tokens).collect();
    let ids: Vec<MessageId> = counted.iter().map(|c| c.id).collect();
    let estimate = units.estimate(&raw.rest, counts);
    if let Some(why) = raw.opaque {
        tracing::debug!(api = api.name(), why, "forwarded untouched");
        return Some(Look::opaque(estimate, ids, roles));
    }
    let fingerprint = || key::fingerprint(&roles, &ids);
    let key = key::conversation_key(headers, fingerprint, &app.config.conversation);
    if !estimate.window_known {
        // No trigger can be judged without the window: untouched until the
        // upstream's first context-length error names it (a reactive fold).
        app.tokens.window_unknown(provider, &raw.model);
        return Some(Look::unknown_window(key, estimate, ids, roles));
    }
    let chain = match &key {
        Some(k) => app.store.load(k).await.filter(|chain| !chain.is_empty()),
        None => None,
    };
    let full = |key, ids, roles, estimate, chain| Look {
        key,
        ids,
        roles,
        estimate,
        chain,
        untouched: None,
    };
    if chain.is_some() {
        return Some(full(key, ids, roles, estimate, chain));
    }
    // The decision the full path makes on these messages with no fold
    // stored, on the same measure: nothing due, nothing to compress.
    let policy = app.config.policy_for(provider, &raw.model);
    let budget = Budget::for_request(&app.config, &policy, &estimate, now_unix());
    let counts = estimate
        .messages
        .iter()
        .map(|&c| estimate.calibrated(u64::from(c)));
    let due = fold::due(
        &Measured::as_sent(&roles, counts, &budget),
        &policy,
        &budget,
    );
    // Older turns to compress need the full path too (one rule: `select`).
    let compress = || {
        let keyed = key.is_some();
        compress_settings(app, (provider, &raw.model), keyed, api).is_some_and(|settings| {
            let roles: Vec<Option<Role>> = roles.iter().copied().map(Some).collect();
            !compress::select(
                &roles,
                &estimate.messages,
                &settings,
                policy.preserve_recent,
            )
            .is_empty()
        })
    };
    if due.reason.is_some() || (due.prefold && key.is_some()) || compress() {
        return Some(full(key, ids, roles, estimate, None));
    }
    let prepared = Prepared::untouched(&estimate, &ids);
    Some(Look {
        untouched: Some(prepared),
        ..full(key, ids, roles, estimate, None)
    })
}

impl Look {
    /// A request whose model's window is not known: keyed (for the
    /// response's conversation header and the dashboard's turns) but
    /// forwarded untouched, no fold looked up or planned.
    pub fn unknown_window(
        key: Option<ConvKey>,
        estimate: Estimate,
        ids: Vec<MessageId>,
        roles: Vec<Role>,
    ) -> Self {
        Self {
            key,
            untouched: Some(Prepared::untouched(&estimate, &ids)),
            ids,
            roles,
            estimate,
            chain: None,
        }
    }

    /// A request that goes upstream untouched whatever its size (its
    /// history is held upstream, or it has none to fold): no key, no chain.
    pub fn opaque(estimate: Estimate, ids: Vec<MessageId>, roles: Vec<Role>) -> Self {
        Self {
            key: None,
            untouched: Some(Prepared::untouched(&estimate, &ids)),
            ids,
            roles,
            estimate,
            chain: None,
        }
    }
}

/// Each engine message's count, role and identity, read from the raw
/// texts: a unit whose text was seen before costs a hash and a cache
/// lookup; a new one is parsed and made into its engine message as the
/// decoder makes it. `None` when a unit cannot be read. On an API that
/// answers calls by position, a unit is read (and cached) with whether
/// the unit before it makes calls, which the cache tells for that one.
fn count(units: &RawUnits<'_>, api: Api, raw: &RawRequest<'_>) -> Option<Vec<RawCount>> {
    let mut out = Vec::with_capacity(raw.pinned.len() + raw.units.len());
    // The API's seed, hashed once a request (not once a unit).
    let seed = XxHash3_64::oneshot(api.name().as_bytes());
    for (name, field) in &raw.pinned {
        let key = unit_key(seed, false, [name.as_bytes(), *field]);
        out.push(units.count(key, || raw_pinned(name, field))?);
    }
    raw.read_units(api, &mut out, |items, after_calls| {
        let key = unit_key(seed, after_calls, items.iter().copied());
        let counted = units.count(key, || raw_unit(api, items, after_calls))?;
        Some((counted, counted.calls))
    })?;
    Some(out)
}

/// The count cache's key for a unit of the API whose `seed` (its name's
/// hash) is given, by its items' texts (and whether it follows calls, on
/// an API that answers by position). A unit of one text (most are) is
/// hashed in one call, seeded by the API's name (a tenth of the hashing's
/// instructions fewer than the streaming hasher on long texts); a unit of
/// several texts, by the streaming hasher over the API's name and the
/// texts, each after a separator.
fn unit_key<'t>(seed: u64, after_calls: bool, texts: impl IntoIterator<Item = &'t [u8]>) -> u128 {
    let mut texts = texts.into_iter().peekable();
    let first = texts.next().unwrap_or_default();
    let seed = seed ^ u64::from(after_calls);
    if texts.peek().is_none() {
        return XxHash3_128::oneshot_with_seed(seed, first);
    }
    let mut h = XxHash3_128::new();
    h.write(&seed.to_le_bytes());
    h.write(b"\x1e");
    h.write(first);
    for text in texts {
        h.write(b"\x1e");
        h.write(text);
    }
    h.finish_128()
}

/// The request's older-turn compression settings, the one derivation both
/// paths use (the fast path asks whether they select anything): `None`
/// when compression is off, without an archive or a conversation key
/// (nothing may leave the view without a tier below it); assistant answers
/// only on an API that compresses them (only tool results keep their wire
/// pairing on the Anthropic and Responses APIs).
pub(super) fn compress_settings(
    app: &App,
    (provider, model): (&str, &str),
    keyed: bool,
    api: Api,
) -> Option<Compress> {
    // The cheap conditions first: without an archive or a key the
    // settings are not looked up (with both, as in bench/instructions.sh,
    // this saves nothing).
    if !(keyed && app.archive.enabled()) {
        return None;
    }
    let mut settings = app.config.compress_for(provider, model);
    settings.assistant &= api.compresses_answers();
    settings.active().then_some(settings)
}
