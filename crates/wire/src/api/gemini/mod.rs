//! Gemini (`POST /v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent`, `?alt=sse` or a JSON array): the model is in
//! the path; `systemInstruction` is pinned; a model turn's
//! `functionCall`s and the user turn of `functionResponse`s answering them
//! are never separated; the summary is appended to `systemInstruction`
//! ([`codec`]). The key comes in `x-goog-api-key` or `?key=` (passed
//! through), or from a provider with `api = "gemini"`; errors take
//! Google's shape; usage is `usageMetadata.promptTokenCount`. Untouched
//! bodies take the fast path ([`shallow`]).

pub mod codec;
pub mod recall;
pub mod shallow;

use super::codec::{Decoded, Fields, RawRequest, Wire, bad, object};
use super::context_error::{self, ContextError};
use super::route;
use super::spec::{ApiSpec, Framing, Keys, RecallSpec, SummaryPlace, Telemetry};
use super::summary::{Format, SummaryAnswer, SummaryCall};
use super::{Codec, Provider};
use crate::error::{ApiError, ErrorShape};
use crate::fold::view::Item;
use crate::usage::{UsageReader, UsageShape};
use serde_json::{Value, json};

/// Gemini's `generateContent`.
pub struct Gemini;

/// The methods of a model it serves.
const METHODS: [&str; 2] = [":generateContent", ":streamGenerateContent"];

/// Gemini as data. Its routes: `…/models/{model}:generateContent` or
/// `:streamGenerateContent` under any version (`v1`, `v1beta`, `v1alpha`,
/// none) and mount prefix, Vertex AI's `…/projects/{p}/locations/{l}/
/// publishers/google/models/{model}:…` included; the version segment
/// stays in the tail, since a Gemini provider's `base_url` is the bare
/// host. Every other method of a model (`:countTokens`, `:embedContent`,
/// …) is a sibling.
pub const SPEC: ApiSpec = ApiSpec {
    name: "gemini",
    provider: "gemini",
    path: "/v1beta/models/{model}:generateContent",
    claim: |path| route::gemini_model(path, &METHODS),
    owns: |path| route::gemini_model(path, &[]),
    model_in_path: true,
    conversation_field: "contents",
    keys: Keys {
        header: "x-goog-api-key",
        bearer: false,
        client_headers: &[],
        query: Some("key"),
    },
    usage: USAGE,
    usage_field: recall::USAGE,
    framing: Framing::Sse,
    error_shape: ErrorShape(error_envelope),
    error_event: recall::error_event,
    context_error,
    format_errors: &[
        "responsemimetype",
        "response_mime_type",
        "responseschema",
        "response_schema",
        "json mode",
    ],
    summary: SummaryPlace::System,
    compresses_answers: false,
    answers_by_position: true,
    recall: RecallSpec {
        offered: true,
        keeps_tool: true,
        shapes: &Gemini,
    },
    telemetry: Telemetry {
        operation: "generate_content",
        provider: "gcp.gemini",
    },
};

/// `usageMetadata.promptTokenCount` and `candidatesTokenCount`, in each
/// event or the whole answer (a JSON array when streamed without
/// `alt=sse`).
const USAGE: UsageReader = UsageReader::of(b"\"usageMetadata\"", &USAGE_SHAPE);

/// Where [`USAGE`] reads.
const USAGE_SHAPE: UsageShape = UsageShape {
    array: true,
    ..UsageShape::of(recall::USAGE, "promptTokenCount", "candidatesTokenCount")
};

