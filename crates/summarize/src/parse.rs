//! Reading a summary out of model output: repair what models commonly get
//! wrong, then validate. Output is never trusted blindly.
//!
//! Repairs are made only where the meaning is unambiguous: code fences and
//! prose around the object, raw control characters inside strings, missing
//! lists, a scalar where a list belongs, numbers where strings belong, and
//! an object of scalars flattened to `key: value` lines. Anything else (an
//! object nested in an item, say) is an [`InvalidOutput`] whose message
//! says what was wrong, so the retry can tell the model.

use crate::fold::Summary;
use serde_json::{Map, Value};

/// Why model output could not be read as a summary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("summarizer output is not a valid summary: {0}")]
pub struct InvalidOutput(pub String);

/// The list fields of a summary, in rendering order.
const LISTS: [&str; 6] = [
    "facts",
    "goals",
    "decisions",
    "completed",
    "open_items",
    "artifacts",
];

/// Parses model output into a [`Summary`], with the repairs listed above.
pub fn parse_summary(output: &str) -> Result<Summary, InvalidOutput> {
    let object =
        extract_object(output).ok_or_else(|| InvalidOutput("no JSON object found".into()))?;
    let value: Value = serde_json::from_str(object)
        .or_else(|_| serde_json::from_str(&escape_controls_in_strings(object)))
        .map_err(|e| InvalidOutput(format!("not JSON: {e}")))?;
    from_value(value)
}

/// Parses output that was cut off at the token limit: the complete items
/// before the cut are kept when the JSON can be closed there (a string is
/// never cut in half); `None` when no complete summary survives.
pub fn parse_truncated(output: &str) -> Option<Summary> {
    let start = output.find('{')?;
    let text = &output[start..];
    for (end, closers) in close_points(text).into_iter().rev().take(256) {
        let mut candidate = escape_controls_in_strings(&text[..end]);
        candidate.push_str(&closers);
        if let Ok(value) = serde_json::from_str::<Value>(&candidate) {
            if let Ok(summary) = from_value(value) {
                return Some(summary);
            }
        }
    }
    None
}

/// A parsed JSON value as a summary, repaired where unambiguous.
fn from_value(value: Value) -> Result<Summary, InvalidOutput> {
    let Value::Object(mut map) = value else {
        return Err(InvalidOutput("not a JSON object".into()));
    };
    lift_nested_summary(&mut map);
    let [facts, goals, decisions, completed, open_items, artifacts] =
        LISTS.map(|key| list(&map, key));
    let summary = Summary {
        summary: narrative(map.get("summary"))?,
        facts: facts?,
        goals: goals?,
        decisions: decisions?,
        completed: completed?,
        open_items: open_items?,
        artifacts: artifacts?,
    };
    let empty =
        summary.summary.is_empty() && summary.sections().iter().all(|(_, items)| items.is_empty());
    if empty {
        return Err(InvalidOutput(
            "the object holds no summary and no items".into(),
        ));
    }
    Ok(summary)
}

/// Small models often wrap the whole answer in its own field:
/// `{"summary": {"summary": "…", "facts": […]}}`. When the `summary` object
/// holds summary fields, they move up (a field already at the top wins).
fn lift_nested_summary(map: &mut Map<String, Value>) {
    let nested = match map.get("summary") {
        Some(Value::Object(inner)) => inner
            .keys()
            .any(|k| k == "summary" || LISTS.contains(&k.as_str())),
        _ => false,
    };
    if !nested {
        return;
    }
    if let Some(Value::Object(inner)) = map.remove("summary") {
        for (key, value) in inner {
            map.entry(key).or_insert(value);
        }
    }
}

