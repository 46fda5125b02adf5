//! Context windows from a provider's `GET /models` listing.

use serde_json::Value;

/// Keys that name a model's context window, in the order they are tried:
/// OpenRouter and Together/Fireworks (`context_length`), vLLM
/// (`max_model_len`), Groq (`context_window`), Mistral and LM Studio
/// (`max_context_length`), Gemini (`input_token_limit`, `inputTokenLimit`).
const WINDOW_KEYS: &[&str] = &[
    "context_length",
    "max_model_len",
    "context_window",
    "max_context_length",
    "input_token_limit",
    "inputTokenLimit",
];

/// Parses a provider's `GET /models` answer and returns `(id, context window)`
/// for every entry that states one. Accepts `{"data": [...]}` (OpenAI
/// style), `{"models": [...]}` and a bare array; ids come from `id`, else
/// `name`. Windows may be numbers or numeric strings; also read from
/// OpenRouter's `top_provider.context_length` and llama.cpp's
/// `meta.n_ctx_train`. Anything else, including invalid JSON, yields nothing.
pub fn parse_models_listing(body: &[u8]) -> Vec<(String, u32)> {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let entries = match &value {
        Value::Array(items) => items,
        Value::Object(map) => match map.get("data").or_else(|| map.get("models")) {
            Some(Value::Array(items)) => items,
            _ => return Vec::new(),
        },
        _ => return Vec::new(),
    };
    entries.iter().filter_map(entry).collect()
}

fn entry(item: &Value) -> Option<(String, u32)> {
    let id = item
        .get("id")
        .or_else(|| item.get("name"))
        .and_then(Value::as_str)?;
    let window = WINDOW_KEYS
        .iter()
        .find_map(|k| item.get(*k).and_then(as_window))
        .or_else(|| {
            item.get("top_provider")
                .and_then(|p| p.get("context_length"))
                .and_then(as_window)
        })
        .or_else(|| {
            item.get("meta")
                .and_then(|m| m.get("n_ctx_train"))
                .and_then(as_window)
        })?;
    Some((id.to_owned(), window))
}

/// A positive integer that fits in `u32`, from a number or a numeric string.
fn as_window(v: &Value) -> Option<u32> {
    let n = match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    }?;
    u32::try_from(n).ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openrouter() {
        let body = br#"{"data":[
            {"id":"anthropic/claude-3.5-sonnet","name":"Anthropic: Claude 3.5 Sonnet","context_length":200000,
             "top_provider":{"context_length":200000,"max_completion_tokens":8192}},
            {"id":"openai/gpt-4o","context_length":128000},
            {"id":"weird/no-window","pricing":{}}
        ]}"#;
        assert_eq!(
            parse_models_listing(body),
            vec![
                ("anthropic/claude-3.5-sonnet".into(), 200_000),
                ("openai/gpt-4o".into(), 128_000)
            ]
        );
    }

    #[test]
    fn vllm() {
        let body = br#"{"object":"list","data":[{"id":"Qwen/Qwen2.5-7B-Instruct","object":"model",
            "created":1,"owned_by":"vllm","root":"Qwen/Qwen2.5-7B-Instruct","parent":null,"max_model_len":32768}]}"#;
        assert_eq!(
            parse_models_listing(body),
            vec![("Qwen/Qwen2.5-7B-Instruct".into(), 32_768)]
        );
    }

    #[test]
    fn other_shapes() {
        assert_eq!(
            parse_models_listing(br#"[{"id":"a","context_length":"4096"}]"#),
            vec![("a".into(), 4096)]
        );
        assert_eq!(
            parse_models_listing(
                br#"{"models":[{"name":"models/gemini-x","inputTokenLimit":1048576}]}"#
            ),
            vec![("models/gemini-x".into(), 1_048_576)]
        );
        assert_eq!(
            parse_models_listing(br#"{"data":[{"id":"g","context_window":131072}]}"#),
            vec![("g".into(), 131_072)]
        );
        assert_eq!(
            parse_models_listing(br#"{"data":[{"id":"l","meta":{"n_ctx_train":8192}}]}"#),
            vec![("l".into(), 8192)]
        );
    }

    #[test]
    fn nothing_from_junk() {
        assert!(parse_models_listing(b"<html>").is_empty());
        assert!(parse_models_listing(br#"{"data":{}}"#).is_empty());
        assert!(parse_models_listing(br#"{"data":[{"id":"z","context_length":0},{"id":"n","context_length":-1},{"id":"h","context_length":1e12}]}"#).is_empty());
        assert!(
            parse_models_listing(br#"{"object":"list","data":[{"id":"gpt-4o","object":"model"}]}"#)
                .is_empty()
        );
    }
}
