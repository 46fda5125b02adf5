//! Ollama's native chat (`POST /api/chat`), as Open WebUI, the official
//! `ollama` Python and JS clients and LangChain's `ChatOllama` speak it:
//! `messages` with `images`, `thinking` and `tool_calls` (arguments as an
//! object), `tool` results naming the tool in `tool_name`; a stream of
//! JSON lines unless `stream` is `false` (absent means true); usage as
//! `prompt_eval_count` / `eval_count` on the final `done: true` object;
//! errors as `{"error": "..."}`. `options.num_ctx`, when set, is the
//! request's window; `format`, `keep_alive`, `think` and the other
//! fields go upstream untouched ([`codec`]). Providers set
//! `api = "ollama"` with the server's bare address as `base_url`; the
//! summarizer calls `/api/chat` with `"stream": false` and
//! `"format": "json"`. Bodies take the fast path ([`codec::shallow`])
//! unless a call has no id.

pub mod codec;
pub mod recall;

use super::codec::{Decoded, RawRequest, Wire};
use super::route::{self, Claim};
use super::summary::{Format, SummaryAnswer, SummaryCall};
use super::{Codec, Endpoint, Fit, Provider};
use crate::error::{ApiError, ErrorShape};
use crate::fold::view::Item;
use crate::usage::{Reported, UsageReader};
use serde_json::{Map, Value, json};

/// Ollama's native chat.
pub struct Ollama;

/// Ollama's other endpoints under `/api/`: not folded, forwarded only to
/// an Ollama provider.
const SIBLINGS: [&str; 8] = [
    "/api/generate",
    "/api/embed",
    "/api/embeddings",
    "/api/show",
    "/api/tags",
    "/api/ps",
    "/api/version",
    "/api/pull",
];

impl Endpoint for Ollama {
    fn name(&self) -> &'static str {
        "ollama"
    }

    fn path(&self) -> &'static str {
        "/api/chat"
    }

    fn owns(&self, path: &str) -> Option<Claim> {
        SIBLINGS
            .iter()
            .find_map(|endpoint| route::endpoint(path, endpoint))
    }
}

impl Provider for Ollama {
    /// `{"error": "..."}`.
    fn error_shape(&self) -> ErrorShape {
        ErrorShape(|error| json!({"error": error.to_string()}))
    }

    /// The system prompt and the user's, not streamed, JSON asked for by
    /// `format` unless the format fell back to instructions, the limit in
    /// `options.num_predict`.
    fn summary_body(&self, call: SummaryCall<'_>) -> Option<Value> {
        let mut body = json!({
            "model": call.model,
            "messages": [
                {"role": "system", "content": call.system},
                {"role": "user", "content": call.user},
            ],
            "stream": false,
            "options": {"num_predict": call.max_tokens},
        });
        if call.format != Format::Instructions {
            body["format"] = json!("json");
        }
        Some(body)
    }

    fn rejects_format(&self, error: &str) -> bool {
        error.contains("format")
    }

    /// The message's text, the two counts, a `length` finish.
    fn summary_answer(&self, answer: &Value) -> SummaryAnswer {
        let count = |field: &str| answer.get(field).and_then(Value::as_u64).unwrap_or(0);
        SummaryAnswer {
            text: answer
                .pointer("/message/content")
                .and_then(Value::as_str)
                .map(str::to_string),
            tokens: count(recall::USAGE) + count("eval_count"),
            cut_off: answer.get("done_reason").and_then(Value::as_str) == Some("length"),
        }
    }

    fn usage(&self) -> UsageReader {
        UsageReader {
            key: b"\"prompt_eval_count\"",
            tokens,
        }
    }

    fn usage_field(&self) -> &'static str {
        recall::USAGE
    }
}

impl Codec for Ollama {
    /// Only Ollama's clients write `options`, `keep_alive` or `think`.
    fn fit(&self, body: &Map<String, Value>) -> Fit {
        match ["options", "keep_alive", "think"]
            .iter()
            .any(|k| body.contains_key(*k))
        {
            true if body.contains_key("messages") => Fit::Only,
            _ if body.contains_key("messages") => Fit::Field,
            _ => Fit::No,
        }
    }

