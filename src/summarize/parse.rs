//! Reading a summary out of model output: repair what models commonly get
//! wrong, then validate. Output is never trusted blindly.

use crate::fold::Summary;
use serde_json::Value;

/// Why model output could not be read as a summary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("summarizer output is not a valid summary: {0}")]
pub struct InvalidOutput(pub String);

/// Parses model output into a [`Summary`], repairing code fences, text
/// around the object, raw control characters inside strings, missing
/// optional fields and scalar items where lists belong.
pub fn parse_summary(output: &str) -> Result<Summary, InvalidOutput> {
    let object =
        extract_object(output).ok_or_else(|| InvalidOutput("no JSON object found".into()))?;
    let value: Value = serde_json::from_str(object)
        .or_else(|_| serde_json::from_str(&escape_controls_in_strings(object)))
        .map_err(|e| InvalidOutput(format!("not JSON: {e}")))?;
    let Value::Object(map) = value else {
        return Err(InvalidOutput("not a JSON object".into()));
    };
    let text = |v: &Value| match v {
        Value::String(s) => s.trim().to_string(),
        other => other.to_string(),
    };
    let list = |key: &str| -> Vec<String> {
        match map.get(key) {
            Some(Value::Array(items)) => items.iter().map(text).filter(|s| !s.is_empty()).collect(),
            Some(Value::Null) | None => Vec::new(),
            Some(one) => vec![text(one)]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect(),
        }
    };
    let summary = Summary {
        summary: map.get("summary").map(text).unwrap_or_default(),
        facts: list("facts"),
        goals: list("goals"),
        decisions: list("decisions"),
        open_items: list("open_items"),
        artifacts: list("artifacts"),
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
    fn scalars_become_items() {
        let s =
            parse_summary(r#"{"summary":"s","facts":"one fact","goals":[42, {"k":1}]}"#).unwrap();
        assert_eq!(s.facts, vec!["one fact"]);
        assert_eq!(s.goals, vec!["42", "{\"k\":1}"]);
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
