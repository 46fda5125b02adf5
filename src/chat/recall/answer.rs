//! Chat completions' side of recall: the tool, the requests that may get
//! it, the model's recall calls in an answer (whole or streamed), hiding
//! them from the client, and usage summed over rounds.

use crate::archive::{Excerpt, RECALL_TOOL};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The function tool foldgate adds to a request.
pub fn tool() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": RECALL_TOOL,
            "description": "Look up earlier messages of this conversation that were folded out of view \
                            (they are archived verbatim). Returns the best-matching passages with their \
                            turn and role. Use it when you need an exact detail the summary lacks.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "Words, identifiers, paths or a tool call id to search for"
                    }
                },
                "required": ["query"]
            }
        }
    })
}

/// Whether a request may get the tool: one choice, the model free to pick
/// its tools (`tool_choice` unset or `auto`), and no tool of that name.
pub fn offerable(fields: &Map<String, Value>) -> bool {
    let one_choice = fields
        .get("n")
        .is_none_or(|n| n.is_null() || n.as_u64() == Some(1));
    let free = match fields.get("tool_choice") {
        None | Some(Value::Null) => true,
        Some(choice) => choice.as_str() == Some("auto"),
    };
    let clash = tools(fields).any(|t| name_of(t) == Some(RECALL_TOOL));
    one_choice && free && !clash
}

fn tools(fields: &Map<String, Value>) -> impl Iterator<Item = &Value> {
    fields
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn name_of(tool: &Value) -> Option<&str> {
    tool.pointer("/function/name").and_then(Value::as_str)
}

/// Adds the tool to the request.
pub fn add_tool(fields: &mut Map<String, Value>) {
    match fields.get_mut("tools") {
        Some(Value::Array(tools)) => tools.push(tool()),
        _ => {
            fields.insert("tools".into(), Value::Array(vec![tool()]));
        }
    }
}

/// Takes the tool out of the request again (`tools` goes when it was the
/// only one).
pub fn remove_tool(fields: &mut Map<String, Value>) {
    if let Some(Value::Array(tools)) = fields.get_mut("tools") {
        tools.retain(|t| name_of(t) != Some(RECALL_TOOL));
        if tools.is_empty() {
            fields.remove("tools");
        }
    }
}

/// One recall call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: String,
    pub arguments: String,
}

impl Call {
    /// The query the call asks for, or `None` when its arguments are not
    /// `{"query": "…"}`.
    pub fn query(&self) -> Option<String> {
        let args: Value = serde_json::from_str(&self.arguments).ok()?;
        let query = args.get("query")?.as_str()?.trim();
        (!query.is_empty()).then(|| query.to_string())
    }

    /// The tool message answering the call with `excerpts`.
    pub fn result(&self, excerpts: Option<&[Excerpt]>) -> Value {
        json!({"role": "tool", "tool_call_id": self.id, "content": result_text(self, excerpts)})
    }
}

/// What a recall call hands the model: the passages best first, each with
/// its turn and role; or why there are none.
fn result_text(call: &Call, excerpts: Option<&[Excerpt]>) -> String {
    let (Some(query), Some(excerpts)) = (call.query(), excerpts) else {
        return format!(
            "{RECALL_TOOL} takes JSON arguments {{\"query\": \"words to search for\"}}."
        );
    };
    if excerpts.is_empty() {
        return format!("No archived message of this conversation matches {query:?}.");
    }
    let mut out = format!("Archived messages matching {query:?}, best first:");
    for e in excerpts {
        out.push_str(&format!(
            "\n\n[turn {}, {}]\n{}",
            e.position, e.role, e.text
        ));
    }
    out
}

/// The tool calls of one answer, gathered by their stream index (a whole
/// answer's calls are indexed by position).
#[derive(Debug, Default)]
pub struct Calls {
    by_index: BTreeMap<u64, (Call, String)>,
}

impl Calls {
    /// Reads a whole answer message's `tool_calls`.
    pub fn of_message(message: &Value) -> Self {
        let mut calls = Self::default();
        for (i, call) in tool_calls(message).iter().enumerate() {
            calls.feed(i as u64, call);
        }
        calls
    }

    /// Adds one (possibly partial, streamed) call or call delta.
    pub fn feed(&mut self, index: u64, delta: &Value) {
        let (call, name) = self.by_index.entry(index).or_insert_with(|| {
            (
                Call {
                    id: String::new(),
                    arguments: String::new(),
                },
                String::new(),
            )
        });
        if let Some(id) = delta.get("id").and_then(Value::as_str) {
            call.id = id.to_string();
        }
        if let Some(n) = delta.pointer("/function/name").and_then(Value::as_str) {
            name.push_str(n);
        }
        if let Some(a) = delta.pointer("/function/arguments").and_then(Value::as_str) {
            call.arguments.push_str(a);
        }
    }

    /// Indices of the recall calls.
    pub fn recall_indices(&self) -> Vec<u64> {
        self.by_index
            .iter()
            .filter(|(_, (_, name))| name == RECALL_TOOL)
            .map(|(&i, _)| i)
            .collect()
    }

    /// Whether any call is to one of the client's tools.
    pub fn any_client(&self) -> bool {
        self.by_index.values().any(|(_, name)| name != RECALL_TOOL)
    }

    /// The recall calls, in order.
    pub fn recalls(&self) -> Vec<Call> {
        self.by_index
            .values()
            .filter(|(_, name)| name == RECALL_TOOL)
            .map(|(call, _)| call.clone())
            .collect()
    }
}

