//! Recall on Ollama's chat: the tool is a function tool (chat
//! completions' shape), a call of it one of the answer's
//! `message.tool_calls` (`{"function": {"name", "arguments": {…}}}`, an
//! object, whole in one streamed line), answered by a `tool` message
//! naming it in `tool_name`. The assistant message goes back as it came
//! (`thinking` included). Usage is the answer's top-level
//! `prompt_eval_count`, on its final `done: true` object.

use super::Ollama;
use super::codec::{arguments_text, call_id};
use crate::api::Recall;
use crate::api::chat::Chat;
use crate::api::recall::calls::{Call, Calls, Carry, RecallTurn};
use crate::api::recall::input::bounded;
use crate::api::recall::stream::{self, Outgoing, RoundState, Seen, Stream};
use crate::message::RECALL_TOOL;
use bytes::Bytes;
use serde_json::{Map, Value, json};

/// The field an answer reports its prompt tokens in, summed over rounds.
pub const USAGE: &str = "prompt_eval_count";

impl Recall for Ollama {
    /// A function tool, as chat completions'.
    fn recall_tool(&self) -> Value {
        Chat.recall_tool()
    }

    fn tool_name<'t>(&self, tool: &'t Value) -> Option<&'t str> {
        Chat.tool_name(tool)
    }

    /// No `format`: an answer held to JSON or a schema has no room for a
    /// call (Ollama has no `tool_choice`).
    fn free_to_call(&self, fields: &Map<String, Value>) -> bool {
        fields
            .get("format")
            .is_none_or(|f| f.is_null() || f.as_str() == Some(""))
    }

    fn calls(&self, answer: &Value) -> Calls {
        let mut calls = Calls::default();
        feed(&mut calls, 0, answer);
        calls
    }

    /// The answer's message as it came (`thinking` included).
    fn answer_messages(&self, answer: &Value, _calls: &[Call]) -> Vec<Value> {
        let message = answer.get("message").cloned();
        vec![message.unwrap_or_else(|| json!({"role": "assistant", "content": ""}))]
    }

    /// One `tool` message each, naming the tool.
    fn results(&self, calls: &[Call], texts: Vec<String>) -> Vec<Value> {
        crate::api::recall::each_result(
            calls,
            texts,
            |_, text| json!({"role": "tool", "content": text, "tool_name": RECALL_TOOL}),
        )
    }

    fn hide(&self, answer: &mut Value) {
        hide(answer);
    }

    fn stream_round(&self, last: bool, _later: bool, carry: Carry) -> Box<dyn stream::Round> {
        Box::new(Stream::<Round>::fresh(last, carry))
    }

    /// The bounded query as an object, as Ollama takes arguments.
    fn bound_calls(&self, messages: &mut [Value]) {
        for message in messages.iter_mut() {
            if let Some(Value::Array(calls)) = message.get_mut("tool_calls") {
                for call in calls
                    .iter_mut()
                    .filter(|c| Chat.tool_name(c) == Some(RECALL_TOOL))
                {
                    call["function"]["arguments"] = bounded(&arguments_text(call));
                }
            }
        }
    }
}

/// A line `{"error": "..."}`, as Ollama ends a stream that failed.
pub fn error_event(message: &str) -> Bytes {
    line_of(&json!({ "error": message }))
}

