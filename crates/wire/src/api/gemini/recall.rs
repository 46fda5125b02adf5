//! Recall on Gemini: the tool is a `functionDeclarations` entry, a call
//! of it a `functionCall` part of the model's answer, answered by a user
//! turn of `functionResponse` parts. Gemini sends each call whole, in one
//! event, so a streamed round reads calls as a whole answer's. The model
//! turn goes back with its parts as they came (thinking models want their
//! `thoughtSignature`s back).

use super::Gemini;
use crate::api::Recall;
use crate::api::recall::calls::{Call, Calls, Carry, RecallTurn};
use crate::api::recall::input::bounded;
use crate::api::recall::stream::{self, Outgoing, RoundState, Seen, Stream};
use crate::message::RECALL_TOOL;
use bytes::Bytes;
use serde_json::{Map, Value, json};

impl Recall for Gemini {
    /// A `Tool` holding one declaration.
    fn recall_tool(&self) -> Value {
        json!({"functionDeclarations": [crate::api::recall::declaration("parameters")]})
    }

    /// The recall tool's name when `tool` is the one
    /// [`Self::recall_tool`] makes.
    fn tool_name<'t>(&self, tool: &'t Value) -> Option<&'t str> {
        let declarations = tool.get("functionDeclarations")?.as_array()?;
        match declarations.as_slice() {
            [one] => one.get("name").and_then(Value::as_str),
            _ => None,
        }
    }

    /// The model free to call functions (`functionCallingConfig.mode`
    /// unset or `AUTO`), one candidate, only function tools (built-in
    /// tools do not mix with them on every model).
    fn free_to_call(&self, fields: &Map<String, Value>) -> bool {
        let config = fields
            .get("toolConfig")
            .or_else(|| fields.get("tool_config"));
        let mode = config
            .and_then(|c| c.pointer("/functionCallingConfig/mode"))
            .and_then(Value::as_str);
        let free = mode.is_none_or(|m| m == "AUTO" || m == "MODE_UNSPECIFIED");
        let one = fields
            .get("generationConfig")
            .and_then(|c| c.get("candidateCount"))
            .is_none_or(|n| n.as_u64() == Some(1));
        let tools = fields.get("tools").and_then(Value::as_array);
        let only_functions = tools.is_none_or(|ts| ts.iter().all(|t| declarations(t).is_some()));
        free && one && only_functions
    }

    /// [Free to call](Self::free_to_call), and no declaration of the
    /// recall tool already.
    fn recall_offerable(&self, fields: &Map<String, Value>) -> bool {
        let tools = fields.get("tools").and_then(Value::as_array);
        let declared = tools
            .into_iter()
            .flatten()
            .filter_map(declarations)
            .flatten()
            .any(|d| d.get("name").and_then(Value::as_str) == Some(RECALL_TOOL));
        self.free_to_call(fields) && !declared
    }

    fn calls(&self, answer: &Value) -> Calls {
        let mut calls = Calls::default();
        feed(&mut calls, 0, answer_parts(answer));
        calls
    }

    /// The model turn of the answer: its content as it came.
    fn answer_messages(&self, answer: &Value, _calls: &[Call]) -> Vec<Value> {
        vec![model_turn(answer_parts(answer).to_vec())]
    }

    /// The user turn of `functionResponse`s answering `calls`.
    fn results(&self, calls: &[Call], texts: Vec<String>) -> Vec<Value> {
        let parts: Vec<Value> = calls
            .iter()
            .zip(texts)
            .map(|(call, text)| {
                let mut response = json!({"name": RECALL_TOOL, "response": {"content": text}});
                if !call.id.starts_with(MADE_ID) {
                    response["id"] = Value::String(call.id.clone());
                }
                json!({"functionResponse": response})
            })
            .collect();
        vec![json!({"role": "user", "parts": parts})]
    }

    fn hide(&self, answer: &mut Value) {
        hide(answer);
    }

    fn stream_round(&self, last: bool, _later: bool, carry: Carry) -> Box<dyn stream::Round> {
        Box::new(Stream::<Round>::fresh(last, carry))
    }

    /// The recall calls of model turns.
    fn bound_calls(&self, contents: &mut [Value]) {
        for content in contents.iter_mut() {
            let Some(Value::Array(parts)) = content.get_mut("parts") else {
                continue;
            };
            for call in parts.iter_mut().filter_map(|p| p.get_mut("functionCall")) {
                if call.get("name").and_then(Value::as_str) == Some(RECALL_TOOL) {
                    let args = call.get("args").map(Value::to_string).unwrap_or_default();
                    call["args"] = bounded(&args);
                }
            }
        }
    }

    fn place_recalled(&self, items: &mut Vec<Value>, block: &str) {
        super::codec::place_recalled(items, block);
    }
}

/// The event that ends a stream foldgate cannot finish.
pub fn error_event(message: &str) -> Bytes {
    stream::data_event(&json!({"error": {"code": 500, "message": message, "status": "INTERNAL"}}))
}

/// A tool's function declarations, when it is a function tool.
fn declarations(tool: &Value) -> Option<&Vec<Value>> {
    tool.get("functionDeclarations").and_then(Value::as_array)
}

/// The prefix of the ids foldgate gives calls that came without one.
const MADE_ID: &str = "foldgate-call-";

/// The field an answer reports its usage in.
pub const USAGE: &str = "usageMetadata";

