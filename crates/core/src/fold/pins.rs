//! Pins: the messages coding agents keep their standing instructions in,
//! kept verbatim through every fold (plans: [`super::plan_call`]).
//!
//! - **Pins.** A message after the pinned head whose text matches one of
//!   `policy.pin` (agent instruction files, system reminders) is never
//!   folded: the view shows it verbatim, in order, ahead of the summary.
//!   Only `user` (and later `system`/`developer`) messages are pinned: a
//!   tool result or a tool call stays with its pair. Pins take at most
//!   `policy.pin_ratio` of the window; over it the oldest fold.
//! - **What foldgate does not understand** ([`is_opaque`]: an unknown
//!   item, part or block, a provider's compaction item) is a pin whatever
//!   its text, and over the budget too: folding it would summarize it
//!   from placeholders. One that makes tool calls or answers them is
//!   pinned with its whole exchange (the call and every result), so the
//!   pair stays whole ahead of the summary.

use crate::config::Policy;
use crate::message::{Role, is_opaque, is_role, makes_calls};
use serde_json::Value;
use std::ops::Range;

/// Whether `message` is pinned by `policy.pin`.
pub fn is_pin(message: &Value, policy: &Policy) -> bool {
    let pinnable = is_role(message, Role::User) || is_role(message, Role::Pinned);
    pinnable && policy.pin.is_match(&content_text(message))
}

/// The messages of `messages[from..to)` that are pinned because foldgate
/// does not understand them: each opaque message, and with an opaque tool
/// call or result its whole exchange (the assistant message making the
/// calls and the results right after it).
fn opaque_pins(messages: &[Value], range: Range<usize>) -> Vec<bool> {
    let n = messages.len();
    let mut forced = vec![false; n];
    for i in range.clone() {
        if !is_opaque(&messages[i]) {
            continue;
        }
        let in_exchange = makes_calls(&messages[i]) || is_role(&messages[i], Role::Tool);
        if !in_exchange {
            forced[i] = true;
            continue;
        }
        let caller = (0..=i)
            .rev()
            .find(|&a| !is_role(&messages[a], Role::Tool))
            .filter(|&a| makes_calls(&messages[a]))
            .unwrap_or(i);
        let end = (caller + 1..n)
            .find(|&b| !is_role(&messages[b], Role::Tool))
            .unwrap_or(n);
        for flag in &mut forced[caller.max(range.start)..end.min(range.end)] {
            *flag = true;
        }
    }
    forced
}

/// The pins among `messages[from..to)` that stay within `budget` tokens,
/// newest first kept, returned ascending, and the older pins over the
/// budget (descending; never one foldgate does not understand, which is
/// always kept). `skip` (the kept last user message) is never a pin: it
/// is shown anyway.
pub(crate) fn choose(
    messages: &[Value],
    counts: &[u32],
    (from, to): (usize, usize),
    skip: Option<usize>,
    policy: &Policy,
    budget: u64,
) -> (Vec<usize>, Vec<usize>) {
    let mut kept = Vec::new();
    let mut over = Vec::new();
    let range = from..to.min(messages.len());
    let tokens = |i: usize| u64::from(counts.get(i).copied().unwrap_or(0));
    let mut forced = opaque_pins(messages, range.clone());
    if let Some(k) = skip.and_then(|k| forced.get_mut(k)) {
        *k = false;
    }
    // Opaque pins are never folded: the budget only tells the other pins
    // how much room they leave.
    let mut used: u64 = range.clone().filter(|&i| forced[i]).map(tokens).sum();
    for i in range.rev() {
        if forced[i] {
            kept.push(i);
            continue;
        }
        if Some(i) == skip || !is_pin(&messages[i], policy) {
            continue;
        }
        let tokens = tokens(i);
        if over.is_empty() && used + tokens <= budget {
            used += tokens;
            kept.push(i);
        } else {
            over.push(i);
        }
    }
    kept.reverse();
    (kept, over)
}

/// A message's text: its string content or its text parts.
fn content_text(message: &Value) -> std::borrow::Cow<'_, str> {
    match message.get("content") {
        Some(Value::String(s)) => s.as_str().into(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
            .into(),
        _ => "".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pins_are_matching_user_messages_within_the_budget() {
        let policy = Policy::default();
        let ms = vec![
            json!({"role": "system", "content": "sys"}),
            json!({"role": "user", "content": [{"type": "text", "text": "<system-reminder>old</system-reminder>"}]}),
            json!({"role": "assistant", "content": "<system-reminder> quoted"}),
            json!({"role": "user", "content": "<user_instructions>new</user_instructions>"}),
            json!({"role": "user", "content": "plain"}),
        ];
        let counts = [1, 10, 10, 10, 10];
        assert_eq!(
            choose(&ms, &counts, (1, 5), None, &policy, 100),
            (vec![1, 3], vec![])
        );
        assert_eq!(
            choose(&ms, &counts, (1, 5), None, &policy, 15),
            (vec![3], vec![1])
        );
        assert_eq!(
            choose(&ms, &counts, (1, 5), Some(3), &policy, 100),
            (vec![1], vec![])
        );
    }

    #[test]
    fn opaque_messages_are_pins_over_the_budget() {
        let policy = Policy::default();
        let ms = vec![
            json!({"role": "user", "content": "task"}),
            json!({"role": "developer", "content": "{}", "foldgate_opaque": "compaction"}),
            json!({"role": "user", "content": [{"type": "hologram"}]}),
            json!({"role": "assistant", "content": "", "foldgate_opaque": "x", "tool_calls": [{"id": "a"}]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "r"}),
            json!({"role": "user", "content": "<system-reminder>r</system-reminder>"}),
            json!({"role": "assistant", "tool_calls": [{"id": "b"}]}),
            json!({"role": "tool", "tool_call_id": "b", "content": [{"type": "hologram"}]}),
            json!({"role": "user", "content": "last"}),
        ];
        let counts = [5, 50, 50, 50, 5, 10, 5, 5, 5];
        assert_eq!(
            choose(&ms, &counts, (0, 9), Some(8), &policy, 20),
            (vec![1, 2, 3, 4, 6, 7], vec![5])
        );
    }
}
