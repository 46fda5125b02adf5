//! Recall on the OpenAI Responses API: the function tool, the requests
//! that may get it, the model's `function_call` items in a whole or
//! streamed answer, and hiding them from the client.
//!
//! A streamed answer is one response to the client whatever the rounds:
//! the first round's `response.created` and `response.in_progress` only,
//! later rounds' output items numbered after the items already shown,
//! `sequence_number`s counted on across rounds, and the final
//! `response.completed` listing every shown item under the first round's
//! id, with the usage of every round summed.

use super::Responses;
use crate::api::Recall;
use crate::api::recall::calls::{Call, Calls, Carry, Gap, RecallTurn, SEPARATOR};
use crate::api::recall::input::bounded;
use crate::api::recall::stream::{self, Outgoing, RoundState, Seen, Stream, kind};
use crate::message::RECALL_TOOL;
use bytes::Bytes;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

impl Recall for Responses {
    /// The function tool foldgate adds to a request.
    fn recall_tool(&self) -> Value {
        let mut tool = Map::from_iter([("type".to_string(), json!("function"))]);
        if let Value::Object(declaration) = crate::api::recall::declaration("parameters") {
            tool.extend(declaration);
        }
        Value::Object(tool)
    }

    fn tool_name<'t>(&self, tool: &'t Value) -> Option<&'t str> {
        name_of(tool)
    }

    /// `tool_choice` unset or `auto`.
    fn free_to_call(&self, fields: &Map<String, Value>) -> bool {
        crate::api::recall::auto_choice(fields, Value::as_str)
    }

    /// Its `function_call` items, by position.
    fn calls(&self, answer: &Value) -> Calls {
        let mut calls = Calls::default();
        for (i, item) in output(answer).iter().enumerate() {
            feed(&mut calls, i as u64, item);
            if is_call(item) {
                let arguments = item
                    .get("arguments")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                calls.arguments(i as u64, arguments);
            }
        }
        calls
    }

    /// The answer's output items as they came.
    fn answer_messages(&self, answer: &Value, _calls: &[Call]) -> Vec<Value> {
        output(answer).to_vec()
    }

    /// A `function_call_output` each.
    fn results(&self, calls: &[Call], texts: Vec<String>) -> Vec<Value> {
        crate::api::recall::each_result(
            calls,
            texts,
            |c, text| json!({"type": "function_call_output", "call_id": c.id, "output": text}),
        )
    }

    /// Recall calls removed from the output, and the recall tool from the
    /// tools it echoes.
    fn hide(&self, answer: &mut Value) {
        let kept = without_recall(output(answer));
        if let Some(slot) = answer.get_mut("output") {
            *slot = Value::Array(kept);
        }
        unlist(answer);
    }

    fn stream_round(&self, last: bool, later: bool, carry: Carry) -> Box<dyn stream::Round> {
        Box::new(Round::new(last, later, carry))
    }

    fn bound_calls(&self, items: &mut [Value]) {
        for item in items.iter_mut().filter(|i| is_recall(i)) {
            let args = item.get("arguments").and_then(Value::as_str);
            let args = bounded(args.unwrap_or_default()).to_string();
            item["arguments"] = Value::String(args);
        }
    }
}

/// The event that ends a stream foldgate cannot finish.
pub fn error_event(message: &str) -> Bytes {
    stream::named_event(
        "error",
        &json!({"type": "error", "code": "server_error", "message": message}),
    )
}

/// A tool's name.
fn name_of(item: &Value) -> Option<&str> {
    item.get("name").and_then(Value::as_str)
}

fn is_call(item: &Value) -> bool {
    item.get("type").and_then(Value::as_str) == Some("function_call")
}

fn is_recall(item: &Value) -> bool {
    is_call(item) && name_of(item) == Some(RECALL_TOOL)
}

/// Adds a call item (whole, or as `response.output_item.added` shows it).
fn feed(calls: &mut Calls, index: u64, item: &Value) {
    if is_call(item) {
        let text = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or_default();
        calls.id(index, text("call_id"));
        calls.name(index, text("name"));
    }
}

