//! Recall on Anthropic Messages: the tool, the requests that may get it,
//! the model's `tool_use` blocks in a whole or streamed answer, and hiding
//! them from the client.
//!
//! A streamed answer is one message to the client whatever the rounds: the
//! first round's `message_start` only, every later round's content blocks
//! numbered after the blocks already shown, and the last `message_delta`
//! carrying the usage of every round, summed.

use super::Anthropic;
use crate::api::Recall;
use crate::api::recall::calls::{Call, Calls, Carry, Gap, RecallTurn, summed};
use crate::api::recall::input::bounded;
use crate::api::recall::stream::{self, Outgoing, RoundState, Seen, Stream, kind};
use crate::message::RECALL_TOOL;
use bytes::Bytes;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

impl Recall for Anthropic {
    /// The tool foldgate adds to a request.
    fn recall_tool(&self) -> Value {
        crate::api::recall::declaration("input_schema")
    }

    fn tool_name<'t>(&self, tool: &'t Value) -> Option<&'t str> {
        name_of(tool)
    }

    /// `tool_choice` unset or `{"type": "auto"}`.
    fn free_to_call(&self, fields: &Map<String, Value>) -> bool {
        crate::api::recall::auto_choice(fields, |choice| choice.get("type")?.as_str())
    }

    /// Its `tool_use` blocks, by block index.
    fn calls(&self, answer: &Value) -> Calls {
        let mut calls = Calls::default();
        for (i, block) in blocks(answer).iter().enumerate() {
            if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                let i = i as u64;
                calls.id(
                    i,
                    block.get("id").and_then(Value::as_str).unwrap_or_default(),
                );
                calls.name(i, name_of(block).unwrap_or_default());
                calls.arguments(
                    i,
                    &block.get("input").map(Value::to_string).unwrap_or_default(),
                );
            }
        }
        calls
    }

    /// The assistant message of the answer, as foldgate appends it: its
    /// content blocks as they came (thinking blocks keep their signatures).
    fn answer_messages(&self, answer: &Value, _calls: &[Call]) -> Vec<Value> {
        vec![json!({"role": "assistant", "content": blocks(answer)})]
    }

    /// One user message of `tool_result`s.
    fn results(&self, calls: &[Call], texts: Vec<String>) -> Vec<Value> {
        let blocks = crate::api::recall::each_result(
            calls,
            texts,
            |c, text| json!({"type": "tool_result", "tool_use_id": c.id, "content": text}),
        );
        vec![json!({"role": "user", "content": blocks})]
    }

    /// Recall `tool_use` blocks removed; with no `tool_use` left, a
    /// `tool_use` stop becomes `end_turn`.
    fn hide(&self, answer: &mut Value) {
        let Some(Value::Array(blocks)) = answer.get_mut("content") else {
            return;
        };
        blocks.retain(|b| !is_recall_block(b));
        let any_call = blocks
            .iter()
            .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"));
        if !any_call {
            stream::replace_str(answer, "/stop_reason", "tool_use", "end_turn");
        }
    }

    fn stream_round(&self, last: bool, later: bool, carry: Carry) -> Box<dyn stream::Round> {
        Box::new(Round::new(last, later, carry.shown))
    }

    fn bound_calls(&self, messages: &mut [Value]) {
        for message in messages.iter_mut() {
            if let Some(Value::Array(blocks)) = message.get_mut("content") {
                for block in blocks.iter_mut().filter(|b| is_recall_block(b)) {
                    let input = block.get("input").map(Value::to_string);
                    block["input"] = bounded(&input.unwrap_or_default());
                }
            }
        }
    }

    /// As the first text block of the last user message: roles must
    /// alternate, and a user message that carries tool results is not the
    /// user's.
    fn place_recalled(&self, items: &mut Vec<Value>, block: &str) {
        let Some(at) = items.iter().rposition(is_user_turn) else {
            return;
        };
        let Some(message) = items.get_mut(at).and_then(Value::as_object_mut) else {
            return;
        };
        let first = json!({"type": "text", "text": block});
        let content = match message.remove("content") {
            Some(Value::String(s)) => vec![first, json!({"type": "text", "text": s})],
            Some(Value::Array(mut blocks)) => {
                blocks.insert(0, first);
                blocks
            }
            _ => vec![first],
        };
        message.insert("content".into(), Value::Array(content));
    }
}

