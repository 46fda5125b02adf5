//! The view: what foldgate sends upstream instead of the full history.
//!
//! `view = pinned + (pins) + [summary] + (kept user message) + M[p+covered..n)`.
//! The pinned head is the leading run of `system`/`developer` messages;
//! pins are the covered messages `policy.pin` keeps (see [`super::pins`]),
//! in order, ahead of the summary.
//! Where the summary goes is the [`Placement`]:
//!
//! - `System` (default): its own `system` message right after the pinned head.
//! - `Merge`: appended to the last pinned message — a string content gets
//!   `"\n\n"` and the summary text, a parts array gets one more `text` part.
//!   Without a pinned message (or with content of another shape) it falls
//!   back to `System`.
//! - `User`: a `user` message. When the next message in the view is also a
//!   `user` message, a fixed assistant message ([`ACK_TEXT`]) goes between
//!   them so roles keep alternating for templates that require it; so it
//!   does after each pin.
//!
//! Kept messages are cloned untouched. The layout is a pure function of the
//! messages, the state and the placement, so equal inputs give equal bytes.

use super::FoldError;
use super::state::FoldState;
use crate::config::Placement;
use crate::message::{Role, is_role, pinned_len};
use serde_json::{Value, json};

/// The assistant message inserted after a `user`-placed summary when the
/// next message is also from the user.
pub const ACK_TEXT: &str = "Noted.";

/// The fixed assistant message of the `User` placement.
pub fn ack_message() -> Value {
    json!({"role": "assistant", "content": ACK_TEXT})
}

/// One entry of a view: a request message by index, one foldgate made, or
/// a request message compressed to a stub (its index and the stub, in the
/// engine's chat-completions form; a codec keeps the wire pairing).
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Original(usize),
    New(Value),
    Stub(usize, Value),
}

/// [`layout`] for a state that planning matched or made from these
/// very messages: the match is not hashed again (debug builds check it).
pub fn layout_planned(
    request: super::Messages<'_>,
    state: &FoldState,
    placement: Placement,
) -> Vec<Item> {
    let p = pinned_len(request.values);
    debug_assert!(
        state.matches_ids(&request.ids[p..]),
        "a planned state must match"
    );
    layout(request.values, Some(state), placement)
}

/// Lays out the view of `messages` under `state` (assumed to match).
pub fn layout(messages: &[Value], state: Option<&FoldState>, placement: Placement) -> Vec<Item> {
    let Some(state) = state else {
        return (0..messages.len()).map(Item::Original).collect();
    };
    let p = pinned_len(messages);
    let text = state.render();
    let pins = &state.retained.pins;
    let mut items: Vec<Item> = Vec::with_capacity(messages.len() + 3 + pins.len() - state.covered);
    let merged = match placement {
        Placement::Merge if p > 0 => merge_into(&messages[p - 1], &text),
        _ => None,
    };
    let kept = state.kept_user.map(|k| p + k);
    let first_after = kept.or(Some(p + state.covered).filter(|&i| i < messages.len()));
    let pinned = pins.iter().map(|&k| Item::Original(p + k));
    if let Some(merged) = merged {
        items.extend((0..p - 1).map(Item::Original));
        items.push(Item::New(merged));
        items.extend(pinned);
    } else {
        items.extend((0..p).map(Item::Original));
        for pin in pinned {
            items.push(pin);
            // A user-placed summary follows: keep roles alternating.
            if placement == Placement::User {
                items.push(Item::New(ack_message()));
            }
        }
        let summary_role = if placement == Placement::User {
            "user"
        } else {
            "system"
        };
        items.push(Item::New(json!({"role": summary_role, "content": text})));
        let next_is_user = first_after.is_some_and(|i| is_role(&messages[i], Role::User));
        if placement == Placement::User && next_is_user {
            items.push(Item::New(ack_message()));
        }
    }
    items.extend(kept.map(Item::Original));
    items.extend((p + state.covered..messages.len()).map(Item::Original));
    items
}

/// The last pinned message with `text` appended, or `None` when its content
/// has a shape that cannot take it.
fn merge_into(pinned: &Value, text: &str) -> Option<Value> {
    let mut message = pinned.clone();
    let object = message.as_object_mut()?;
    match object.get_mut("content") {
        Some(Value::String(s)) => {
            s.push_str("\n\n");
            s.push_str(text);
        }
        Some(Value::Array(parts)) => parts.push(json!({"type": "text", "text": text})),
        Some(Value::Null) | None => {
            object.insert("content".into(), Value::String(text.to_string()));
        }
        Some(_) => return None,
    }
    Some(message)
}

/// Renders the view of `messages` under `state` (`None`: the messages as
/// they are). Fails when `state` does not match `messages` — a summary is
/// never applied to messages it was not made from.
pub fn build_view(
    messages: &[Value],
    state: Option<&FoldState>,
    placement: Placement,
) -> Result<Vec<Value>, FoldError> {
    if let Some(s) = state {
        if !s.matches(messages) {
            return Err(FoldError::StateMismatch { id: s.id.clone() });
        }
    }
    Ok(materialize(messages, layout(messages, state, placement)))
}

/// Turns a layout into messages.
pub fn materialize(messages: &[Value], items: Vec<Item>) -> Vec<Value> {
    items
        .into_iter()
        .map(|item| match item {
            Item::Original(i) => messages[i].clone(),
            Item::New(v) | Item::Stub(_, v) => v,
        })
        .collect()
}

/// Whether `view` differs from `original`; when it does not, the proxy
/// forwards the client's original bytes instead of a re-encoding.
pub fn view_differs(original: &[Value], view: &[Value]) -> bool {
    original != view
}
