//! Recall on chat completions: the function tool, the requests that may
//! get it, the model's recall calls in a whole or streamed answer, and
//! hiding them from the client.

use super::Chat;
use crate::api::Recall;
use crate::api::recall::calls::{Call, Calls, Carry, Gap, RecallTurn};
use crate::api::recall::input::bounded;
use crate::api::recall::stream::{self, Outgoing, RoundState, Seen, Stream};
use crate::message::RECALL_TOOL;
use serde_json::{Map, Value, json};

impl Recall for Chat {
    /// The function tool foldgate adds to a request.
    fn recall_tool(&self) -> Value {
        json!({"type": "function", "function": crate::api::recall::declaration("parameters")})
    }

    fn tool_name<'t>(&self, tool: &'t Value) -> Option<&'t str> {
        name_of(tool)
    }

    /// One choice, and `tool_choice` unset or `auto`.
    fn free_to_call(&self, fields: &Map<String, Value>) -> bool {
        let one_choice = fields
            .get("n")
            .is_none_or(|n| n.is_null() || n.as_u64() == Some(1));
        one_choice && crate::api::recall::auto_choice(fields, Value::as_str)
    }

    /// The calls of a whole answer's first choice.
    fn calls(&self, answer: &Value) -> Calls {
        let mut calls = Calls::default();
        let message = answer.pointer("/choices/0/message").unwrap_or(&Value::Null);
        for (i, call) in tool_calls(message).iter().enumerate() {
            feed(&mut calls, i as u64, call);
        }
        calls
    }

    /// The assistant message of the answer, as foldgate appends it.
    fn answer_messages(&self, answer: &Value, calls: &[Call]) -> Vec<Value> {
        let content = answer
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .unwrap_or("");
        vec![assistant_message(content, calls)]
    }

    /// One `tool` message each.
    fn results(&self, calls: &[Call], texts: Vec<String>) -> Vec<Value> {
        crate::api::recall::each_result(
            calls,
            texts,
            |c, text| json!({"role": "tool", "tool_call_id": c.id, "content": text}),
        )
    }

    /// From the first choice: the client's calls stay; with none left,
    /// `tool_calls` goes and a `tool_calls` finish becomes `stop`.
    fn hide(&self, answer: &mut Value) {
        let Some(choice) = answer.pointer_mut("/choices/0") else {
            return;
        };
        let Some(message) = choice.get_mut("message").and_then(Value::as_object_mut) else {
            return;
        };
        let Some(Value::Array(calls)) = message.get_mut("tool_calls") else {
            return;
        };
        calls.retain(|c| name_of(c) != Some(RECALL_TOOL));
        if calls.is_empty() {
            message.remove("tool_calls");
            if choice.get("finish_reason").and_then(Value::as_str) == Some("tool_calls") {
                choice["finish_reason"] = Value::String("stop".into());
            }
        }
    }

    fn stream_round(&self, last: bool, _later: bool, _carry: Carry) -> Box<dyn stream::Round> {
        Box::new(Round::new(last))
    }

    fn bound_calls(&self, messages: &mut [Value]) {
        for message in messages.iter_mut() {
            if let Some(Value::Array(calls)) = message.get_mut("tool_calls") {
                for call in calls.iter_mut().filter(|c| name_of(c) == Some(RECALL_TOOL)) {
                    let args = call.pointer("/function/arguments").and_then(Value::as_str);
                    let args = bounded(args.unwrap_or_default()).to_string();
                    call["function"]["arguments"] = Value::String(args);
                }
            }
        }
    }
}

/// A tool's name.
fn name_of(tool: &Value) -> Option<&str> {
    tool.pointer("/function/name").and_then(Value::as_str)
}

/// Adds one call, or a streamed piece of one.
fn feed(calls: &mut Calls, index: u64, delta: &Value) {
    if let Some(id) = delta.get("id").and_then(Value::as_str) {
        calls.id(index, id);
    }
    if let Some(name) = delta.pointer("/function/name").and_then(Value::as_str) {
        calls.name(index, name);
    }
    if let Some(piece) = delta.pointer("/function/arguments").and_then(Value::as_str) {
        calls.arguments(index, piece);
    }
}

fn tool_calls(message: &Value) -> &[Value] {
    message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The assistant message that made `calls` (all recall calls), with the
/// text it wrote before them.
fn assistant_message(content: &str, calls: &[Call]) -> Value {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|c| {
            json!({"id": c.id, "type": "function",
                   "function": {"name": RECALL_TOOL, "arguments": c.arguments}})
        })
        .collect();
    let content = if content.is_empty() {
        Value::Null
    } else {
        Value::String(content.to_string())
    };
    json!({"role": "assistant", "content": content, "tool_calls": tool_calls})
}

