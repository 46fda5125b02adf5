//! OpenAI chat completions (`POST /v1/chat/completions`): the messages
//! are the engine's messages. The body is read shallowly first
//! ([`crate::shallow`]) and decoded only when a fold may apply
//! ([`codec`]).

pub mod codec;
pub mod recall;

use super::codec::{Decoded, RawRequest};
use super::recall::stream::data_event;
use super::route::{self, Claim};
use super::spec::{self, ApiSpec, Framing, Keys, RecallSpec, SummaryPlace, Telemetry};
use super::summary::{Format, SummaryAnswer, SummaryCall};
use super::{Codec, Provider, context_error};
use crate::error::{ApiError, ErrorShape};
use crate::shallow::Spec;
use crate::usage::{UsageReader, UsageShape};
use serde_json::{Value, json};

/// OpenAI chat completions.
pub struct Chat;

/// Its endpoint.
const PATH: &str = "/chat/completions";

/// Chat completions as data.
pub const SPEC: ApiSpec = ApiSpec {
    name: "chat",
    provider: "openai",
    path: PATH,
    claim,
    owns: |_| None,
    model_in_path: false,
    conversation_field: "messages",
    keys: Keys {
        client_headers: &["api-key"],
        ..spec::BEARER
    },
    usage: USAGE,
    usage_field: "usage",
    framing: Framing::Sse,
    error_shape: ErrorShape(error_envelope),
    error_event: |message| {
        data_event(&json!({"error": {"message": message, "type": "server_error"}}))
    },
    context_error: context_error::detect,
    format_errors: FORMAT_ERRORS,
    summary: SummaryPlace::Configured,
    compresses_answers: true,
    answers_by_position: false,
    recall: RecallSpec {
        offered: true,
        keeps_tool: false,
        shapes: &Chat,
    },
    telemetry: Telemetry {
        operation: "chat",
        provider: "openai",
    },
};

/// What OpenAI's servers name when they refuse a `response_format`.
pub const FORMAT_ERRORS: &[&str] = &["response_format", "json_schema"];

/// Chat completions' usage: `usage.prompt_tokens` and
/// `usage.completion_tokens`.
pub const USAGE: UsageReader = UsageReader::of(b"\"usage\"", &USAGE_SHAPE);

/// Where [`USAGE`] reads.
const USAGE_SHAPE: UsageShape = UsageShape::of("usage", "prompt_tokens", "completion_tokens");

/// What the fast path reads of a chat body: the fields the estimate
/// reads, and the messages as text.
const SHALLOW: Spec = Spec {
    parsed: &[
        "model",
        "tools",
        "functions",
        "response_format",
        "max_tokens",
        "max_completion_tokens",
    ],
    raw: &[],
    items: "messages",
    held_upstream: &[],
    item_members: false,
};

/// A path ending in `/chat/completions`, or Azure OpenAI's
/// `…/deployments/{deployment}/chat/completions`, the deployment naming
/// the model.
fn claim(path: &str) -> Option<Claim> {
    route::deployment(path, PATH).or_else(|| route::endpoint(path, PATH))
}

impl Provider for Chat {
    /// A conversation on an Azure deployment's path is summarized on the
    /// summarizer model's deployment, with the same `api-version`.
    fn summary_path(&self, model: &str, conversation: Option<&str>) -> String {
        let deployment = conversation.filter(|tail| tail.starts_with("/deployments/"));
        match deployment {
            Some(tail) => {
                let query = tail.split_once('?').map_or("", |(_, q)| q);
                let sep = if query.is_empty() { "" } else { "?" };
                format!("/deployments/{model}{PATH}{sep}{query}")
            }
            None => PATH.to_string(),
        }
    }

    /// The system prompt and the user's, `response_format` as `format`
    /// says, and the limit in the parameter the model takes.
    fn summary_body(&self, call: SummaryCall<'_>) -> Option<Value> {
        let mut body = json!({
            "model": call.model,
            "messages": call.messages(),
            "stream": false,
        });
        let limit_key = if call.completion_param {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body[limit_key] = json!(call.max_tokens);
        match call.format {
            Format::JsonSchema => {
                body["response_format"] = json!({
                    "type": "json_schema",
                    "json_schema": { "name": "conversation_summary", "strict": true, "schema": (call.schema)() },
                });
            }
            Format::JsonObject => body["response_format"] = json!({ "type": "json_object" }),
            Format::Instructions => {}
        }
        Some(body)
    }

    fn summary_answer(&self, answer: &Value) -> SummaryAnswer {
        SummaryAnswer::of_completion(answer)
    }
}

/// The messages are the engine's.
impl Codec for Chat {
    fn spec(&self) -> &'static ApiSpec {
        &SPEC
    }

    fn decode(&self, _path: Option<&str>, bytes: &[u8]) -> Result<Decoded, ApiError> {
        codec::decode(bytes)
    }

    /// The one message itself.
    fn unit_message(&self, unit: &[Value], _after_calls: bool) -> Value {
        unit.first().cloned().unwrap_or(Value::Null)
    }

    fn shallow<'a>(&self, bytes: &'a [u8]) -> Option<RawRequest<'a>> {
        RawRequest::one_per_item(bytes, &SHALLOW, None)
    }
}

/// OpenAI's error envelope for one of foldgate's own errors: its `type`
/// in OpenAI's vocabulary, its `code` foldgate's label.
pub fn error_envelope(error: &ApiError) -> Value {
    let kind = match error {
        ApiError::BadRequest { .. }
        | ApiError::ContextLength(_)
        | ApiError::NotFound(_)
        | ApiError::NoState(_)
        | ApiError::BodyTooLarge { .. }
        | ApiError::ModelNotFound(_)
        | ApiError::NoProvider { .. } => "invalid_request_error",
        ApiError::Unauthorized(_) => "authentication_error",
        _ => "server_error",
    };
    let param = match error {
        ApiError::BadRequest { param, .. } => *param,
        ApiError::ContextLength(_) => Some("messages"),
        ApiError::ModelNotFound(_) => Some("model"),
        _ => None,
    };
    json!({
        "error": {
            "message": error.to_string(),
            "type": kind,
            "param": param,
            "code": error.code(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn openai_error_envelope() {
        let error = ApiError::BodyTooLarge { limit: 10 };
        let resp = error.into_response_as(SPEC.error_shape);
        assert_eq!(resp.status(), 413);
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["error"]["code"], "request_too_large");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["param"].is_null());
        assert!(v["error"]["message"].as_str().unwrap().contains("10 bytes"));
    }
}