/// The event that ends a stream foldgate cannot finish.
pub fn error_event(message: &str) -> Bytes {
    stream::named_event(
        "error",
        &json!({"type": "error", "error": {"type": "api_error", "message": message}}),
    )
}

/// A tool's name.
fn name_of(tool: &Value) -> Option<&str> {
    tool.get("name").and_then(Value::as_str)
}

fn blocks(answer: &Value) -> &[Value] {
    answer
        .get("content")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn is_recall_block(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("tool_use")
        && name_of(block) == Some(RECALL_TOOL)
}

/// One streamed round of Messages events.
pub struct Round {
    /// A later round: its `message_start` is not the client's.
    later: bool,
    /// Content blocks the client was shown in earlier rounds.
    offset: u64,
    /// The round's content blocks, assembled from their deltas.
    blocks: BTreeMap<u64, Value>,
    /// Streamed `tool_use` inputs, until their block stops.
    inputs: BTreeMap<u64, String>,
    /// The round's usage: `message_start`'s, updated by `message_delta`.
    usage: Value,
    /// Blocks shown to the client in this round.
    shown: BTreeSet<u64>,
}

impl Round {
    /// A round; `later` when it is not the first, `offset` the blocks
    /// shown in the rounds before.
    pub fn new(last: bool, later: bool, offset: u64) -> Stream<Self> {
        let round = Self {
            later,
            offset,
            blocks: BTreeMap::new(),
            inputs: BTreeMap::new(),
            usage: Value::Null,
            shown: BTreeSet::new(),
        };
        Stream::new(RoundState::new(last, Gap::default()), round)
    }
}

/// Sets each field of `from` in `usage` (a later count replaces an earlier).
fn update(usage: &mut Value, from: Option<&Value>) {
    let Some(Value::Object(from)) = from else {
        return;
    };
    if !usage.is_object() {
        *usage = json!({});
    }
    if let Some(usage) = usage.as_object_mut() {
        for (k, v) in from {
            usage.insert(k.clone(), v.clone());
        }
    }
}

/// Applies a content block delta to the block it belongs to.
fn apply(block: &mut Value, delta: &Value) {
    let append = |block: &mut Value, field: &str, piece: &str| {
        let mut text = block
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        text.push_str(piece);
        block[field] = Value::String(text);
    };
    match kind(delta) {
        "text_delta" => append(block, "text", delta["text"].as_str().unwrap_or_default()),
        "thinking_delta" => append(
            block,
            "thinking",
            delta["thinking"].as_str().unwrap_or_default(),
        ),
        "signature_delta" => block["signature"] = delta["signature"].clone(),
        "citations_delta" => {
            if !block.get("citations").is_some_and(Value::is_array) {
                block["citations"] = json!([]);
            }
            if let Some(list) = block["citations"].as_array_mut() {
                list.push(delta["citation"].clone());
            }
        }
        _ => {}
    }
}

impl stream::Reader for Round {
    /// Gathers the event's blocks, calls and usage.
    fn read(&mut self, state: &mut RoundState, event: &Value) {
        let index = event.get("index").and_then(Value::as_u64);
        match (kind(event), index) {
            ("message_start", _) => update(&mut self.usage, event.pointer("/message/usage")),
            ("message_delta", _) => update(&mut self.usage, event.get("usage")),
            ("content_block_start", Some(i)) => {
                let block = event.get("content_block").cloned().unwrap_or_default();
                if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                    state.calls.id(
                        i,
                        block.get("id").and_then(Value::as_str).unwrap_or_default(),
                    );
                    state.calls.name(i, name_of(&block).unwrap_or_default());
                }
                self.blocks.insert(i, block);
            }
            ("content_block_delta", Some(i)) => {
                let delta = event.get("delta").unwrap_or(&Value::Null);
                if let Some(json) = delta.get("partial_json").and_then(Value::as_str) {
                    self.inputs.entry(i).or_default().push_str(json);
                    state.calls.arguments(i, json);
                }
                if let Some(block) = self.blocks.get_mut(&i) {
                    apply(block, delta);
                }
            }
            ("content_block_stop", Some(i)) => {
                if let (Some(input), Some(block)) =
                    (self.inputs.remove(&i), self.blocks.get_mut(&i))
                {
                    block["input"] = serde_json::from_str(&input).unwrap_or_else(|_| json!({}));
                }
            }
            _ => {}
        }
    }

    /// The event as the client gets it, if at all: recall blocks removed
    /// once the answer is mixed, blocks numbered after earlier rounds',
    /// a later round's text set apart, usage summed over the rounds in the
    /// last `message_delta`.
    fn outgoing(&mut self, state: &mut RoundState, mut event: Value, seen: Seen<'_>) -> Outgoing {
        let kind = kind(&event).to_string();
        if self.later && kind == "message_start" {
            return Outgoing::Drop;
        }
        let mut changed = false;
        let index = event.get("index").and_then(Value::as_u64);
        match stream::renumber(&mut event, "index", self.offset, seen.hidden(state)) {
            Some(renumbered) => changed |= renumbered,
            None => return Outgoing::Drop,
        }
        if let Some(i) = index.filter(|_| kind == "content_block_start") {
            self.shown.insert(i);
        }
        for text in ["/content_block/text", "/delta/text"] {
            changed |= stream::separate(&mut event, text, &mut state.gap);
        }
        if kind == "message_delta" {
            if state.hold.mixed && !state.calls.any_client() {
                changed |=
                    stream::replace_str(&mut event, "/delta/stop_reason", "tool_use", "end_turn");
            }
            if !seen.prior.is_null() {
                event["usage"] = summed(seen.prior, &self.usage);
                changed = true;
            }
        }
        Outgoing::of(changed, || stream::named_event(&kind, &event))
    }

    fn end(self, state: RoundState) -> Option<RecallTurn> {
        let content: Vec<Value> = self.blocks.into_values().collect();
        Some(RecallTurn {
            messages: vec![json!({"role": "assistant", "content": content})],
            calls: state.calls.recalls(),
            usage: Some(self.usage),
            carry: Carry {
                shown: self.offset + self.shown.len() as u64,
                ..Carry::default()
            },
        })
    }
}