/// One streamed round of chat completion chunks.
#[derive(Default)]
pub struct Round {
    content: String,
    usage: Option<Value>,
}

impl Round {
    /// A round; `last` when its request could not offer recall again.
    pub fn new(last: bool) -> Stream<Self> {
        Stream::new(RoundState::new(last, Gap::default()), Self::default())
    }
}

impl stream::Reader for Round {
    /// Gathers the chunk's text, tool-call deltas and usage.
    fn read(&mut self, state: &mut RoundState, chunk: &Value) {
        let delta = chunk.pointer("/choices/0/delta");
        if let Some(text) = delta.and_then(|d| d.get("content")).and_then(Value::as_str) {
            self.content.push_str(text);
        }
        let deltas = delta
            .and_then(|d| d.get("tool_calls"))
            .and_then(Value::as_array);
        for (pos, d) in deltas.into_iter().flatten().enumerate() {
            let index = d.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
            feed(&mut state.calls, index, d);
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage.clone());
        }
    }

    /// Recall deltas removed once the answer is mixed (the client's calls
    /// renumbered), a later round's text set apart, and usage summed over
    /// the rounds.
    fn outgoing(&mut self, state: &mut RoundState, mut chunk: Value, seen: Seen<'_>) -> Outgoing {
        let mixed = state.hold.mixed;
        let mut changed = mixed && hide_in_chunk(&mut chunk, seen.recall);
        changed |= stream::separate(&mut chunk, "/choices/0/delta/content", &mut state.gap);
        if mixed && !state.calls.any_client() {
            changed |=
                stream::replace_str(&mut chunk, "/choices/0/finish_reason", "tool_calls", "stop");
        }
        changed |= stream::add_prior_usage(&mut chunk, "usage", seen.prior);
        Outgoing::of(changed, || stream::data_event(&chunk))
    }

    fn end(self, state: RoundState) -> Option<RecallTurn> {
        let calls = state.calls.recalls();
        Some(RecallTurn {
            messages: vec![assistant_message(&self.content, &calls)],
            calls,
            usage: self.usage,
            carry: Carry::default(),
        })
    }
}