fn output(answer: &Value) -> &[Value] {
    answer
        .get("output")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Removes recall calls from a list of output items, with the reasoning
/// item right before each (it belongs to the call it preceded).
fn without_recall(items: &[Value]) -> Vec<Value> {
    let reasoning = |v: &Value| v.get("type").and_then(Value::as_str) == Some("reasoning");
    items
        .iter()
        .enumerate()
        .filter(|(i, item)| {
            let before_recall = reasoning(item) && items.get(i + 1).is_some_and(is_recall);
            !is_recall(item) && !before_recall
        })
        .map(|(_, item)| item.clone())
        .collect()
}

/// Removes the recall tool from the `tools` a response object echoes from
/// the request: the client never defined it. An emptied list stays, as
/// the API echoes one for a request without tools.
fn unlist(response: &mut Value) {
    if let Some(Value::Array(tools)) = response.get_mut("tools") {
        tools.retain(|t| name_of(t) != Some(RECALL_TOOL));
    }
}

/// One streamed round of Responses events.
pub struct Round {
    /// A later round: its `response.created` is not the client's.
    later: bool,
    /// What earlier rounds showed; updated as this round shows more.
    carry: Carry,
    /// Output items shown before this round.
    offset: u64,
    /// The round's finished output items, by output index.
    items: BTreeMap<u64, Value>,
    usage: Option<Value>,
    /// The text part (output index, content index) whose first delta got
    /// the separator: its `done` events get it too.
    separated: Option<(u64, u64)>,
}

impl Round {
    /// A round continuing what `carry` says was shown; `later` when it is
    /// not the first.
    /// Its gap is the carry's while the round runs, and goes back into
    /// the carry at its end.
    pub fn new(last: bool, later: bool, carry: Carry) -> Stream<Self> {
        let state = RoundState::new(last, carry.gap);
        let round = Self {
            later,
            offset: carry.shown,
            carry,
            items: BTreeMap::new(),
            usage: None,
            separated: None,
        };
        Stream::new(state, round)
    }

    /// A later round's first text set apart from what earlier rounds
    /// showed: its first delta gets the separator, and the events that
    /// repeat the part's whole text (text done, part done, item done) get
    /// it too, so they agree with the deltas.
    fn separate(&mut self, gap: &mut Gap, kind: &str, event: &mut Value) {
        let at = |field: &str| event.get(field).and_then(Value::as_u64);
        let (Some(output), content) = (at("output_index"), at("content_index")) else {
            return;
        };
        let part = (output, content.unwrap_or(0));
        let pointer = match kind {
            "response.output_text.delta" => {
                if stream::separate(event, "/delta", gap) {
                    self.separated = Some(part);
                }
                return;
            }
            _ if self.separated.is_none_or(|s| s.0 != output) => return,
            "response.output_item.done" => {
                let index = self.separated.map_or(0, |s| s.1);
                format!("/item/content/{index}/text")
            }
            _ if self.separated != Some(part) => return,
            "response.output_text.done" => "/text".to_string(),
            "response.content_part.done" => "/part/text".to_string(),
            _ => return,
        };
        if let Some(Value::String(text)) = event.pointer_mut(&pointer) {
            text.insert_str(0, SEPARATOR);
        }
    }

    /// The final response as the client gets it: every item shown in any
    /// round, the first round's id, and the usage of every round.
    fn complete(&self, response: &mut Value, prior: &Value) {
        response["output"] = Value::Array(self.carry.items.clone());
        if let Some(id) = &self.carry.response_id {
            response["id"] = Value::String(id.clone());
        }
        stream::add_prior_usage(response, "usage", prior);
    }
}

impl stream::Reader for Round {
    /// Gathers the event's calls, items, usage and the response id.
    fn read(&mut self, state: &mut RoundState, event: &Value) {
        let index = event.get("output_index").and_then(Value::as_u64);
        match (kind(event), index) {
            ("response.created", _) if !self.later => {
                let id = event.pointer("/response/id").and_then(Value::as_str);
                self.carry.response_id = id.map(str::to_string);
            }
            ("response.output_item.added", Some(i)) => {
                feed(
                    &mut state.calls,
                    i,
                    event.get("item").unwrap_or(&Value::Null),
                );
            }
            ("response.function_call_arguments.delta", Some(i)) => {
                let delta = event
                    .get("delta")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                state.calls.arguments(i, delta);
            }
            ("response.output_item.done", Some(i)) => {
                self.items
                    .insert(i, event.get("item").cloned().unwrap_or_default());
            }
            ("response.completed" | "response.incomplete", _) => {
                self.usage = event.pointer("/response/usage").cloned();
            }
            _ => {}
        }
    }

    /// The event as the client gets it, if at all.
    fn outgoing(&mut self, state: &mut RoundState, mut event: Value, seen: Seen<'_>) -> Outgoing {
        let kind = kind(&event).to_string();
        if self.later && matches!(kind.as_str(), "response.created" | "response.in_progress") {
            return Outgoing::Drop;
        }
        if stream::renumber(&mut event, "output_index", self.offset, seen.hidden(state)).is_none() {
            return Outgoing::Drop;
        }
        self.separate(&mut state.gap, &kind, &mut event);
        if let Some(response) = event.get_mut("response") {
            unlist(response);
        }
        if kind == "response.output_item.done" {
            self.carry.items.push(event["item"].clone());
            self.carry.shown += 1;
        }
        if let Some(response) = event
            .get_mut("response")
            .filter(|_| kind == "response.completed" || kind == "response.incomplete")
        {
            self.complete(response, seen.prior);
        }
        if event.get("sequence_number").is_some() {
            event["sequence_number"] = Value::from(self.carry.sequence);
            self.carry.sequence += 1;
        }
        Outgoing::New(stream::named_event(&kind, &event))
    }

    fn end(self, state: RoundState) -> Option<RecallTurn> {
        Some(RecallTurn {
            messages: self.items.into_values().collect(),
            calls: state.calls.recalls(),
            usage: self.usage,
            carry: Carry {
                gap: state.gap,
                ..self.carry
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::recall::stream::Round as _;

    fn ev(v: Value) -> Bytes {
        stream::typed_event(&v)
    }

    fn message_item(i: u64, text: &str) -> Vec<Value> {
        let item = json!({"type": "message", "id": format!("msg_{i}"), "role": "assistant",
            "content": [{"type": "output_text", "text": text}]});
        vec![
            json!({"type": "response.output_item.added", "output_index": i, "item": {"type": "message", "id": format!("msg_{i}")}}),
            json!({"type": "response.output_text.delta", "output_index": i, "content_index": 0, "delta": text}),
            json!({"type": "response.output_item.done", "output_index": i, "item": item}),
        ]
    }

    fn call_item(i: u64, call: &str, name: &str, args: &str) -> Vec<Value> {
        let item = json!({"type": "function_call", "id": format!("fc_{i}"), "call_id": call, "name": name, "arguments": args});
        vec![
            json!({"type": "response.output_item.added", "output_index": i,
                "item": {"type": "function_call", "call_id": call, "name": name, "arguments": ""}}),
            json!({"type": "response.function_call_arguments.delta", "output_index": i, "delta": args}),
            json!({"type": "response.output_item.done", "output_index": i, "item": item}),
        ]
    }

    fn round_events(id: &str, items: Vec<Vec<Value>>, input: u64) -> Vec<Bytes> {
        let mut events = vec![
            json!({"type": "response.created", "response": {"id": id, "output": []}}),
            json!({"type": "response.in_progress", "response": {"id": id}}),
        ];
        events.extend(items.into_iter().flatten());
        events.push(
            json!({"type": "response.completed", "response": {"id": id, "output": [],
            "usage": {"input_tokens": input, "output_tokens": 5}}}),
        );
        events
            .into_iter()
            .enumerate()
            .map(|(n, mut e)| {
                e["sequence_number"] = json!(n);
                ev(e)
            })
            .collect()
    }

    #[test]
    fn rounds_stream_as_one_response() {
        let mut first = Round::new(false, false, Carry::default());
        let events = round_events(
            "resp_1",
            vec![
                message_item(0, "Let me look."),
                call_item(1, "call_r", "foldgate_recall", "{\"query\":\"port\"}"),
            ],
            100,
        );
        let shown = stream::feed(&mut first, events, &Value::Null);
        assert_eq!(shown.len(), 5, "created, in_progress and the message item");
        let turn = Box::new(first)
            .end()
            .unwrap_or_else(|| unreachable!("held"));
        assert_eq!(turn.calls[0].query().as_deref(), Some("port"));
        assert_eq!(turn.messages.len(), 2);
        assert_eq!(turn.carry.shown, 1);

        let prior = turn.usage.clone().unwrap_or_default();
        let mut second = Round::new(false, true, turn.carry);
        let shown = stream::feed(
            &mut second,
            round_events("resp_2", vec![message_item(0, "Port 8080.")], 150),
            &prior,
        );
        let kinds: Vec<&str> = shown.iter().map(kind).collect();
        assert!(!kinds.contains(&"response.created"));
        assert_eq!(shown[0]["output_index"], 1);
        let sequence: Vec<u64> = shown
            .iter()
            .filter_map(|e| e["sequence_number"].as_u64())
            .collect();
        assert_eq!(sequence, [5, 6, 7, 8], "counted on from the first round");
        let done = shown.last().cloned().unwrap_or_default();
        assert_eq!(done["response"]["id"], "resp_1");
        assert_eq!(done["response"]["output"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            done["response"]["usage"],
            json!({"input_tokens": 250, "output_tokens": 10})
        );
    }

    #[test]
    fn a_mixed_answer_keeps_the_clients_call() {
        let mut round = Round::new(false, false, Carry::default());
        let events = round_events(
            "resp_1",
            vec![
                call_item(0, "call_r", "foldgate_recall", "{}"),
                call_item(1, "call_c", "shell", "{}"),
            ],
            100,
        );
        let shown = stream::feed(&mut round, events, &Value::Null);
        assert!(
            !shown
                .iter()
                .any(|e| e.to_string().contains("foldgate_recall"))
        );
        let added: Vec<&Value> = shown
            .iter()
            .filter(|e| kind(e) == "response.output_item.added")
            .collect();
        assert_eq!(added.len(), 1);
        assert_eq!(added[0]["output_index"], 0);
        assert!(Box::new(round).end().is_none());
    }

    #[test]
    fn whole_answers_hide_recall_calls_and_their_reasoning() {
        let mut answer = json!({"output": [
            {"type": "reasoning", "id": "rs_1"},
            {"type": "function_call", "call_id": "c1", "name": "foldgate_recall", "arguments": "{\"query\":\"x\"}"},
            {"type": "message", "content": []}]});
        assert!(Responses.calls(&answer).recall_only());
        Responses.hide(&mut answer);
        assert_eq!(
            answer["output"],
            json!([{"type": "message", "content": []}])
        );
        let fields = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert!(Responses.recall_offerable(&fields(json!({"tool_choice": "auto"}))));
        assert!(!Responses.recall_offerable(&fields(json!({"tool_choice": "required"}))));
        assert!(!Responses.recall_offerable(&fields(json!({"tools": [Responses.recall_tool()]}))));
    }
}