/// Whether a message is a user's turn: role `user`, no `tool_result` in it.
fn is_user_turn(message: &Value) -> bool {
    let user = message.get("role").and_then(Value::as_str) == Some("user");
    let blocks = message.get("content").and_then(Value::as_array);
    let results = (blocks.into_iter().flatten()).any(|b| kind(b) == "tool_result");
    user && !results
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::recall::stream::Round as _;

    fn ev(v: Value) -> Bytes {
        stream::typed_event(&v)
    }

    fn start(usage: u64) -> Bytes {
        ev(
            json!({"type": "message_start", "message": {"id": "msg", "content": [],
            "usage": {"input_tokens": usage, "output_tokens": 1}}}),
        )
    }

    fn text_block(i: u64, text: &str) -> Vec<Bytes> {
        vec![
            ev(
                json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": text}}),
            ),
            ev(json!({"type": "content_block_stop", "index": i})),
        ]
    }

    fn tool_block(i: u64, id: &str, name: &str, input: &str) -> Vec<Bytes> {
        vec![
            ev(json!({"type": "content_block_start", "index": i,
                "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})),
            ev(json!({"type": "content_block_delta", "index": i,
                "delta": {"type": "input_json_delta", "partial_json": input}})),
            ev(json!({"type": "content_block_stop", "index": i})),
        ]
    }

    fn finish(reason: &str, output: u64) -> Vec<Bytes> {
        vec![
            ev(
                json!({"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": output}}),
            ),
            ev(json!({"type": "message_stop"})),
        ]
    }

    #[test]
    fn a_recall_round_shows_its_text_and_holds_the_rest() {
        let mut round = Round::new(false, false, 0);
        let mut events = vec![start(100)];
        events.extend(text_block(0, "Let me look."));
        events.extend(tool_block(
            1,
            "toolu_1",
            "foldgate_recall",
            "{\"query\": \"port\"}",
        ));
        events.extend(finish("tool_use", 20));
        let shown = stream::feed(&mut round, events, &Value::Null);
        assert_eq!(shown.len(), 4, "message_start and the text block");
        let turn = Box::new(round)
            .end()
            .unwrap_or_else(|| unreachable!("held"));
        assert_eq!(turn.carry.shown, 1);
        assert_eq!(turn.calls[0].id, "toolu_1");
        assert_eq!(turn.calls[0].query().as_deref(), Some("port"));
        assert_eq!(
            turn.messages[0]["content"][0],
            json!({"type": "text", "text": "Let me look."})
        );
        assert_eq!(
            turn.messages[0]["content"][1]["input"],
            json!({"query": "port"})
        );
        assert_eq!(
            turn.usage,
            Some(json!({"input_tokens": 100, "output_tokens": 20}))
        );
    }

    #[test]
    fn a_later_round_continues_the_same_message() {
        let mut round = Round::new(false, true, 1);
        let prior = json!({"input_tokens": 100, "output_tokens": 20});
        let mut events = vec![start(150)];
        events.extend(text_block(0, "Port 8080."));
        events.extend(finish("end_turn", 9));
        let shown = stream::feed(&mut round, events, &prior);
        assert!(shown.iter().all(|e| kind(e) != "message_start"));
        assert_eq!(
            shown[0]["index"], 1,
            "numbered after the block shown before"
        );
        let delta = shown
            .iter()
            .find(|e| kind(e) == "message_delta")
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            delta["usage"],
            json!({"input_tokens": 250, "output_tokens": 29})
        );
        assert!(Box::new(round).end().is_none());
    }

    #[test]
    fn recall_and_client_tool_use_give_the_client_its_own() {
        let mut round = Round::new(false, false, 0);
        let mut events = vec![start(100)];
        events.extend(tool_block(
            0,
            "toolu_r",
            "foldgate_recall",
            "{\"query\": \"x\"}",
        ));
        events.extend(tool_block(1, "toolu_c", "read_file", "{\"path\": \"a\"}"));
        events.extend(finish("tool_use", 20));
        let shown = stream::feed(&mut round, events, &Value::Null);
        let starts: Vec<&Value> = shown
            .iter()
            .filter(|e| kind(e) == "content_block_start")
            .collect();
        assert_eq!(starts.len(), 1);
        assert_eq!(starts[0]["index"], 0);
        assert_eq!(starts[0]["content_block"]["id"], "toolu_c");
        assert!(
            shown
                .iter()
                .any(|e| e["delta"]["stop_reason"] == "tool_use")
        );
        assert!(Box::new(round).end().is_none());
    }

    #[test]
    fn whole_answers_hide_recall_blocks() {
        let mut answer = json!({"stop_reason": "tool_use", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "t", "name": "foldgate_recall", "input": {"query": "port"}}]});
        let calls = Anthropic.calls(&answer);
        assert!(calls.recall_only());
        assert_eq!(calls.recalls()[0].query().as_deref(), Some("port"));
        Anthropic.hide(&mut answer);
        assert_eq!(answer["content"].as_array().map(Vec::len), Some(1));
        assert_eq!(answer["stop_reason"], "end_turn");
        let fields = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert!(Anthropic.recall_offerable(&fields(json!({"tool_choice": {"type": "auto"}}))));
        assert!(!Anthropic.recall_offerable(&fields(json!({"tool_choice": {"type": "any"}}))));
        assert!(!Anthropic.recall_offerable(&fields(json!({"tools": [Anthropic.recall_tool()]}))));
    }
}