/// Removes the deltas of the recall calls at `recall` (stream indices)
/// from a streamed chunk, renumbering the client's calls after them so
/// their indices stay dense. Returns whether the chunk changed.
fn hide_in_chunk(chunk: &mut Value, recall: &[u64]) -> bool {
    let Some(Value::Array(calls)) = chunk.pointer_mut("/choices/0/delta/tool_calls") else {
        return false;
    };
    let mut changed = false;
    calls.retain_mut(|call| match stream::renumber(call, "index", 0, recall) {
        Some(renumbered) => {
            changed |= renumbered;
            true
        }
        None => {
            changed = true;
            false
        }
    });
    if calls.is_empty() {
        if let Some(delta) = chunk
            .pointer_mut("/choices/0/delta")
            .and_then(Value::as_object_mut)
        {
            delta.remove("tool_calls");
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::recall::stream::Round as _;
    use bytes::Bytes;

    fn offerable(fields: &Map<String, Value>) -> bool {
        Chat.recall_offerable(fields)
    }

    fn tool() -> Value {
        Chat.recall_tool()
    }

    fn calls(answer: &Value) -> Calls {
        Chat.calls(answer)
    }

    fn hide(answer: &mut Value) {
        Chat.hide(answer);
    }

    fn fields(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    fn call(id: &str, name: &str, args: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
    }

    fn delta(d: Value) -> Bytes {
        stream::data_event(&json!({"choices": [{"index": 0, "delta": d}]}))
    }

    fn recall_start() -> Bytes {
        delta(
            json!({"tool_calls": [{"index": 0, "id": "r1", "type": "function",
            "function": {"name": "foldgate_recall", "arguments": ""}}]}),
        )
    }

    #[test]
    fn offered_only_to_free_single_choice_requests() {
        assert!(offerable(&fields(json!({"model": "m"}))));
        assert!(offerable(&fields(json!({"tool_choice": "auto", "n": 1}))));
        assert!(!offerable(&fields(json!({"n": 2}))));
        assert!(!offerable(&fields(json!({"tool_choice": "required"}))));
        assert!(!offerable(&fields(json!({"tool_choice": "none"}))));
        assert!(!offerable(&fields(
            json!({"tool_choice": {"type": "function", "function": {"name": "f"}}})
        )));
        assert!(!offerable(&fields(json!({"tools": [tool()]}))));
    }

    #[test]
    fn the_tool_comes_and_goes_without_touching_the_clients() {
        let mut f = fields(json!({"tools": [{"type": "function", "function": {"name": "ls"}}]}));
        crate::api::recall::push_tool(&mut f, tool());
        assert_eq!(f["tools"].as_array().map(Vec::len), Some(2));
        crate::api::recall::remove_tool(&mut f, name_of);
        assert_eq!(
            f["tools"],
            json!([{"type": "function", "function": {"name": "ls"}}])
        );
        let mut bare = Map::new();
        crate::api::recall::push_tool(&mut bare, tool());
        crate::api::recall::remove_tool(&mut bare, name_of);
        assert!(bare.is_empty());
    }

    #[test]
    fn hiding_recall_in_a_whole_answer() {
        let mut answer = json!({"choices": [{"finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [call("a", "foldgate_recall", "{}"), call("b", "ls", "{}")]}}]});
        assert!(!calls(&answer).recall_only());
        hide(&mut answer);
        let left = &answer["choices"][0]["message"]["tool_calls"];
        assert_eq!(left.as_array().map(Vec::len), Some(1));
        assert_eq!(left[0]["id"], "b");
        assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");

        let mut only = json!({"choices": [{"finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "x", "tool_calls": [call("a", "foldgate_recall", "{}")]}}]});
        assert!(calls(&only).recall_only());
        hide(&mut only);
        assert!(only["choices"][0]["message"].get("tool_calls").is_none());
        assert_eq!(only["choices"][0]["finish_reason"], "stop");
    }

    #[test]
    fn hiding_recall_in_a_chunk_renumbers_the_rest() {
        let mut chunk = json!({"choices": [{"delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": "x"}},
            {"index": 2, "id": "c", "function": {"name": "ls"}}]}}]});
        assert!(hide_in_chunk(&mut chunk, &[0, 1]));
        let calls = &chunk["choices"][0]["delta"]["tool_calls"];
        assert_eq!(calls.as_array().map(Vec::len), Some(1));
        assert_eq!(calls[0]["index"], 0);
        let mut plain = json!({"choices": [{"delta": {"content": "hi"}}]});
        assert!(!hide_in_chunk(&mut plain, &[0]));
    }

    #[test]
    fn text_passes_until_a_recall_delta_then_the_round_is_held() {
        let mut r = Round::new(false);
        let prior = Value::Null;
        assert_eq!(
            r.event(
                delta(json!({"role": "assistant", "content": "Let me"})),
                &prior
            )
            .len(),
            1
        );
        assert!(r.event(recall_start(), &prior).is_empty());
        let args =
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"query\":\"x\"}"}}]});
        assert!(r.event(delta(args), &prior).is_empty());
        assert!(
            r.event(Bytes::from_static(b"data: [DONE]\n\n"), &prior)
                .is_empty()
        );
        let turn = Box::new(r).end().unwrap_or_else(|| unreachable!("held"));
        assert_eq!(turn.messages[0]["content"], "Let me");
        assert_eq!(turn.calls[0].query().as_deref(), Some("x"));
    }

    #[test]
    fn a_client_call_releases_the_held_events_without_the_recall_deltas() {
        let mut r = Round::new(false);
        let prior = Value::Null;
        assert!(r.event(recall_start(), &prior).is_empty());
        let client = json!({"tool_calls": [{"index": 1, "id": "c1", "function": {"name": "ls", "arguments": "{}"}}]});
        let out = r.event(delta(client), &prior);
        assert_eq!(out.len(), 2);
        let released = stream::chunk_of(&out[0]).unwrap_or_default();
        assert!(released.pointer("/choices/0/delta/tool_calls").is_none());
        let client = stream::chunk_of(&out[1]).unwrap_or_default();
        assert_eq!(client["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
        assert_eq!(client["choices"][0]["delta"]["tool_calls"][0]["id"], "c1");
        assert!(
            Box::new(r).end().is_none(),
            "a mixed answer is the client's"
        );
    }

    #[test]
    fn the_last_round_holds_a_stray_recall_call_and_sums_usage() {
        // Held, never shown: the stream's runner treats the round as broken.
        let mut r = Round::new(true);
        let prior = json!({"prompt_tokens": 100, "completion_tokens": 5});
        assert!(r.event(recall_start(), &prior).is_empty());
        let finish = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]});
        assert!(r.event(stream::data_event(&finish), &prior).is_empty());
        assert!(r.last() && Box::new(r).end().is_some());

        let mut r = Round::new(true);
        let usage = json!({"choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": 7}});
        let out = r.event(stream::data_event(&usage), &prior);
        let usage = stream::chunk_of(&out[0]).unwrap_or_default();
        assert_eq!(usage["usage"]["prompt_tokens"], 220);
        assert_eq!(usage["usage"]["completion_tokens"], 12);
    }
}