    fn shallow<'a>(&self, bytes: &'a [u8]) -> Option<RawRequest<'a>> {
        codec::shallow(bytes)
    }

    fn unit_message(&self, unit: &[Value]) -> Value {
        codec::unit_message(unit)
    }

    fn decode(&self, bytes: &[u8]) -> Result<Decoded, ApiError> {
        codec::decode(bytes)
    }

    fn fill_wire(
        &self,
        fields: &mut Map<String, Value>,
        _messages: &[Value],
        wire: &Wire,
        items: Vec<Item>,
    ) {
        codec::fill(fields, wire, items);
    }
}

/// The tokens of an answer, or of the last line of a stream of them that
/// reports its prompt's: `prompt_eval_count` and `eval_count`.
fn tokens(data: &[u8]) -> Reported {
    #[derive(serde::Deserialize)]
    struct Counts {
        prompt_eval_count: Option<u64>,
        eval_count: Option<u64>,
    }
    let count = |n: Option<u64>| n.and_then(|n| u32::try_from(n).ok());
    let Ok(text) = std::str::from_utf8(data) else {
        return Reported::default();
    };
    text.lines()
        .rev()
        .find_map(|line| {
            let counts: Counts = serde_json::from_str(line.trim()).ok()?;
            let prompt = Some(count(counts.prompt_eval_count)?);
            Some(Reported {
                prompt,
                output: count(counts.eval_count),
            })
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::summary::Format;

    #[test]
    fn routes_errors_and_usage() {
        let o = Ollama;
        assert_eq!(o.claim("/api/chat").map(|c| c.tail), Some(0));
        assert_eq!(o.claim("/ollama/api/chat").map(|c| c.tail), Some(7));
        assert!(o.claim("/api/chats").is_none());
        assert!(o.owns("/api/tags").is_some() && o.owns("/api/chat").is_none());
        let e = (o.error_shape().0)(&ApiError::ModelNotFound("m".into()));
        let fits = |v: Value| o.fit(v.as_object().unwrap());
        assert_eq!(fits(json!({"messages": [], "options": {}})), Fit::Only);
        assert_eq!(fits(json!({"messages": []})), Fit::Field);
        assert!(e["error"].is_string() && e.as_object().map(Map::len) == Some(1));
        let done = br#"{"model":"m","message":{"role":"assistant","content":"hi"},"done":true,"prompt_eval_count":26,"eval_count":3}"#;
        assert_eq!(tokens(done).prompt, Some(26));
        assert_eq!(tokens(done).output, Some(3));
        let stream = [
            &br#"{"message":{"content":"a"},"done":false}"#[..],
            b"\n",
            done,
            b"\n",
        ]
        .concat();
        assert_eq!(tokens(&stream).prompt, Some(26));
        assert!(tokens(br#"{"done":false}"#).is_empty());
    }

    #[test]
    fn the_summarizer_asks_for_json_without_a_stream() {
        let call = |format| SummaryCall {
            model: "llama3.2",
            system: "s",
            user: "u".into(),
            schema: || json!({}),
            format,
            max_tokens: 300,
            completion_param: false,
        };
        let body = Ollama.summary_body(call(Format::JsonSchema)).unwrap();
        assert_eq!(
            (&body["stream"], &body["format"]),
            (&json!(false), &json!("json"))
        );
        assert_eq!(body["options"]["num_predict"], 300);
        let plain = Ollama.summary_body(call(Format::Instructions)).unwrap();
        assert!(plain.get("format").is_none());
        let answer = json!({"message": {"role": "assistant", "content": "{}"}, "done": true,
            "done_reason": "length", "prompt_eval_count": 10, "eval_count": 5});
        let read = Ollama.summary_answer(&answer);
        assert_eq!(
            (read.text.as_deref(), read.tokens, read.cut_off),
            (Some("{}"), 15, true)
        );
    }
}