/// "The input token count (N) exceeds the maximum number of tokens
/// allowed (M)." names the window; other shapes as every API's.
fn context_error(body: &[u8]) -> Option<ContextError> {
    let text = String::from_utf8_lossy(body);
    const MARK: &str = "exceeds the maximum number of tokens allowed (";
    match text.find(MARK) {
        Some(at) => {
            let digits: String = text[at + MARK.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            Some(ContextError {
                window: digits.parse().ok(),
            })
        }
        None => context_error::detect(body),
    }
}

impl Provider for Gemini {
    /// The prompt in `systemInstruction`; JSON asked for by
    /// `responseMimeType` unless the format fell back to instructions.
    fn summary_body(&self, call: SummaryCall<'_>) -> Option<Value> {
        let mut config = json!({"maxOutputTokens": call.max_tokens});
        if call.format != Format::Instructions {
            config["responseMimeType"] = json!("application/json");
        }
        Some(json!({
            "systemInstruction": {"parts": [{"text": call.system}]},
            "contents": [{"role": "user", "parts": [{"text": call.user}]}],
            "generationConfig": config,
        }))
    }

    fn summary_path(&self, model: &str, _conversation: Option<&str>) -> String {
        format!("/v1beta/models/{model}:generateContent")
    }

    /// The first candidate's text (thoughts left out), `usageMetadata.
    /// totalTokenCount`, a `MAX_TOKENS` finish.
    fn summary_answer(&self, answer: &Value) -> SummaryAnswer {
        let parts = answer
            .pointer("/candidates/0/content/parts")
            .and_then(Value::as_array);
        let text: String = parts
            .into_iter()
            .flatten()
            .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        SummaryAnswer {
            text: Some(text),
            tokens: answer
                .pointer("/usageMetadata/totalTokenCount")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            cut_off: answer.pointer("/candidates/0/finishReason")
                == Some(&Value::from("MAX_TOKENS")),
        }
    }
}

impl Codec for Gemini {
    fn spec(&self) -> &'static ApiSpec {
        &SPEC
    }

    /// The model is the path's when the path is known, else the body's.
    fn decode(&self, path: Option<&str>, bytes: &[u8]) -> Result<Decoded, ApiError> {
        let fields = object(bytes)?;
        let model = match path {
            Some(path) => codec::model_in_path(path)
                .ok_or_else(|| bad("the path names no model", None))?
                .to_string(),
            None => fields
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        };
        codec::decode(fields, &model)
    }

    fn fill_wire(&self, fields: &mut Fields, _: &[Value], wire: &Wire, items: Vec<Item>) {
        codec::encode(fields, wire, items);
    }

    /// One content each (a function response answers the model turn
    /// before it); one that is not an object has none (the decoder
    /// refuses it, so the fast path must not take it).
    fn unit_message(&self, unit: &[Value], after_calls: bool) -> Value {
        match unit {
            [content] if content.is_object() => codec::unit_message(content, after_calls),
            _ => Value::Null,
        }
    }

    fn shallow<'a>(&self, bytes: &'a [u8]) -> Option<RawRequest<'a>> {
        shallow::shallow(bytes)
    }
}

/// Google's error envelope for one of foldgate's own errors.
fn error_envelope(error: &ApiError) -> Value {
    let code = error.status().as_u16();
    let status = match code {
        400 | 413 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        502 | 503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    };
    json!({"error": {"code": code, "message": error.to_string(), "status": status}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_errors() {
        let g: crate::api::Api = &Gemini;
        assert!(
            g.claim("/v1beta/models/gemini-2.5-flash:generateContent")
                .is_some()
        );
        assert!(
            g.claim("/v1/models/gemini-2.5-flash:streamGenerateContent")
                .is_some()
        );
        assert!(
            g.claim("/v1beta/models/gemini-2.5-flash:countTokens")
                .is_none()
        );
        assert!(g.claim("/v1beta/models").is_none());
        assert!(g.claim("/v1beta/models/:generateContent").is_none());
        let body = br#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#;
        assert_eq!(
            g.context_error(body).and_then(|e| e.window),
            Some(1_048_576)
        );
        assert_eq!(g.context_error(br#"{"error":{"message":"bad"}}"#), None);
        assert_eq!(g.query_key("alt=sse&key=AIza-1"), Some("AIza-1"));
        assert_eq!(g.query_key("alt=sse&monkey=x"), None);
        let e = error_envelope(&ApiError::ModelNotFound("m".into()));
        assert_eq!(
            (&e["error"]["code"], &e["error"]["status"]),
            (&json!(404), &json!("NOT_FOUND"))
        );
    }

    #[test]
    fn usage_from_usage_metadata() {
        let prompt_tokens = |data: &[u8]| USAGE.tokens(data).prompt;
        let one = br#"{"candidates":[],"usageMetadata":{"promptTokenCount":42}}"#;
        assert_eq!(prompt_tokens(one), Some(42));
        let array = br#"[{"candidates":[]},{"usageMetadata":{"promptTokenCount":7}}]"#;
        assert_eq!(prompt_tokens(array), Some(7));
        let spaced = b" [ {\"usageMetadata\": {\"promptTokenCount\": 3}} , {\"candidates\": [{\"x\": \"]\"}]} ] ";
        assert_eq!(prompt_tokens(spaced), Some(3));
        for none in [
            &br#"{"candidates":[]}"#[..],
            br#"{"usageMetadata":null}"#,
            br#"{"usageMetadata":{"promptTokenCount":-1}}"#,
            br#"{"usageMetadata":{"promptTokenCount":5000000000}}"#,
            br#"{"usageMetadata":{"promptTokenCount":"7"}}"#,
            b"not json",
        ] {
            assert_eq!(
                prompt_tokens(none),
                None,
                "{}",
                String::from_utf8_lossy(none)
            );
        }
    }

    #[test]
    fn summarizer_answers_read_as_completions() {
        let answer = json!({"candidates": [{"content": {"parts": [{"text": "{\"summary\":"}, {"text": "\"x\"}"}]},
            "finishReason": "MAX_TOKENS"}], "usageMetadata": {"totalTokenCount": 9}});
        let read = Gemini.summary_answer(&answer);
        assert_eq!(read.text.as_deref(), Some("{\"summary\":\"x\"}"));
        assert!(read.cut_off);
        assert_eq!(read.tokens, 9);
    }
}
