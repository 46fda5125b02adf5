//! Plans: which tool call is the agent's todo list — by the shape of its
//! arguments, or by name when `policy.plan_tools` is set — and the newest
//! one, rendered verbatim in the summary.
//!
//! **The shape.** A call's arguments (a JSON object, sent as a JSON text in
//! chat completions' `function.arguments` or as an object) hold a plan when
//! one of their top-level values is a non-empty list whose items are all
//! *entries*: objects with a `status` string and a text (a string field
//! other than `status` and `id`). Claude Code's `TodoWrite`
//! (`{"todos":[{"content","status","activeForm"}]}`), Codex's
//! `update_plan` (`{"plan":[{"step","status"}]}`), OpenCode's `todowrite`
//! and Gemini CLI's `write_todos` (`{"todos":[{"description","status"}]}`)
//! all have it, whatever the tool is called. The engine sees every API's
//! calls as chat-completions `tool_calls` (each codec converts Anthropic's
//! `tool_use.input`, Responses' `function_call.arguments` and Gemini's
//! `functionCall.args` to a JSON text), so one rule serves them all.
//!
//! **The override.** `policy.plan_tools` unset: the shape decides. Set to
//! a list of names: a call is a plan exactly when its tool is on the list,
//! whatever its arguments hold (`[]`: no call is a plan).

use crate::config::Policy;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;

/// The heading of the plan section in the summary message.
pub const PLAN_HEADING: &str = "## Current plan";

/// The fields of an entry that are not its text.
fn is_text_key(key: &str) -> bool {
    !matches!(key, "status" | "id")
}

/// An entry's status, when `value` is a plan entry: an object with a
/// `status` string and a text (a string field other than `status`/`id`).
fn entry_status(value: &Value) -> Option<&str> {
    let entry = value.as_object()?;
    let status = entry.get("status")?.as_str()?;
    let has_text = entry.iter().any(|(k, v)| is_text_key(k) && v.is_string());
    has_text.then_some(status)
}

/// Whether `arguments` (a call's arguments, parsed) hold a plan: a
/// non-empty list of entries at one of their top-level keys.
pub fn is_plan(arguments: &Value) -> bool {
    arguments.as_object().is_some_and(holds_plan)
}

/// Whether one of `fields` is a non-empty list of entries.
fn holds_plan(fields: &Map<String, Value>) -> bool {
    fields
        .values()
        .filter_map(Value::as_array)
        .any(|list| !list.is_empty() && list.iter().all(|item| entry_status(item).is_some()))
}

/// A call's arguments as an object: parsed from their JSON text, or as
/// sent when a client sent an object.
fn arguments_object(arguments: Option<&Value>) -> Option<Cow<'_, Map<String, Value>>> {
    match arguments? {
        Value::Object(fields) => Some(Cow::Borrowed(fields)),
        Value::String(text) => match serde_json::from_str(text) {
            Ok(Value::Object(fields)) => Some(Cow::Owned(fields)),
            _ => None,
        },
        _ => None,
    }
}

/// Whether a call of `tool` with `arguments` (as the engine holds them: a
/// JSON text or an object) is a plan under `policy.plan_tools`.
pub fn is_plan_call(tool: &str, arguments: Option<&Value>, policy: &Policy) -> bool {
    if let Some(names) = &policy.plan_tools {
        return names.iter().any(|name| name == tool);
    }
    // Most calls cannot hold an entry: skip parsing their arguments.
    if let Some(Value::String(text)) = arguments {
        if !text.contains("\"status\"") {
            return false;
        }
    }
    arguments_object(arguments).is_some_and(|fields| holds_plan(&fields))
}

/// The newest plan call: the tool's name and its arguments as sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanCall {
    /// The tool's name.
    pub tool: String,
    /// Its arguments, verbatim (a JSON text).
    pub arguments: String,
}

