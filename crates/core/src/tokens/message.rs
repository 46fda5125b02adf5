//! How one chat message is counted, following OpenAI's cookbook
//! (`num_tokens_from_messages`) and extending it to parts, images and tool calls.
//!
//! The cookbook rule: every message costs [`TOKENS_PER_MESSAGE`], plus the
//! tokens of each of its string values, plus [`TOKENS_PER_NAME`] when it has a
//! `name`; every reply is primed with [`REPLY_PRIMING`]. It reproduces the
//! API's `prompt_tokens` exactly for text-only conversations on gpt-3.5,
//! gpt-4 and gpt-4o. The extensions below are approximations that the
//! calibration factor corrects over time.

use super::encoding::Encoding;
use serde_json::Value;

/// `<|start|>{role/name}\n{content}<|end|>\n` around every message.
pub const TOKENS_PER_MESSAGE: u32 = 3;
/// A `name` replaces nothing and costs one token beyond its own text.
pub const TOKENS_PER_NAME: u32 = 1;
/// Every reply is primed with `<|start|>assistant<|message|>`.
pub const REPLY_PRIMING: u32 = 3;
/// Markup around each assistant tool call besides its name and arguments
/// (recipient and channel markers); an estimate, OpenAI does not publish it.
pub const TOOL_CALL_OVERHEAD: u32 = 7;
/// An `input_audio` part, whose length cannot be known without decoding it:
/// about 20 s of speech at gpt-4o's ~10 audio tokens per second.
pub const AUDIO_PART_TOKENS: u32 = 200;
/// A `file` part (usually a PDF, sent as text plus page images): a page or two.
pub const FILE_PART_TOKENS: u32 = 1000;

/// The counting rules for one encoding and image pricing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    pub encoding: Encoding,
    /// Tokens of an image part with `detail: "low"`.
    pub image_low: u32,
    /// Tokens of any other image part.
    pub image_high: u32,
}

impl Rules {
    /// Tokens of one message, before any token scale or calibration.
    pub fn message(&self, message: &Value) -> u64 {
        let Value::Object(fields) = message else {
            // Not a message the API would accept; count only the framing.
            return u64::from(TOKENS_PER_MESSAGE);
        };
        let mut total = u64::from(TOKENS_PER_MESSAGE);
        for (key, value) in fields {
            total += match key.as_str() {
                "content" => self.content(value),
                "name" => self.text(value) + u64::from(TOKENS_PER_NAME),
                "tool_calls" => value
                    .as_array()
                    .map_or(0, |calls| calls.iter().map(|c| self.tool_call(c)).sum()),
                "function_call" => self.function(value) + u64::from(TOOL_CALL_OVERHEAD),
                // A reference to an earlier audio answer, replayed as audio.
                "audio" if value.is_object() => u64::from(AUDIO_PART_TOKENS),
                // Opaque ids are matched by position, not rendered into the prompt.
                "tool_call_id" => 0,
                // The cookbook counts every string value (role, refusal, ...).
                _ => self.text(value),
            };
        }
        total
    }

    /// `content`: a string, or an array of parts.
    fn content(&self, content: &Value) -> u64 {
        match content {
            Value::String(s) => self.count(s),
            Value::Array(parts) => parts.iter().map(|p| self.part(p)).sum(),
            _ => 0,
        }
    }

    fn part(&self, part: &Value) -> u64 {
        if let Value::String(s) = part {
            return self.count(s);
        }
        let field = |name: &str| part.get(name).map_or(0, |v| self.text(v));
        match part.get("type").and_then(Value::as_str) {
            Some("text" | "input_text" | "output_text") => field("text"),
            Some("refusal") => field("refusal"),
            Some("image_url" | "input_image" | "image") => u64::from(self.image(part)),
            Some("input_audio") => u64::from(AUDIO_PART_TOKENS),
            Some("file" | "input_file") => u64::from(FILE_PART_TOKENS),
            // Unknown part types: their text if they carry any.
            _ => field("text"),
        }
    }

