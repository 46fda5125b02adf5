//! Pins: the messages coding agents keep their standing instructions in,
//! kept verbatim through every fold (plans: [`super::plan_call`]).
//!
//! - **Pins.** A message after the pinned head whose text matches one of
//!   `policy.pin` (agent instruction files, system reminders) is never
//!   folded: the view shows it verbatim, in order, ahead of the summary.
//!   Only `user` (and later `system`/`developer`) messages are pinned: a
//!   tool result or a tool call stays with its pair. Pins take at most
//!   `policy.pin_ratio` of the window; over it the oldest fold.

use crate::config::Policy;
use crate::message::{Role, is_role};
use serde_json::Value;

/// Whether `message` is pinned by `policy.pin`.
pub fn is_pin(message: &Value, policy: &Policy) -> bool {
    let pinnable = is_role(message, Role::User) || is_role(message, Role::Pinned);
    pinnable && policy.pin.is_match(&content_text(message))
}

/// The pins among `messages[from..to)` that stay within `budget` tokens,
/// newest first kept, returned ascending, and the older pins over the
/// budget (descending). `skip` (the kept last user message) is never a pin: it is
/// shown anyway.
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
    let mut used = 0u64;
    for i in (from..to.min(messages.len())).rev() {
        if Some(i) == skip || !is_pin(&messages[i], policy) {
            continue;
        }
        let tokens = u64::from(counts.get(i).copied().unwrap_or(0));
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
}