/// The `summary` field: a string; numbers, lists of strings and objects of
/// scalars are turned into text.
fn narrative(value: Option<&Value>) -> Result<String, InvalidOutput> {
    let lines = match value {
        None | Some(Value::Null) => return Ok(String::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| scalar(v).ok_or_else(|| nested("summary")))
            .collect::<Result<Vec<_>, _>>()?,
        Some(Value::Object(map)) => pairs(map).ok_or_else(|| nested("summary"))?,
        Some(other) => vec![scalar(other).ok_or_else(|| nested("summary"))?],
    };
    Ok(lines
        .into_iter()
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n"))
}

/// One list field: a list of strings; a single scalar becomes one item, an
/// object of scalars (as a field or an item) one `key: value` item a pair.
fn list(map: &Map<String, Value>, key: &str) -> Result<Vec<String>, InvalidOutput> {
    let items: Vec<String> = match map.get(key) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let at = || nested(&format!("{key}[{i}]"));
                match item {
                    Value::Object(m) => out.extend(pairs(m).ok_or_else(at)?),
                    Value::Array(inner) => {
                        for v in inner {
                            out.push(scalar(v).ok_or_else(at)?);
                        }
                    }
                    other => out.push(scalar(other).ok_or_else(at)?),
                }
            }
            out
        }
        Some(Value::Object(m)) => pairs(m).ok_or_else(|| nested(key))?,
        Some(other) => vec![scalar(other).ok_or_else(|| nested(key))?],
    };
    Ok(items.into_iter().filter(|s| !s.is_empty()).collect())
}

/// The text of a string, number or boolean; `None` for anything nested.
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some(String::new()),
        Value::Array(_) | Value::Object(_) => None,
    }
}

/// `key: value` lines of an object whose values are all scalars.
fn pairs(map: &Map<String, Value>) -> Option<Vec<String>> {
    map.iter()
        // Trimmed like every other item, so a summary reads back from its
        // own JSON unchanged (found by fuzzing: a key with a newline).
        .map(|(k, v)| scalar(v).map(|v| format!("{}: {v}", k.trim()).trim().to_string()))
        .collect()
}

fn nested(at: &str) -> InvalidOutput {
    InvalidOutput(format!(
        "`{at}` holds nested objects or lists; every summary field must be a string and every list item a plain string"
    ))
}

/// Where a cut-off JSON text can be closed: byte offsets just after a
/// complete string, number, literal, `]` or `}` outside any string, each
/// with the brackets that close what is still open there.
fn close_points(text: &str) -> Vec<(usize, String)> {
    let mut points = Vec::new();
    let mut stack: Vec<char> = Vec::new();
    let (mut in_string, mut escaped) = (false, false);
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => {
                    in_string = false;
                    points.push((i + 1, closers(&stack)));
                }
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => stack.push('}'),
            b'[' => stack.push(']'),
            b'}' | b']' => {
                stack.pop();
                points.push((i + 1, closers(&stack)));
                if stack.is_empty() {
                    break;
                }
            }
            // A number or literal is complete only when something follows it.
            b'0'..=b'9' | b'e' | b'l'
                if bytes
                    .get(i + 1)
                    .is_some_and(|&n| !n.is_ascii_alphanumeric() && n != b'.') =>
            {
                points.push((i + 1, closers(&stack)));
            }
            _ => {}
        }
    }
    points
}

fn closers(stack: &[char]) -> String {
    stack.iter().rev().collect()
}

/// The text from the first `{` to the last `}`: drops code fences and any
/// prose around the object.
fn extract_object(output: &str) -> Option<&str> {
    let start = output.find('{')?;
    let end = output.rfind('}')?;
    (end > start).then(|| &output[start..=end])
}