/// The model's parts in an answer (or a streamed chunk).
fn answer_parts(answer: &Value) -> &[Value] {
    answer
        .pointer("/candidates/0/content/parts")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Feeds the function calls of `parts` to `calls`, numbered from `from`.
fn feed(calls: &mut Calls, from: u64, parts: &[Value]) -> u64 {
    let mut index = from;
    for call in parts.iter().filter_map(|p| p.get("functionCall")) {
        let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
        let id = call.get("id").and_then(Value::as_str);
        calls.id(index, id.unwrap_or(&format!("{MADE_ID}{index}")));
        calls.name(index, name);
        let args = call.get("args").cloned().unwrap_or_else(|| json!({}));
        calls.arguments(index, &args.to_string());
        index += 1;
    }
    index
}

/// A model turn of `parts`.
fn model_turn(parts: Vec<Value>) -> Value {
    json!({"role": "model", "parts": parts})
}

/// Removes recall calls from an answer (or a chunk); returns whether any
/// were removed.
fn hide(answer: &mut Value) -> bool {
    let Some(Value::Array(parts)) = answer.pointer_mut("/candidates/0/content/parts") else {
        return false;
    };
    let before = parts.len();
    parts.retain(|p| p.pointer("/functionCall/name").and_then(Value::as_str) != Some(RECALL_TOOL));
    parts.len() != before
}

/// One streamed round: each event is a whole `GenerateContentResponse`.
#[derive(Default)]
pub struct Round {
    next: u64,
    parts: Vec<Value>,
    usage: Option<Value>,
}

impl stream::Reader for Round {
    fn read(&mut self, state: &mut RoundState, event: &Value) {
        let parts = answer_parts(event);
        self.next = feed(&mut state.calls, self.next, parts);
        self.parts.extend(parts.iter().cloned());
        if let Some(usage) = event.get(USAGE).filter(|u| u.is_object()) {
            self.usage = Some(usage.clone());
        }
    }

    fn outgoing(&mut self, state: &mut RoundState, mut event: Value, seen: Seen<'_>) -> Outgoing {
        let mut changed = state.hold.mixed && hide(&mut event);
        changed |= stream::add_prior_usage(&mut event, USAGE, seen.prior);
        Outgoing::of(changed, || stream::data_event(&event))
    }

    fn end(self, state: RoundState) -> Option<RecallTurn> {
        let calls = state.calls.recalls();
        Some(RecallTurn {
            messages: vec![model_turn(self.parts)],
            calls,
            usage: self.usage,
            carry: Carry {
                gap: state.gap,
                ..Carry::default()
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_of(tool: &Value) -> Option<&str> {
        Gemini.tool_name(tool)
    }

    fn answer_message(answer: &Value, calls: &[Call]) -> Value {
        Gemini.answer_messages(answer, calls).remove(0)
    }

    fn results(calls: &[Call], texts: Vec<String>) -> Vec<Value> {
        Gemini.results(calls, texts)
    }

    #[test]
    fn calls_come_whole_and_hide() {
        let mut answer = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": "looking"},
            {"functionCall": {"name": RECALL_TOOL, "args": {"query": "port"}}},
            {"functionCall": {"name": "ls", "args": {}}}]}}]});
        let calls = Gemini.calls(&answer);
        assert!(calls.any_client());
        let recalls = calls.recalls();
        assert_eq!(recalls.len(), 1);
        assert_eq!(recalls[0].query().as_deref(), Some("port"));
        assert!(hide(&mut answer));
        assert_eq!(answer_parts(&answer).len(), 2);
        let signed = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"id": "c7", "name": RECALL_TOOL, "args": {"query": "port"}},
             "thoughtSignature": "sig"}]}}]});
        let turn = answer_message(&signed, &[]);
        assert_eq!(
            turn["parts"][0]["thoughtSignature"], "sig",
            "kept as it came"
        );
        let answers = results(&Gemini.calls(&signed).recalls(), vec!["x".into()]);
        let response = &answers[0]["parts"][0]["functionResponse"];
        assert_eq!(
            (&response["id"], &response["response"]["content"]),
            (&json!("c7"), &json!("x"))
        );
        let answers = results(&recalls, vec!["y".into()]);
        let response = &answers[0]["parts"][0]["functionResponse"];
        assert!(response.get("id").is_none(), "the call had no id");
        assert_eq!(name_of(&Gemini.recall_tool()), Some(RECALL_TOOL));
    }

    #[test]
    fn offered_only_where_functions_are_free() {
        let fields = |v: Value| v.as_object().cloned().unwrap_or_default();
        let ls = json!([{"functionDeclarations": [{"name": "ls"}]}]);
        assert!(Gemini.recall_offerable(&fields(json!({"contents": []}))));
        assert!(Gemini.recall_offerable(&fields(json!({"tools": ls}))));
        let auto = json!({"functionCallingConfig": {"mode": "AUTO"}});
        assert!(Gemini.recall_offerable(&fields(json!({"tools": ls, "toolConfig": auto}))));
        let any = json!({"functionCallingConfig": {"mode": "ANY"}});
        assert!(!Gemini.recall_offerable(&fields(json!({"tools": ls, "toolConfig": any}))));
        assert!(!Gemini.recall_offerable(&fields(json!({"tools": [{"googleSearch": {}}]}))));
        assert!(!Gemini.recall_offerable(&fields(json!({"tools": [Gemini.recall_tool()]}))));
        let two = json!({"candidateCount": 2});
        assert!(!Gemini.recall_offerable(&fields(json!({"generationConfig": two}))));
    }
}
