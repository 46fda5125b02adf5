//! Context windows from what providers answer: the `GET /models` listing
//! (OpenRouter, vLLM, …), LiteLLM's `GET /model/info`, llama.cpp's `GET /props`, Ollama's
//! `GET /api/tags` + `POST /api/show`, and the `GET /openapi.json` title
//! that tells llama-cpp-python's server apart. Parsers only; the calls are in
//! [`crate::discover`].

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
    listing_entries(body).iter().filter_map(entry).collect()
}

/// The ids of every entry of a `GET /models` listing, windows or not.
pub fn parse_model_ids(body: &[u8]) -> Vec<String> {
    listing_entries(body)
        .iter()
        .filter_map(|item| entry_id(item).map(str::to_owned))
        .collect()
}

/// LiteLLM proxy's `GET /model/info`: `(model_name, window)` for every
/// deployment whose `model_info` states `max_input_tokens` (the prompt's
/// limit; LiteLLM's `max_tokens` is often the output's, so it is not
/// read). A name served by several deployments gets the smallest window
/// among them, since a request may go to any. Anything else yields nothing.
pub fn parse_litellm_model_info(body: &[u8]) -> Vec<(String, u32)> {
    let mut found: Vec<(String, u32)> = Vec::new();
    for item in listing_entries(body) {
        let Some(name) = item.get("model_name").and_then(Value::as_str) else {
            continue;
        };
        let Some(window) = item
            .pointer("/model_info/max_input_tokens")
            .and_then(as_window)
        else {
            continue;
        };
        match found.iter_mut().find(|(n, _)| n == name) {
            Some((_, w)) => *w = (*w).min(window),
            None => found.push((name.to_owned(), window)),
        }
    }
    found
}

/// llama.cpp server's `GET /props`: the context each request gets,
/// `default_generation_settings.n_ctx` (the server's `--ctx-size` divided
/// among its slots), which is below the model's training context.
pub fn parse_llamacpp_props(body: &[u8]) -> Option<u32> {
    let value = serde_json::from_slice::<Value>(body).ok()?;
    value
        .pointer("/default_generation_settings/n_ctx")
        .and_then(as_window)
}

