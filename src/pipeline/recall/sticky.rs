//! Injected recall that keeps its place: a block injected before a user
//! message is shown again before that message, with the same bytes, on
//! the conversation's later requests, until a fold absorbs the message
//! (or the window has no room for it). A block that moved to the newest
//! user message on every turn re-billed itself and the message after it
//! on every request (the prefix a prompt cache serves ended before it);
//! kept in place, it is billed once and read from the cache after
//! (docs/folding.md#injected-recall).
//!
//! The blocks are kept in this process only, per conversation, a few at
//! most: another instance, or a restart, shows the older ones no more
//! (a cache miss, nothing lost: the archive still holds every message).

use crate::fold::MessageId;
use crate::fold::view::Item;
use crate::message::Role;
use crate::state::ConvKey;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Blocks kept per conversation (the oldest go first).
const PER_CONVERSATION: usize = 16;
/// Conversations kept; past it the map starts over (a cache miss each).
const CONVERSATIONS: usize = 4_096;

/// One injected block and the user message it goes before.
#[derive(Debug, Clone)]
struct Kept {
    /// The message's place among the client's user messages (0: the first).
    user: usize,
    /// Its identity, so an edited history does not get it before another.
    id: MessageId,
    text: Arc<str>,
    /// Its estimated tokens (not calibrated).
    tokens: u32,
}

/// The blocks earlier requests injected, per conversation.
#[derive(Debug, Default)]
pub struct Stickies(Mutex<HashMap<ConvKey, Vec<Kept>>>);

/// A block to place: before the user turn `from_end` user turns before the
/// last one (0: the last).
#[derive(Debug, Clone)]
pub struct Placed {
    pub from_end: usize,
    pub text: Arc<str>,
}

impl Stickies {
    /// Remembers the block injected before the request's last user
    /// message (`roles` and `ids`: the request's messages').
    pub fn remember(
        &self,
        key: &ConvKey,
        (roles, ids): (&[Role], &[MessageId]),
        text: &str,
        tokens: u32,
    ) {
        let Some(last) = roles.iter().rposition(|&r| r == Role::User) else {
            return;
        };
        let user = roles[..last].iter().filter(|&&r| r == Role::User).count();
        let Some(&id) = ids.get(last) else { return };
        let Ok(mut map) = self.0.lock() else { return };
        if map.len() >= CONVERSATIONS && !map.contains_key(key) {
            map.clear();
        }
        let kept = map.entry(key.clone()).or_default();
        // A regenerated turn replaces the block of its message.
        kept.retain(|k| k.user != user);
        kept.push(Kept {
            user,
            id,
            text: Arc::from(text),
            tokens,
        });
        if kept.len() > PER_CONVERSATION {
            kept.remove(0);
        }
    }

    /// The blocks to show again in this request's view (`items`, before
    /// the fill), with their tokens: each before its user message while
    /// that message is in the view's tail, the same message as when it was
    /// injected, and not the last user message (which gets this turn's
    /// block). Blocks whose message a fold absorbed are forgotten.
    pub fn kept(
        &self,
        key: &ConvKey,
        (roles, ids): (&[Role], &[MessageId]),
        items: &[Item],
    ) -> (Vec<Placed>, u32) {
        let Ok(mut map) = self.0.lock() else {
            return (Vec::new(), 0);
        };
        let Some(kept) = map.get_mut(key) else {
            return (Vec::new(), 0);
        };
        let users: Vec<usize> = (0..roles.len())
            .filter(|&i| roles[i] == Role::User)
            .collect();
        // The tail: from the first message after the summary, if any.
        let tail = items
            .iter()
            .rposition(|i| matches!(i, Item::New(_)))
            .and_then(|s| match items.get(s + 1) {
                Some(Item::Original(t)) => Some(*t),
                _ => None,
            })
            .unwrap_or(0);
        let shown = |i: usize| {
            items
                .iter()
                .any(|it| matches!(it, Item::Original(j) if *j == i))
        };
        kept.retain(|k| {
            users
                .get(k.user)
                .is_some_and(|&i| ids.get(i) == Some(&k.id) && i >= tail && shown(i))
        });
        let last = users.len().saturating_sub(1);
        let placed: Vec<&Kept> = kept.iter().filter(|k| k.user < last).collect();
        let tokens: u32 = placed.iter().map(|k| k.tokens).sum();
        if placed.is_empty() {
            return (Vec::new(), 0);
        }
        let placed = placed
            .into_iter()
            .map(|k| Placed {
                from_end: last - k.user,
                text: k.text.clone(),
            })
            .collect();
        (placed, tokens)
    }
}

/// Whether a wire item is a user turn of the client's: the user's role,
/// no tool results in it (Anthropic's `tool_result` blocks, Gemini's
/// function responses).
fn user_turn(item: &Value) -> bool {
    let role = item.get("role").and_then(Value::as_str) == Some("user");
    let blocks = item
        .get("content")
        .or_else(|| item.get("parts"))
        .and_then(Value::as_array);
    let results = blocks.is_some_and(|b| {
        b.iter().any(|x| {
            x.get("type").and_then(Value::as_str) == Some("tool_result")
                || x.get("functionResponse").is_some()
        })
    });
    role && !results
}

/// Places `blocks` in the conversation's wire `items`, each before (or,
/// where the API wants it, in front of the text of) its user turn, as
/// `place` places a block before the last user turn of the items it gets.
pub fn place(items: &mut Vec<Value>, blocks: &[Placed], place: &dyn Fn(&mut Vec<Value>, &str)) {
    let turns: Vec<usize> = (0..items.len()).filter(|&i| user_turn(&items[i])).collect();
    let mut at: Vec<(usize, &str)> = blocks
        .iter()
        .filter_map(|b| {
            let k = turns.len().checked_sub(1 + b.from_end)?;
            Some((turns[k], &*b.text))
        })
        .collect();
    // From the last, so the earlier places stay where they are.
    at.sort_by_key(|a| std::cmp::Reverse(a.0));
    for (k, text) in at {
        let rest = items.split_off(k + 1);
        place(items, text);
        items.extend(rest);
    }
}