impl PlanCall {
    /// The newest plan call among `messages` (in order), as
    /// [`is_plan_call`] decides.
    pub fn newest<'m>(
        messages: impl DoubleEndedIterator<Item = &'m Value>,
        policy: &Policy,
    ) -> Option<Self> {
        messages.rev().find_map(|m| {
            let calls = m.get("tool_calls")?.as_array()?;
            calls.iter().rev().find_map(|call| {
                let function = call.get("function")?;
                let tool = function.get("name")?.as_str()?;
                let arguments = function.get("arguments");
                if !is_plan_call(tool, arguments, policy) {
                    return None;
                }
                let arguments = match arguments {
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
    /// `completed`, `done` or `complete`, in any list among its arguments:
    /// TodoWrite's `todos`, update_plan's `plan`, …), each entry's text
    /// fields joined.
    pub fn completed(&self) -> Vec<String> {
        let Ok(Value::Object(arguments)) = serde_json::from_str::<Value>(&self.arguments) else {
            return Vec::new();
        };
        arguments
            .values()
            .filter_map(Value::as_array)
            .flatten()
            .filter(|entry| {
                entry_status(entry).is_some_and(|s| matches!(s, "completed" | "done" | "complete"))
            })
            .filter_map(Value::as_object)
            .map(|entry| {
                entry
                    .iter()
                    .filter(|(k, _)| is_text_key(k))
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, arguments: Value) -> Value {
        json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": name, "arguments": arguments}}]})
    }

    fn named(names: &[&str]) -> Policy {
        Policy {
            plan_tools: Some(names.iter().map(|n| n.to_string()).collect()),
            ..Policy::default()
        }
    }

    /// The agents' todo tools, as each sends its arguments.
    fn agents() -> [(&'static str, Value); 4] {
        [
            (
                "TodoWrite",
                json!({"todos": [
                {"content": "Fix the build", "status": "in_progress", "activeForm": "Fixing"}]}),
            ),
            (
                "update_plan",
                json!({"explanation": "why", "plan": [
                {"step": "Run the tests", "status": "pending"}]}),
            ),
            (
                "todowrite",
                json!({"todos": [
                {"content": "Ship", "status": "pending", "priority": "high", "id": "1"}]}),
            ),
            (
                "write_todos",
                json!({"todos": [
                {"description": "Port the parser", "status": "completed"},
                {"description": "Drop the shim", "status": "cancelled"}]}),
            ),
        ]
    }

    #[test]
    fn every_agents_todo_tool_is_a_plan_by_shape_as_text_or_object() {
        let policy = Policy::default();
        assert_eq!(policy.plan_tools, None);
        for (tool, args) in agents() {
            assert!(is_plan(&args), "{tool}");
            for sent in [Value::String(args.to_string()), args.clone()] {
                assert!(is_plan_call(tool, Some(&sent), &policy), "{tool}: {sent}");
                assert!(is_plan_call("any_name", Some(&sent), &policy), "{sent}");
            }
        }
    }

    #[test]
    fn near_misses_are_not_plans() {
        let policy = Policy::default();
        for args in [
            json!({"todos": [{"content": "x"}]}),
            json!({"todos": [{"content": "x", "status": 1}]}),
            json!({"todos": [{"content": "x", "status": null}]}),
            json!({"todos": [{"status": "pending", "id": "1"}]}),
            json!({"todos": [{"content": "x", "status": "pending"}, {"content": "y"}]}),
            json!({"todos": ["write the tests", "status"]}),
            json!({"todos": []}),
            json!({"todo": {"content": "x", "status": "pending"}}),
            json!([{"content": "x", "status": "pending"}]),
            json!({"command": "echo \"status\""}),
        ] {
            assert!(!is_plan(&args), "{args}");
            let text = Value::String(args.to_string());
            assert!(!is_plan_call("TodoWrite", Some(&text), &policy), "{args}");
        }
        let broken = Value::String(r#"{"todos": [{"status": "pending""#.into());
        assert!(!is_plan_call("TodoWrite", Some(&broken), &policy));
        assert!(!is_plan_call("TodoWrite", None, &policy));
    }

    #[test]
    fn plan_tools_set_names_the_plans_whatever_their_shape() {
        let gemini = named(&["write_todos"]);
        let [todo, .., write_todos] = agents();
        assert!(!is_plan_call(todo.0, Some(&todo.1), &gemini));
        assert!(is_plan_call(write_todos.0, Some(&write_todos.1), &gemini));
        let markdown = json!("- [x] parser\n- [ ] shim");
        assert!(is_plan_call("write_todos", Some(&markdown), &gemini));
        let none = named(&[]);
        assert!(!is_plan_call(write_todos.0, Some(&write_todos.1), &none));
    }

    #[test]
    fn the_newest_plan_call_wins() {
        let policy = Policy::default();
        let todos =
            |k: u32| json!({"todos": [{"content": format!("rev {k}"), "status": "pending"}]});
        let ms = [
            call("TodoWrite", Value::String(todos(1).to_string())),
            call("bash", json!("{}")),
            call("write_todos", todos(2)),
            call("bash", json!(r#"{"status": "x"}"#)),
            json!({"role": "tool", "tool_call_id": "c", "content": "ok"}),
        ];
        let plan = PlanCall::newest(ms.iter(), &policy).unwrap();
        assert_eq!(
            (plan.tool.as_str(), plan.arguments.as_str()),
            ("write_todos", todos(2).to_string().as_str())
        );
        assert!(plan.render().starts_with(PLAN_HEADING));
        assert_eq!(PlanCall::newest(ms[1..2].iter(), &policy), None);
        let named = PlanCall::newest(ms.iter(), &named(&["TodoWrite"])).unwrap();
        assert_eq!(named.arguments, todos(1).to_string());
    }

    #[test]
    fn completed_entries_are_read_from_the_plan_lists() {
        let plan = |tool: &str, args: Value| PlanCall {
            tool: tool.into(),
            arguments: args.to_string(),
        };
        let todo = plan(
            "TodoWrite",
            json!({"todos": [
                {"id": "1", "content": "Fix INV-QP20931", "status": "completed", "activeForm": "Fixing it"},
                {"id": "2", "content": "Deploy falcon.corp", "status": "in_progress"},
            ]}),
        );
        assert_eq!(
            todo.completed(),
            vec!["Fix INV-QP20931 Fixing it".to_owned()]
        );
        let codex = plan(
            "update_plan",
            json!({"explanation": "x", "plan": [
                {"step": "Run cargo test -p billing", "status": "completed"},
                {"step": "Open a PR", "status": "pending"},
            ]}),
        );
        assert_eq!(
            codex.completed(),
            vec!["Run cargo test -p billing".to_owned()]
        );
        let [.., gemini] = agents();
        assert_eq!(
            plan(gemini.0, gemini.1).completed(),
            vec!["Port the parser".to_owned()]
        );
        let broken = PlanCall {
            tool: "TodoWrite".into(),
            arguments: "{not json".into(),
        };
        assert!(broken.completed().is_empty());
    }
}