fn tool_calls(message: &Value) -> &[Value] {
    message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The assistant message that made `calls` (all recall calls), with the
/// text it wrote before them, to append to foldgate's copy of the request.
pub fn assistant_message(content: &str, calls: &[Call]) -> Value {
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

/// Removes recall calls from a whole answer's first choice: the client's
/// calls stay; with none left, `tool_calls` goes and a `tool_calls`
/// finish becomes `stop`.
pub fn hide_in_answer(answer: &mut Value) {
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

/// Removes the deltas of the recall calls at `recall` (stream indices)
/// from a streamed chunk, renumbering the client's calls after them so
/// their indices stay dense. Returns whether the chunk changed.
pub fn hide_in_chunk(chunk: &mut Value, recall: &[u64]) -> bool {
    let Some(Value::Array(calls)) = chunk.pointer_mut("/choices/0/delta/tool_calls") else {
        return false;
    };
    let before = calls.len();
    calls.retain(|c| {
        !c.get("index")
            .and_then(Value::as_u64)
            .is_some_and(|i| recall.contains(&i))
    });
    let mut changed = calls.len() != before;
    for call in calls.iter_mut() {
        let Some(i) = call.get("index").and_then(Value::as_u64) else {
            continue;
        };
        let shift = recall.iter().filter(|&&r| r < i).count() as u64;
        if shift > 0 {
            call["index"] = Value::from(i - shift);
            changed = true;
        }
    }
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

/// Adds `more` to `total`, field by field: numbers are summed, objects
/// merged the same way (token details included), anything else kept.
pub fn add_usage(total: &mut Value, more: &Value) {
    match (total, more) {
        (Value::Object(t), Value::Object(m)) => {
            for (k, v) in m {
                match t.get_mut(k) {
                    Some(slot) => add_usage(slot, v),
                    None => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t @ Value::Number(_), Value::Number(m)) => {
            if let (Some(a), Some(b)) = (t.as_u64(), m.as_u64()) {
                *t = Value::from(a.saturating_add(b));
            } else if let (Some(a), Some(b)) = (t.as_f64(), m.as_f64()) {
                *t = Value::from(a + b);
            }
        }
        (t @ Value::Null, m) => *t = m.clone(),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, name: &str, args: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
    }

    #[test]
    fn offered_only_to_free_single_choice_requests() {
        let fields = |v: Value| v.as_object().cloned().unwrap_or_default();
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
        let mut fields = json!({"tools": [{"type": "function", "function": {"name": "ls"}}]})
            .as_object()
            .cloned()
            .unwrap_or_default();
        add_tool(&mut fields);
        assert_eq!(tools(&fields).count(), 2);
        remove_tool(&mut fields);
        assert_eq!(
            tools(&fields).filter_map(name_of).collect::<Vec<_>>(),
            ["ls"]
        );
        let mut bare = Map::new();
        add_tool(&mut bare);
        remove_tool(&mut bare);
        assert!(bare.is_empty());
    }

    #[test]
    fn streamed_deltas_gather_into_calls() {
        let mut calls = Calls::default();
        calls.feed(0, &json!({"index": 0, "id": "c1", "function": {"name": "foldgate_recall", "arguments": ""}}));
        calls.feed(
            0,
            &json!({"index": 0, "function": {"arguments": "{\"query\":"}}),
        );
        calls.feed(
            0,
            &json!({"index": 0, "function": {"arguments": "\"port\"}"}}),
        );
        assert_eq!(calls.recall_indices(), [0]);
        assert!(!calls.any_client());
        let recalls = calls.recalls();
        assert_eq!(recalls[0].id, "c1");
        assert_eq!(recalls[0].query().as_deref(), Some("port"));
        calls.feed(
            1,
            &json!({"index": 1, "id": "c2", "function": {"name": "ls"}}),
        );
        assert!(calls.any_client());
    }

    #[test]
    fn a_bad_argument_gets_an_explanation_not_a_search() {
        let bad = Call {
            id: "c".into(),
            arguments: "{\"q\": 1}".into(),
        };
        assert_eq!(bad.query(), None);
        let text = bad.result(Some(&[]));
        assert!(
            text["content"]
                .as_str()
                .is_some_and(|t| t.contains("\"query\""))
        );
    }

    #[test]
    fn hiding_recall_in_a_whole_answer() {
        let mut answer = json!({"choices": [{"finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [call("a", "foldgate_recall", "{}"), call("b", "ls", "{}")]}}]});
        hide_in_answer(&mut answer);
        let calls = &answer["choices"][0]["message"]["tool_calls"];
        assert_eq!(calls.as_array().map(Vec::len), Some(1));
        assert_eq!(calls[0]["id"], "b");
        assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");

        let mut only = json!({"choices": [{"finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "x", "tool_calls": [call("a", "foldgate_recall", "{}")]}}]});
        hide_in_answer(&mut only);
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
    fn usage_sums_field_by_field() {
        let mut total = json!({"prompt_tokens": 10, "completion_tokens": 2,
                               "prompt_tokens_details": {"cached_tokens": 4}});
        add_usage(
            &mut total,
            &json!({"prompt_tokens": 12, "completion_tokens": 3,
                                      "prompt_tokens_details": {"cached_tokens": 1}, "extra": 1}),
        );
        assert_eq!(total["prompt_tokens"], 22);
        assert_eq!(total["completion_tokens"], 5);
        assert_eq!(total["prompt_tokens_details"]["cached_tokens"], 5);
        assert_eq!(total["extra"], 1);
        let mut none = Value::Null;
        add_usage(&mut none, &json!({"total_tokens": 3}));
        assert_eq!(none["total_tokens"], 3);
    }
}