/// The calls of an answer (or a streamed line): `message.tool_calls`.
fn tool_calls(answer: &Value) -> &[Value] {
    answer
        .pointer("/message/tool_calls")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Feeds the calls of `answer` to `calls`, numbered from `from`; returns
/// the next number.
fn feed(calls: &mut Calls, from: u64, answer: &Value) -> u64 {
    let mut index = from;
    for call in tool_calls(answer) {
        calls.id(index, &call_id(call, &index.to_string()));
        let name = call.pointer("/function/name").and_then(Value::as_str);
        calls.name(index, name.unwrap_or_default());
        calls.arguments(index, &arguments_text(call));
        index += 1;
    }
    index
}

/// Removes recall calls from an answer (or a streamed line);
/// `tool_calls` goes when none is left. Returns whether any was removed.
fn hide(answer: &mut Value) -> bool {
    let Some(message) = answer.get_mut("message").and_then(Value::as_object_mut) else {
        return false;
    };
    let Some(Value::Array(calls)) = message.get_mut("tool_calls") else {
        return false;
    };
    let before = calls.len();
    calls.retain(|c| Chat.tool_name(c) != Some(RECALL_TOOL));
    let removed = calls.len() != before;
    if calls.is_empty() {
        message.remove("tool_calls");
    }
    removed
}

/// One streamed round: each line is a chunk of the answer's message, the
/// last (`done: true`) with the counts.
#[derive(Default)]
pub struct Round {
    next: u64,
    content: String,
    thinking: String,
    calls: Vec<Value>,
    usage: Option<Value>,
}

impl stream::Reader for Round {
    fn read(&mut self, state: &mut RoundState, line: &Value) {
        self.next = feed(&mut state.calls, self.next, line);
        self.calls.extend(tool_calls(line).iter().cloned());
        let message = line.get("message");
        for (field, text) in [
            ("content", &mut self.content),
            ("thinking", &mut self.thinking),
        ] {
            if let Some(piece) = message.and_then(|m| m.get(field)).and_then(Value::as_str) {
                text.push_str(piece);
            }
        }
        if let Some(count) = line.get(USAGE).filter(|u| u.is_u64()) {
            self.usage = Some(count.clone());
        }
    }

    /// Recall calls removed once the answer is mixed, a later round's
    /// text set apart, and the earlier rounds' prompt tokens added to the
    /// final line's.
    fn outgoing(&mut self, state: &mut RoundState, mut line: Value, seen: Seen<'_>) -> Outgoing {
        let mut changed = state.hold.mixed && hide(&mut line);
        changed |= stream::separate(&mut line, "/message/content", &mut state.gap);
        let count = line.get(USAGE).and_then(Value::as_u64);
        if let (Some(count), Some(prior)) = (count, seen.prior.as_u64()) {
            line[USAGE] = json!(count.saturating_add(prior));
            changed = true;
        }
        Outgoing::of(changed, || line_of(&line))
    }

    fn end(self, state: RoundState) -> Option<RecallTurn> {
        let mut message = json!({"role": "assistant", "content": self.content});
        if !self.thinking.is_empty() {
            message["thinking"] = Value::String(self.thinking);
        }
        message["tool_calls"] = Value::Array(self.calls);
        Some(RecallTurn {
            messages: vec![message],
            calls: state.calls.recalls(),
            usage: self.usage,
            carry: Carry {
                gap: state.gap,
                ..Carry::default()
            },
        })
    }
}

/// A JSON line carrying `value`.
pub fn line_of(value: &Value) -> Bytes {
    Bytes::from(format!("{value}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::recall::stream::Round as _;

    fn calls(answer: &Value) -> Calls {
        Ollama.calls(answer)
    }

    fn results(calls: &[Call], texts: Vec<String>) -> Vec<Value> {
        Ollama.results(calls, texts)
    }

    fn offerable(fields: &Map<String, Value>) -> bool {
        Ollama.recall_offerable(fields)
    }

    fn tool() -> Value {
        Ollama.recall_tool()
    }

    fn line(message: Value, done: bool) -> Bytes {
        let mut v = json!({"model": "m", "message": message, "done": done});
        if done {
            v["done_reason"] = json!("stop");
            v[USAGE] = json!(120);
            v["eval_count"] = json!(7);
        }
        line_of(&v)
    }

    fn recall_call() -> Value {
        json!({"function": {"name": RECALL_TOOL, "arguments": {"query": "port"}}})
    }

    #[test]
    fn whole_answers_calls_and_hiding() {
        let mut answer = json!({"message": {"role": "assistant", "content": "",
            "tool_calls": [recall_call(), {"function": {"name": "ls", "arguments": {}}}]}, "done": true});
        let found = calls(&answer);
        assert!(found.any_client() && !found.recall_only());
        assert_eq!(found.recalls()[0].query().as_deref(), Some("port"));
        assert!(hide(&mut answer));
        assert_eq!(tool_calls(&answer).len(), 1);
        let mut only = json!({"message": {"role": "assistant", "tool_calls": [recall_call()]}});
        assert!(calls(&only).recall_only());
        assert!(hide(&mut only));
        assert!(only["message"].get("tool_calls").is_none());
        let answered = results(&calls(&answer).recalls(), vec![]);
        assert!(answered.is_empty());
        let answered = results(
            &calls(&json!({"message": {"tool_calls": [recall_call()]}})).recalls(),
            vec!["x".into()],
        );
        assert_eq!(
            answered[0],
            json!({"role": "tool", "content": "x", "tool_name": RECALL_TOOL})
        );
        let mut turn = vec![json!({"role": "assistant", "tool_calls": [
            {"function": {"name": RECALL_TOOL, "arguments": {"query": "x".repeat(100_000)}}}]})];
        Ollama.bound_calls(&mut turn);
        assert!(turn[0]["tool_calls"][0]["function"]["arguments"]["query"].is_string());
        let fields = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert!(offerable(&fields(json!({"model": "m"}))));
        assert!(!offerable(&fields(json!({"format": "json"}))));
        assert!(!offerable(&fields(json!({"tools": [tool()]}))));
    }

    #[test]
    fn a_streamed_round_holds_from_the_recall_call_and_sums_prompt_tokens() {
        let mut r = Stream::<Round>::fresh(false, Carry::default());
        let prior = Value::Null;
        let shown = r.event(
            line(json!({"role": "assistant", "content": "Let me"}), false),
            &prior,
        );
        assert_eq!(shown.len(), 1);
        let call = json!({"role": "assistant", "content": "", "tool_calls": [recall_call()]});
        assert!(r.event(line(call, false), &prior).is_empty());
        assert!(
            r.event(
                line(json!({"role": "assistant", "content": ""}), true),
                &prior
            )
            .is_empty()
        );
        let turn = Box::new(r).end().unwrap();
        assert_eq!(turn.messages[0]["content"], "Let me");
        assert_eq!(turn.messages[0]["tool_calls"][0], recall_call());
        assert_eq!(turn.usage, Some(json!(120)));

        let mut next = Stream::<Round>::fresh(true, Carry::default());
        *next.gap() = turn.carry.gap.next_round();
        let out = next.event(
            line(json!({"role": "assistant", "content": "Port 80"}), false),
            &json!(120),
        );
        assert_eq!(
            stream::chunk_of(&out[0]).unwrap()["message"]["content"],
            "\n\nPort 80"
        );
        let out = next.event(
            line(json!({"role": "assistant", "content": ""}), true),
            &json!(120),
        );
        let last = stream::chunk_of(&out[0]).unwrap();
        assert_eq!(
            (&last[USAGE], &last["eval_count"]),
            (&json!(240), &json!(7))
        );
        assert!(out[0].ends_with(b"}\n"), "one JSON line");
    }

    #[test]
    fn a_client_call_releases_the_round_without_the_recall_call() {
        let mut r = Stream::<Round>::fresh(false, Carry::default());
        let both = json!({"role": "assistant", "tool_calls": [recall_call(),
            {"function": {"name": "ls", "arguments": {"p": 1}}}]});
        let out = r.event(line(both, false), &Value::Null);
        assert_eq!(out.len(), 1);
        let released = stream::chunk_of(&out[0]).unwrap();
        assert_eq!(
            released["message"]["tool_calls"].as_array().map(Vec::len),
            Some(1)
        );
        assert_eq!(
            released["message"]["tool_calls"][0]["function"]["name"],
            "ls"
        );
        assert!(Box::new(r).end().is_none());
    }
}
