//! Recall results that fit the window: each call of a round is answered
//! with excerpts within its share of the room the window has left
//! ([`room`](super::room)); excerpts that do not fit whole are cut to the
//! best hit's matching lines, and a call with no room at all gets a
//! one-line "no room" answer instead of a request that cannot fit.

use super::room::{self, Fit};
use crate::api::recall::calls::Call;
use crate::app::App;
use crate::archive::query::{self, Query};
use crate::state::ConvKey;
use serde_json::{Value, json};

/// The texts answering one round's calls, in order, and how many had to
/// be shortened or refused for room.
#[derive(Debug, Default)]
pub(super) struct Answers {
    pub texts: Vec<String>,
    pub shortened: u64,
    pub refused: u64,
}

/// Tries at shortening before a call is refused (each aims lower).
const ATTEMPTS: u32 = 4;

/// Answers `calls` from the conversation's archive within `room` tokens in
/// all (an equal share each), `model` counting.
pub(super) async fn answer(
    app: &App,
    key: &ConvKey,
    model: &str,
    calls: &[Call],
    room: u32,
) -> Answers {
    let share = room / u32::try_from(calls.len().max(1)).unwrap_or(u32::MAX);
    let wanted = app.config.archive.recall_tokens;
    let tokens = |text: &str| text_tokens(app, model, text);
    let mut out = Answers::default();
    for call in calls {
        let Some(q) = call.query() else {
            out.texts.push(call.result_text(None));
            continue;
        };
        let hits = app.archive.hits(key, &q, query::RECALL_HITS).await;
        let parsed = Query::shape(&q);
        let whole = call.result_text(Some(&query::excerpts(&hits, &parsed, wanted)));
        let text = match room::fit(tokens(&whole), share) {
            Fit::Whole(_) => Some(whole),
            Fit::Shortened(_) => {
                let text = shortened(call, &hits, &parsed, share, &tokens);
                out.shortened += u64::from(text.is_some());
                text
            }
            Fit::NoRoom => None,
        };
        match text {
            Some(text) => out.texts.push(text),
            None => {
                out.refused += 1;
                out.texts.push(call.no_room_text());
            }
        }
        tracing::debug!(conversation = %key.conversation, query = %q, hits = hits.len(), share, "recall");
    }
    out
}

/// The call's answer cut to matching lines within `share` tokens;
/// `None` when nothing fits.
fn shortened(
    call: &Call,
    hits: &[crate::archive::Hit],
    parsed: &Query,
    share: u32,
    tokens: &dyn Fn(&str) -> u32,
) -> Option<String> {
    // The answer's heading, about as long as the empty answer's line.
    let framing = tokens(&call.result_text(Some(&[])));
    within(share, framing, tokens, &|budget| {
        let excerpts = query::matching_lines(hits, parsed, budget);
        (!excerpts.is_empty()).then(|| call.result_text(Some(&excerpts)))
    })
}

/// The text `make` writes for an excerpt budget, counted within `share`
/// tokens: the first budget is the share less `framing` (the tokens the
/// text takes besides its excerpts), then lower while the count says it
/// does not fit.
/// `None` when no budget of at least [`room::SMALLEST`] fits or `make`
/// has nothing.
pub(super) fn within(
    share: u32,
    framing: u32,
    tokens: &dyn Fn(&str) -> u32,
    make: &dyn Fn(u32) -> Option<String>,
) -> Option<String> {
    let mut budget = share.saturating_sub(framing);
    for _ in 0..ATTEMPTS {
        if budget < room::SMALLEST {
            return None;
        }
        let text = make(budget)?;
        let used = tokens(&text);
        if used <= share {
            return Some(text);
        }
        // Aim below what the count says, by the overshoot and a tenth.
        let scaled = u64::from(budget) * u64::from(share) * 9 / (u64::from(used) * 10);
        budget = u32::try_from(scaled).unwrap_or(0);
    }
    None
}

/// Tokens of `text` as one message's content, not calibrated.
pub(super) fn text_tokens(app: &App, model: &str, text: &str) -> u32 {
    app.tokens
        .message_tokens(model, &json!({"role": "tool", "content": text}))
}

/// Tokens of items foldgate adds to a request (a call message, results,
/// the tool), counted on their JSON text: every field counts, in any API.
pub(super) fn json_tokens(app: &App, model: &str, items: &[Value]) -> u32 {
    items
        .iter()
        .map(|v| text_tokens(app, model, &v.to_string()))
        .fold(0u32, u32::saturating_add)
}
