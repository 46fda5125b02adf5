//! Pins and plans: what coding agents need kept through every fold.
//!
//! - **Pins.** A message after the pinned head whose text matches one of
//!   `policy.pin` (agent instruction files, system reminders) is never
//!   folded: the view shows it verbatim, in order, ahead of the summary.
//!   Only `user` (and later `system`/`developer`) messages are pinned: a
//!   tool result or a tool call stays with its pair. Pins take at most
//!   `policy.pin_ratio` of the window; over it the oldest fold.
//! - **Plans.** The newest call of a `policy.plan_tools` tool, with its
//!   arguments, is rendered verbatim under its own heading in the summary.

use crate::config::Policy;
use crate::message::{Role, is_role};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The heading of the plan section in the summary message.
pub const PLAN_HEADING: &str = "## Current plan";

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

/// The newest plan-tool call: the tool's name and its arguments as sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanCall {
    /// The tool's name.
    pub tool: String,
    /// Its arguments, verbatim (a JSON text).
    pub arguments: String,
}

impl PlanCall {
    /// The newest call of a plan tool among `messages` (in order).
    pub fn newest<'m>(
        messages: impl DoubleEndedIterator<Item = &'m Value>,
        policy: &Policy,
    ) -> Option<Self> {
        messages.rev().find_map(|m| {
            let calls = m.get("tool_calls")?.as_array()?;
            calls.iter().rev().find_map(|call| {
                let function = call.get("function")?;
                let tool = function.get("name")?.as_str()?;
                if !policy.plan_tools.iter().any(|t| t == tool) {
                    return None;
                }
                let arguments = match function.get("arguments") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                Some(Self {
                    tool: tool.to_string(),
                    arguments,
                })
            })
        })
    }

    /// The texts of the entries this call marks completed (`status`
    /// `completed`, `done` or `complete`, in any list of objects among its
    /// arguments: TodoWrite's `todos`, update_plan's `plan`, …), each
    /// entry's string fields but its status and id joined.
    pub fn completed(&self) -> Vec<String> {
        let Ok(Value::Object(arguments)) = serde_json::from_str::<Value>(&self.arguments) else {
            return Vec::new();
        };
        arguments
            .values()
            .filter_map(Value::as_array)
            .flatten()
            .filter_map(Value::as_object)
            .filter(|entry| {
                entry
                    .get("status")
                    .and_then(Value::as_str)
                    .is_some_and(|s| matches!(s, "completed" | "done" | "complete"))
            })
            .map(|entry| {
                entry
                    .iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "status" | "id"))
                    .filter_map(|(_, v)| v.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    /// The plan section of the summary message.
    pub fn render(&self) -> String {
        format!(
            "{PLAN_HEADING}\nThe newest `{}` call folded so far, verbatim, with its completed and pending items (a later call in the conversation supersedes it):\n{}",
            self.tool, self.arguments
        )
    }
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
    fn the_newest_plan_call_wins() {
        let policy = Policy::default();
        let call = |name: &str, args: &str| {
            json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                "function": {"name": name, "arguments": args}}]})
        };
        let ms = [
            call("TodoWrite", r#"{"todos":[1]}"#),
            call("bash", "{}"),
            call("TodoWrite", r#"{"todos":[2]}"#),
            json!({"role": "tool", "tool_call_id": "c", "content": "ok"}),
        ];
        let plan = PlanCall::newest(ms.iter(), &policy).unwrap();
        assert_eq!(plan.arguments, r#"{"todos":[2]}"#);
        assert!(plan.render().starts_with(PLAN_HEADING));
        assert_eq!(PlanCall::newest(ms[1..2].iter(), &policy), None);
    }

    #[test]
    fn completed_entries_are_read_from_the_plan_tools_lists() {
        let todo = PlanCall {
            tool: "TodoWrite".into(),
            arguments: json!({"todos": [
                {"id": "1", "content": "Fix INV-QP20931", "status": "completed", "activeForm": "Fixing it"},
                {"id": "2", "content": "Deploy falcon.corp", "status": "in_progress"},
            ]})
            .to_string(),
        };
        assert_eq!(
            todo.completed(),
            vec!["Fix INV-QP20931 Fixing it".to_owned()]
        );
        let codex = PlanCall {
            tool: "update_plan".into(),
            arguments: json!({"explanation": "x", "plan": [
                {"step": "Run cargo test -p billing", "status": "completed"},
                {"step": "Open a PR", "status": "pending"},
            ]})
            .to_string(),
        };
        assert_eq!(
            codex.completed(),
            vec!["Run cargo test -p billing".to_owned()]
        );
        let broken = PlanCall {
            tool: "TodoWrite".into(),
            arguments: "{not json".into(),
        };
        assert!(broken.completed().is_empty());
    }
}