/// The `info.title` of a server's `GET /openapi.json` (FastAPI servers
/// publish one): llama-cpp-python's is `🦙 llama.cpp Python API`.
pub fn parse_openapi_title(body: &[u8]) -> Option<String> {
    let value = serde_json::from_slice::<Value>(body).ok()?;
    value
        .pointer("/info/title")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Ollama's `GET /api/tags`: the names of the local models.
pub fn parse_ollama_tags(body: &[u8]) -> Vec<String> {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let Some(Value::Array(models)) = value.get("models") else {
        return Vec::new();
    };
    models
        .iter()
        .filter_map(|m| m.get("name").or_else(|| m.get("model"))?.as_str())
        .map(str::to_owned)
        .collect()
}

/// Ollama's `POST /api/show`: `num_ctx` from `parameters` when the model
/// sets it (the context Ollama runs it with), else the model's own
/// `model_info` `<architecture>.context_length`.
pub fn parse_ollama_show(body: &[u8]) -> Option<u32> {
    let value = serde_json::from_slice::<Value>(body).ok()?;
    let num_ctx = value
        .get("parameters")
        .and_then(Value::as_str)
        .and_then(|params| {
            params.lines().find_map(|line| {
                let mut words = line.split_whitespace();
                (words.next() == Some("num_ctx")).then(|| words.next())?
            })
        })
        .and_then(|n| as_window(&Value::String(n.to_owned())));
    num_ctx.or_else(|| {
        let info = value.get("model_info")?.as_object()?;
        info.iter()
            .find(|(key, _)| key.ends_with(".context_length"))
            .and_then(|(_, v)| as_window(v))
    })
}

/// The entries of a listing: `{"data": [...]}`, `{"models": [...]}` or a
/// bare array; nothing for anything else.
fn listing_entries(body: &[u8]) -> Vec<Value> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(items)) => items,
        Ok(Value::Object(mut map)) => match map.remove("data").or_else(|| map.remove("models")) {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

fn entry_id(item: &Value) -> Option<&str> {
    item.get("id")
        .or_else(|| item.get("name"))
        .and_then(Value::as_str)
}

fn entry(item: &Value) -> Option<(String, u32)> {
    let id = entry_id(item)?;
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
    fn litellm_model_info() {
        let body = br#"{"data":[
            {"model_name":"gpt-4o","litellm_params":{"model":"openai/gpt-4o"},
             "model_info":{"id":"a1","max_tokens":16384,"max_input_tokens":128000,"max_output_tokens":16384}},
            {"model_name":"team-sol","litellm_params":{"model":"azure/sol"},
             "model_info":{"id":"b1","max_input_tokens":400000}},
            {"model_name":"team-sol","litellm_params":{"model":"openai/sol-mini"},
             "model_info":{"id":"b2","max_input_tokens":"272000"}},
            {"model_name":"local","litellm_params":{"model":"ollama/x"},
             "model_info":{"id":"c1","max_tokens":8192,"max_input_tokens":null}}
        ]}"#;
        assert_eq!(
            parse_litellm_model_info(body),
            vec![("gpt-4o".into(), 128_000), ("team-sol".into(), 272_000)]
        );
        assert!(parse_litellm_model_info(b"<html>").is_empty());
        assert!(
            parse_litellm_model_info(br#"{"data":[{"id":"gpt-4o","context_length":1}]}"#)
                .is_empty()
        );
    }

    #[test]
    fn llamacpp_props() {
        let body = br#"{"default_generation_settings":{"id":0,"n_ctx":4096,"params":{"n_predict":-1}},
            "total_slots":2,"model_path":"/models/qwen2.5-0.5b-instruct-q4_k_m.gguf","chat_template":"..."}"#;
        assert_eq!(parse_llamacpp_props(body), Some(4096));
        assert_eq!(parse_llamacpp_props(br#"{"total_slots":1}"#), None);
        assert_eq!(
            parse_model_ids(
                br#"{"object":"list","data":[{"id":"qwen","meta":{"n_ctx_train":32768}}]}"#
            ),
            vec!["qwen".to_string()]
        );
    }

    #[test]
    fn ollama_show_and_tags() {
        let info = br#"{"modelfile":"...","parameters":"stop \"<|eot_id|>\"\nnum_ctx                        8192",
            "model_info":{"general.architecture":"llama","llama.context_length":131072,"llama.embedding_length":3072}}"#;
        assert_eq!(parse_ollama_show(info), Some(8192), "num_ctx wins");
        let no_param = br#"{"parameters":"stop \"<|eot_id|>\"","model_info":{"general.architecture":"qwen2","qwen2.context_length":32768}}"#;
        assert_eq!(parse_ollama_show(no_param), Some(32768));
        assert_eq!(parse_ollama_show(br#"{"model_info":{}}"#), None);
        assert_eq!(
            parse_ollama_tags(br#"{"models":[{"name":"llama3.2:latest","model":"llama3.2:latest","size":1},{"model":"qwen2.5:0.5b"}]}"#),
            vec!["llama3.2:latest".to_string(), "qwen2.5:0.5b".to_string()]
        );
        assert!(parse_ollama_tags(b"<html>").is_empty());
    }

    #[test]
    fn llama_cpp_python_openapi() {
        let body = r#"{"openapi":"3.1.0","info":{"title":"🦙 llama.cpp Python API","version":"0.3.36"},"paths":{}}"#;
        assert_eq!(
            parse_openapi_title(body.as_bytes()).as_deref(),
            Some("🦙 llama.cpp Python API")
        );
        assert_eq!(parse_openapi_title(br#"{"detail":"Not Found"}"#), None);
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