    /// Image cost by `detail`: `image_url.detail` (chat) or `detail` (responses).
    fn image(&self, part: &Value) -> u32 {
        let detail = part
            .get("image_url")
            .and_then(|u| u.get("detail"))
            .or_else(|| part.get("detail"))
            .and_then(Value::as_str);
        if detail == Some("low") {
            self.image_low
        } else {
            self.image_high
        }
    }

    /// One entry of an assistant's `tool_calls`.
    fn tool_call(&self, call: &Value) -> u64 {
        let body = call.get("function").map(|f| self.function(f)).or_else(|| {
            // `custom` tools carry free-form `input` instead of JSON arguments.
            call.get("custom").map(|c| {
                c.get("name").map_or(0, |v| self.text(v))
                    + c.get("input").map_or(0, |v| self.text(v))
            })
        });
        body.unwrap_or(0) + u64::from(TOOL_CALL_OVERHEAD)
    }

    /// `{name, arguments}` of a tool call or a legacy `function_call`.
    fn function(&self, function: &Value) -> u64 {
        function.get("name").map_or(0, |v| self.text(v))
            + function.get("arguments").map_or(0, |v| self.text(v))
    }

    /// Tokens of a string value; other JSON types count nothing.
    fn text(&self, value: &Value) -> u64 {
        value.as_str().map_or(0, |s| self.count(s))
    }

    fn count(&self, s: &str) -> u64 {
        u64::from(self.encoding.count(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RULES: Rules = Rules {
        encoding: Encoding::O200kBase,
        image_low: 85,
        image_high: 765,
    };

    fn n(s: &str) -> u64 {
        tiktoken_rs::o200k_base_singleton().encode_ordinary(s).len() as u64
    }

    #[test]
    fn plain_message() {
        let m = json!({"role": "user", "content": "Hello there, how are you?"});
        assert_eq!(
            RULES.message(&m),
            3 + n("user") + n("Hello there, how are you?")
        );
    }

    #[test]
    fn name_costs_one_more() {
        let m = json!({"role": "system", "name": "example_user", "content": "hi"});
        assert_eq!(
            RULES.message(&m),
            3 + n("system") + n("example_user") + 1 + n("hi")
        );
    }

    #[test]
    fn parts_and_images() {
        let m = json!({"role": "user", "content": [
            {"type": "text", "text": "What is in these pictures?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
            {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            {"type": "image_url", "image_url": {"url": "https://x/z.png", "detail": "high"}},
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
            {"type": "file", "file": {"file_id": "file-1"}},
        ]});
        let expect = 3
            + n("user")
            + n("What is in these pictures?")
            + 85
            + 765
            + 765
            + u64::from(AUDIO_PART_TOKENS)
            + u64::from(FILE_PART_TOKENS);
        assert_eq!(RULES.message(&m), expect);
    }

    #[test]
    fn tool_calls_and_results() {
        let args = r#"{"location":"Paris, France","unit":"celsius"}"#;
        let m = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": args}},
            {"id": "call_def", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
        ]});
        let expect =
            3 + n("assistant") + n("get_weather") + n(args) + n("get_time") + n("{}") + 2 * 7;
        assert_eq!(RULES.message(&m), expect);

        let result = json!({"role": "tool", "tool_call_id": "call_abc", "content": "18°C, sunny"});
        assert_eq!(RULES.message(&result), 3 + n("tool") + n("18°C, sunny"));

        let legacy =
            json!({"role": "assistant", "function_call": {"name": "f", "arguments": "{\"a\":1}"}});
        assert_eq!(
            RULES.message(&legacy),
            3 + n("assistant") + n("f") + n("{\"a\":1}") + 7
        );
    }

    #[test]
    fn odd_shapes_do_not_panic() {
        assert_eq!(RULES.message(&json!("just a string")), 3);
        assert_eq!(
            RULES.message(&json!({"role": "user", "content": 42})),
            3 + n("user")
        );
        assert_eq!(
            RULES.message(&json!({"role": "user", "content": [{"type": "mystery"}]})),
            3 + n("user")
        );
    }
}