/// Escapes raw control characters that appear inside JSON strings (models
/// often emit literal newlines there).
fn escape_controls_in_strings(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + 16);
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            } else if (c as u32) < 0x20 {
                match c {
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    other => out.push_str(&format!("\\u{:04x}", other as u32)),
                }
                continue;
            }
        } else if c == '"' {
            in_string = true;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_output() {
        let s = parse_summary(r#"{"summary":"s","facts":["a"],"goals":[],"decisions":[],"open_items":[],"artifacts":["x.rs"]}"#).unwrap();
        assert_eq!(
            (s.summary.as_str(), s.facts.len(), s.artifacts[0].as_str()),
            ("s", 1, "x.rs")
        );
    }

    #[test]
    fn a_summary_wrapped_in_its_own_field_is_lifted() {
        let s = parse_summary(
            r#"{"summary": {"summary": "db moved", "facts": ["port 5433"]}, "goals": ["ship"]}"#,
        )
        .unwrap();
        assert_eq!(s.summary, "db moved");
        assert_eq!(s.facts, vec!["port 5433"]);
        assert_eq!(s.goals, vec!["ship"]);
        // Without a narrative inside, the lists still come up.
        let s = parse_summary(r#"{"summary": {"facts": ["a", "b"]}}"#).unwrap();
        assert_eq!((s.summary.as_str(), s.facts.len()), ("", 2));
        // An object of other keys is flattened as before.
        let s = parse_summary(r#"{"summary": {"db": "moved"}}"#).unwrap();
        assert_eq!(s.summary, "db: moved");
    }

    #[test]
    fn fences_prose_and_missing_fields() {
        let s = parse_summary(
            "Here you go:\n```json\n{\"summary\": \"port is 8080\"}\n```\nHope it helps",
        )
        .unwrap();
        assert_eq!(s.summary, "port is 8080");
        assert!(s.facts.is_empty());
    }

    #[test]
    fn raw_newlines_inside_strings() {
        let s = parse_summary("{\"summary\": \"line one\nline two\", \"facts\": [\"tab\there\"]}")
            .unwrap();
        assert_eq!(s.summary, "line one\nline two");
        assert_eq!(s.facts, vec!["tab\there"]);
    }

    #[test]
    fn flattened_pairs_are_trimmed_and_read_back_unchanged() {
        let s = parse_summary(
            "{\"summary\":{\"\\nsummary\":\"e build 1.2.3\"},\"facts\":[{\"k\":\"\"}]}",
        )
        .unwrap();
        assert_eq!(s.summary, "summary: e build 1.2.3");
        assert_eq!(s.facts, vec!["k:"]);
        let again = parse_summary(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(again, s);
    }

    #[test]
    fn scalars_and_flat_objects_become_items() {
        let s = parse_summary(
            r#"{"summary":{"project":"ORCHID-7","port":5433},"facts":"one fact","goals":[42, {"k":1}],"decisions":{"db":"PostgreSQL 15.4"}}"#,
        )
        .unwrap();
        assert_eq!(s.summary, "project: ORCHID-7\nport: 5433");
        assert_eq!(s.facts, vec!["one fact"]);
        assert_eq!(s.goals, vec!["42", "k: 1"]);
        assert_eq!(s.decisions, vec!["db: PostgreSQL 15.4"]);
    }

    #[test]
    fn nested_values_are_named_not_stored_as_json() {
        let e = parse_summary(r#"{"summary":"s","facts":[{"a":{"b":1}}]}"#).unwrap_err();
        assert!(e.0.contains("`facts[0]`"), "{e}");
        let e = parse_summary(r#"{"summary":{"a":[1]}}"#).unwrap_err();
        assert!(e.0.contains("`summary`"), "{e}");
    }

    #[test]
    fn truncated_output_keeps_complete_items() {
        let cut = r#"{"summary":"Moving the DB.","facts":["port 5433","host db-03.internal.example","release v2.1"#;
        let s = parse_truncated(cut).unwrap();
        assert_eq!(s.summary, "Moving the DB.");
        assert_eq!(s.facts, vec!["port 5433", "host db-03.internal.example"]);
        let cut = "```json\n{\"summary\": \"Deploy pending\", \"goals\": [\"ship\"], \"open_ite";
        let s = parse_truncated(cut).unwrap();
        assert_eq!((s.summary.as_str(), s.goals.len()), ("Deploy pending", 1));
        assert_eq!(parse_truncated(r#"{"summary":"half a sen"#), None);
        assert_eq!(parse_truncated("no json"), None);
    }

    #[test]
    fn garbage_is_rejected() {
        for bad in [
            "",
            "I cannot do that.",
            "[1,2]",
            "{\"summary\": \"\"}",
            "{not json at all}",
        ] {
            assert!(parse_summary(bad).is_err(), "{bad:?}");
        }
    }
}
