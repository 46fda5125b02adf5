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
//! `"format": "json"`. Bodies take the fast path (its `Codec::shallow`, in [`codec`])
//! unless a call has no id.

pub mod codec;
pub mod recall;

use super::route;
use super::spec::{self, ApiSpec, Framing, RecallSpec, SummaryPlace, Telemetry};
use super::summary::{Format, SummaryAnswer, SummaryCall};
use super::{Provider, context_error};
use crate::error::ErrorShape;
use crate::usage::{ReadTokens, Reported, UsageReader};
use serde_json::{Value, json};

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

/// Its endpoint.
const PATH: &str = "/api/chat";

/// Ollama's native chat as data.
pub const SPEC: ApiSpec = ApiSpec {
    name: "ollama",
    provider: "ollama",
    path: PATH,
    claim: |path| route::endpoint(path, PATH),
    owns: |path| SIBLINGS.iter().find_map(|end| route::endpoint(path, end)),
    model_in_path: false,
    conversation_field: "messages",
    keys: spec::BEARER,
    usage: UsageReader {
        key: b"\"prompt_eval_count\"",
        read: ReadTokens::With(tokens),
    },
    usage_field: recall::USAGE,
    framing: Framing::Lines,
    error_shape: ErrorShape(|error| json!({"error": error.to_string()})),
    error_event: recall::error_event,
    context_error: context_error::detect,
    format_errors: &["format"],
    summary: SummaryPlace::Configured,
    compresses_answers: false,
    answers_by_position: false,
    recall: RecallSpec {
        offered: true,
        keeps_tool: false,
        shapes: &Ollama,
    },
    telemetry: Telemetry {
        operation: "chat",
        provider: "ollama",
    },
};

impl Provider for Ollama {
    /// The system prompt and the user's, not streamed, JSON asked for by
    /// `format` unless the format fell back to instructions, the limit in
    /// `options.num_predict`.
    fn summary_body(&self, call: SummaryCall<'_>) -> Option<Value> {
        let mut body = json!({
            "model": call.model,
            "messages": call.messages(),
            "stream": false,
            "options": {"num_predict": call.max_tokens},
        });
        if call.format != Format::Instructions {
            body["format"] = json!("json");
        }
        Some(body)
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
    use crate::api::Fit;
    use crate::api::summary::Format;
    use crate::error::ApiError;
    use serde_json::Map;

    #[test]
    fn routes_errors_and_usage() {
        let o: crate::api::Api = &Ollama;
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
