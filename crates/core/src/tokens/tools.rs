//! Tokens of the tool and function definitions in a request.
//!
//! OpenAI renders definitions into a hidden TypeScript-like preamble whose
//! exact form is unpublished. This is the community formula from OpenAI's
//! cookbook (`num_tokens_for_tools`), which matches the API on its example:
//!
//! - per function, `FUNC_INIT` plus the tokens of `name:description`
//!   (a trailing `.` dropped);
//! - when it has properties, `PROP_INIT`, then per property `PROP_KEY` plus
//!   the tokens of `key:type:description`;
//! - per `enum`, `ENUM_INIT`, then per item `ENUM_ITEM` plus its tokens;
//! - `FUNC_END` once after all functions.
//!
//! Extensions, approximate: nested `properties`/`items` schemas, which the
//! formula ignores, add the tokens of their compact JSON; so do
//! non-function tools and a `response_format` JSON schema.

use super::encoding::Encoding;
use serde_json::{Map, Value};

const PROP_INIT: i64 = 3;
const PROP_KEY: i64 = 3;
const ENUM_INIT: i64 = -3;
const ENUM_ITEM: i64 = 3;
const FUNC_END: i64 = 12;

/// Per-function opening: 7 on o200k models (gpt-4o), 10 on cl100k (gpt-4, gpt-3.5).
fn func_init(encoding: Encoding) -> i64 {
    match encoding {
        Encoding::O200kBase => 7,
        Encoding::Cl100kBase => 10,
    }
}

/// Tokens of `tools`, legacy `functions` and a `response_format` schema in `request`.
pub(crate) fn definitions_tokens(encoding: Encoding, request: &Map<String, Value>) -> u64 {
    let mut total: i64 = 0;
    let mut functions = 0usize;
    let tools = request
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    for tool in tools {
        match tool.get("function") {
            Some(f)
                if tool
                    .get("type")
                    .and_then(Value::as_str)
                    .is_none_or(|t| t == "function") =>
            {
                total += function(encoding, f);
                functions += 1;
            }
            _ => total += func_init(encoding) + json_tokens(encoding, tool),
        }
    }
    for f in request
        .get("functions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        total += function(encoding, f);
        functions += 1;
    }
    if functions > 0 {
        total += FUNC_END;
    }
    let schema = request
        .get("response_format")
        .and_then(|r| r.get("json_schema"));
    if let Some(schema) = schema {
        total += json_tokens(encoding, schema);
    }
    u64::try_from(total).unwrap_or(0)
}

/// One function definition: `{name, description?, parameters?}`.
fn function(encoding: Encoding, f: &Value) -> i64 {
    let name = f.get("name").and_then(Value::as_str).unwrap_or("");
    let desc = f.get("description").and_then(Value::as_str).unwrap_or("");
    let mut total = func_init(encoding) + count(encoding, &format!("{name}:{}", strip_dot(desc)));
    let props = f
        .get("parameters")
        .and_then(|p| p.get("properties"))
        .and_then(Value::as_object);
    if let Some(props) = props.filter(|p| !p.is_empty()) {
        total += PROP_INIT;
        for (key, prop) in props {
            total += PROP_KEY + property(encoding, key, prop);
        }
    }
    total
}

fn property(encoding: Encoding, key: &str, prop: &Value) -> i64 {
    let mut total = 0;
    if let Some(items) = prop.get("enum").and_then(Value::as_array) {
        total += ENUM_INIT;
        for item in items {
            total += ENUM_ITEM;
            total += match item {
                Value::String(s) => count(encoding, s),
                other => json_tokens(encoding, other),
            };
        }
    }
    let p_type = match prop.get("type") {
        Some(Value::String(t)) => t.clone(),
        // `["string", "null"]` and the like.
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" | "),
        _ => String::new(),
    };
    let desc = prop
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("");
    total += count(encoding, &format!("{key}:{p_type}:{}", strip_dot(desc)));
    for nested in ["properties", "items"] {
        if let Some(schema) = prop.get(nested).filter(|v| v.is_object()) {
            total += json_tokens(encoding, schema);
        }
    }
    total
}

fn strip_dot(s: &str) -> &str {
    s.strip_suffix('.').unwrap_or(s)
}

fn count(encoding: Encoding, s: &str) -> i64 {
    i64::from(encoding.count(s))
}

/// Tokens of `value`'s compact JSON text.
fn json_tokens(encoding: Encoding, value: &Value) -> i64 {
    count(encoding, &value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    fn n(e: Encoding, s: &str) -> u64 {
        u64::from(e.count(s))
    }

    #[test]
    fn no_tools_no_tokens() {
        assert_eq!(
            definitions_tokens(Encoding::O200kBase, &req(json!({"messages": []}))),
            0
        );
    }

    #[test]
    fn formula_by_hand() {
        let e = Encoding::O200kBase;
        let r = req(json!({"tools": [{"type": "function", "function": {
            "name": "f", "description": "Does things.",
            "parameters": {"type": "object", "properties": {
                "a": {"type": "string", "description": "An a.", "enum": ["x", "y"]},
                "b": {"type": ["integer", "null"]},
            }}
        }}]}));
        let expect = 7
            + n(e, "f:Does things")
            + 3
            + 3
            + (3 + n(e, "x") + 3 + n(e, "y") - 3)
            + n(e, "a:string:An a")
            + 3
            + n(e, "b:integer | null:")
            + 12;
        assert_eq!(definitions_tokens(e, &r), expect);
    }

    #[test]
    fn legacy_functions_and_other_tools() {
        let e = Encoding::Cl100kBase;
        let r = req(json!({"functions": [{"name": "g"}], "tools": [{"type": "web_search"}]}));
        let expect = 10 + n(e, "g:") + 12 + 10 + n(e, r#"{"type":"web_search"}"#);
        assert_eq!(definitions_tokens(e, &r), expect);
    }

    #[test]
    fn response_format_schema() {
        let e = Encoding::O200kBase;
        let schema = json!({"name": "s", "schema": {"type": "object"}});
        let r = req(json!({"response_format": {"type": "json_schema", "json_schema": schema}}));
        assert_eq!(definitions_tokens(e, &r), n(e, &schema.to_string()));
    }
}
