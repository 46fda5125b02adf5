//! Recognising an upstream's "prompt too long" answer, in the shapes
//! OpenAI, Anthropic, vLLM, llama.cpp and OpenRouter use.

use serde_json::Value;

/// A context-length rejection, with the real window when the message says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextError {
    /// The model's real context window, if the error names it.
    pub window: Option<u32>,
}

/// Reads a 400 body; `Some` when it is a context-length error.
pub fn detect(body: &[u8]) -> Option<ContextError> {
    let text = String::from_utf8_lossy(body).to_lowercase();
    let json: Option<Value> = serde_json::from_slice(body).ok();
    let code = json
        .as_ref()
        .and_then(|v| v.pointer("/error/code"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = json
        .as_ref()
        .and_then(|v| v.pointer("/error/type"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let hit = code == "context_length_exceeded"
        || kind == "exceed_context_size_error"
        || text.contains("maximum context length")
        || text.contains("context_length_exceeded")
        || text.contains("exceeds the available context size")
        || text.contains("context length exceeded")
        || (text.contains("context window") && text.contains("exceed"))
        || text.contains("prompt is too long");
    if !hit {
        return None;
    }
    let from_field = json
        .as_ref()
        .and_then(|v| v.pointer("/error/n_ctx"))
        .and_then(Value::as_u64);
    let window = from_field
        .and_then(|n| u32::try_from(n).ok())
        .or_else(|| number_after(&text, "maximum context length is "))
        .or_else(|| number_after(&text, " tokens > "));
    Some(ContextError { window })
}

/// The integer right after `marker` (commas allowed), if any.
fn number_after(text: &str, marker: &str) -> Option<u32> {
    let rest = &text[text.find(marker)? + marker.len()..];
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_shapes() {
        let openai = br#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        assert_eq!(
            detect(openai),
            Some(ContextError {
                window: Some(128_000)
            })
        );
        let vllm = br#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion).","type":"BadRequestError","code":400}"#;
        assert_eq!(detect(vllm), Some(ContextError { window: Some(4096) }));
        let llama = br#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#;
        assert_eq!(detect(llama), Some(ContextError { window: Some(8192) }));
        let openrouter = br#"{"error":{"message":"This endpoint's maximum context length is 32,768 tokens. However, you requested about 40000 tokens","code":400}}"#;
        assert_eq!(
            detect(openrouter),
            Some(ContextError {
                window: Some(32_768)
            })
        );
        let anthropic = br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#;
        assert_eq!(
            detect(anthropic),
            Some(ContextError {
                window: Some(200_000)
            })
        );
        assert_eq!(
            detect(br#"{"error":{"message":"Invalid value for 'temperature'"}}"#),
            None
        );
    }
}
