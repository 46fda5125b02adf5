//! What every API's recall shares: a recall call, the text answering it,
//! the calls of one answer gathered by index, the turn a round ends with,
//! and usage summed over rounds.

use crate::message::Excerpt;
use crate::message::RECALL_TOOL;
use serde_json::Value;
use std::collections::BTreeMap;

/// One recall call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: String,
    /// Its arguments, as JSON text.
    pub arguments: String,
}

impl Call {
    /// The query the call asks for, bounded ([`super::input::query`]), or
    /// `None` when its arguments are not `{"query": "…"}`.
    pub fn query(&self) -> Option<String> {
        super::input::query(&self.arguments).ok()
    }

    /// What the call hands the model: the passages best first, each with
    /// its turn and role; or why there are none.
    pub fn result_text(&self, excerpts: Option<&[Excerpt]>) -> String {
        let query = match super::input::query(&self.arguments) {
            Ok(query) => query,
            Err(why) => return why,
        };
        let excerpts = excerpts.unwrap_or_default();
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
}

impl Call {
    /// The one line a call gets when the window has no room left for
    /// excerpts.
    pub fn no_room_text(&self) -> String {
        let query = self.query().unwrap_or_default();
        format!(
            "No room is left in this request's context window for archived excerpts matching {query:?}; \
             answer from what you can see."
        )
    }
}

/// The tool calls of one answer, gathered by index (a streamed call
/// arrives in pieces).
#[derive(Debug, Default)]
pub struct Calls {
    by_index: BTreeMap<u64, (Call, String)>,
}

impl Calls {
    fn at(&mut self, index: u64) -> &mut (Call, String) {
        self.by_index.entry(index).or_insert_with(|| {
            let call = Call {
                id: String::new(),
                arguments: String::new(),
            };
            (call, String::new())
        })
    }

    /// Sets the call's id.
    pub fn id(&mut self, index: u64, id: &str) {
        self.at(index).0.id = id.to_string();
    }

    /// Adds to the call's tool name.
    pub fn name(&mut self, index: u64, name: &str) {
        self.at(index).1.push_str(name);
    }

    /// Adds to the call's arguments.
    pub fn arguments(&mut self, index: u64, piece: &str) {
        self.at(index).0.arguments.push_str(piece);
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

    /// Whether foldgate answers these calls: there are recall calls, and
    /// only recall calls.
    pub fn recall_only(&self) -> bool {
        !self.recall_indices().is_empty() && !self.any_client()
    }
}

/// A round that ended with recall calls only: what foldgate appends to
/// its copy of the request before it answers them.
#[derive(Debug)]
pub struct RecallTurn {
    /// The assistant's message (or Responses output items), as the API
    /// takes them back.
    pub messages: Vec<Value>,
    pub calls: Vec<Call>,
    /// The round's usage, when reported.
    pub usage: Option<Value>,
    /// What the next streamed round continues from.
    pub carry: Carry,
}

/// What one streamed response has shown the client so far, for the next
/// round to continue it.
#[derive(Debug, Clone, Default)]
pub struct Carry {
    /// Content blocks (Anthropic) or output items (Responses) shown.
    pub shown: u64,
    /// Responses: the output items shown, for the final `response.completed`.
    pub items: Vec<Value>,
    /// Responses: the next `sequence_number`.
    pub sequence: u64,
    /// Responses: the first round's response id, which the client holds.
    pub response_id: Option<String>,
    /// Whether text was shown, for the next round's separator.
    pub gap: Gap,
}

/// What goes between the texts two rounds show, so that "Let me look
/// that up." and the answer after the recall do not run together.
pub const SEPARATOR: &str = "\n\n";

/// Whether a streamed response has shown text, so that a later round's
/// first text is set apart from it by [`SEPARATOR`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Gap {
    shown: bool,
    due: bool,
}

impl Gap {
    /// At the start of a round: a separator is due before its first text
    /// when an earlier round showed some.
    pub fn next_round(self) -> Self {
        Self {
            shown: self.shown,
            due: self.shown,
        }
    }

    /// A piece of text about to be shown: the piece with the separator in
    /// front when one is due; `None` when it goes as it is.
    pub fn text(&mut self, piece: &str) -> Option<String> {
        if piece.is_empty() {
            return None;
        }
        self.shown = true;
        std::mem::take(&mut self.due).then(|| format!("{SEPARATOR}{piece}"))
    }
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

/// `total` plus `more`, without touching either.
pub fn summed(total: &Value, more: &Value) -> Value {
    let mut sum = total.clone();
    add_usage(&mut sum, more);
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pieces_gather_into_calls() {
        let mut calls = Calls::default();
        calls.id(0, "c1");
        calls.name(0, "foldgate_recall");
        calls.arguments(0, "{\"query\":");
        calls.arguments(0, "\"port\"}");
        assert!(calls.recall_only());
        let recalls = calls.recalls();
        assert_eq!(recalls[0].id, "c1");
        assert_eq!(recalls[0].query().as_deref(), Some("port"));
        calls.name(1, "ls");
        assert!(calls.any_client() && !calls.recall_only());
    }

    #[test]
    fn a_bad_argument_gets_an_explanation_not_a_search() {
        let bad = Call {
            id: "c".into(),
            arguments: "{\"q\": 1}".into(),
        };
        assert_eq!(bad.query(), None);
        assert!(bad.result_text(Some(&[])).contains("\"query\""));
        let good = Call {
            id: "c".into(),
            arguments: "{\"query\": \"port\"}".into(),
        };
        assert!(
            good.result_text(Some(&[]))
                .starts_with("No archived message")
        );
    }

    #[test]
    fn a_later_rounds_first_text_is_set_apart() {
        let mut gap = Gap::default();
        assert_eq!(gap.text("Let me look."), None, "the first round as it is");
        let mut gap = gap.next_round();
        assert_eq!(gap.text(""), None);
        assert_eq!(gap.text("Port").as_deref(), Some("\n\nPort"));
        assert_eq!(gap.text(" 8080."), None, "once per round");
        let mut silent = Gap::default().next_round();
        assert_eq!(silent.text("Port"), None, "nothing shown before");
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
        assert_eq!(
            summed(&Value::Null, &json!({"total_tokens": 3}))["total_tokens"],
            3
        );
    }
}
