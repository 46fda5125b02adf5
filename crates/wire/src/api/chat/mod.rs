//! OpenAI chat completions (`POST /v1/chat/completions`): the messages
//! are the engine's messages. The body is read shallowly first
//! ([`crate::shallow`]) and decoded only when a fold may apply
//! ([`codec`]).

pub mod codec;
pub mod recall;

use super::codec::RawRequest;
use super::route::{self, Claim};
use super::summary::{Format, SummaryCall};
use super::{Codec, Endpoint, Provider};
use crate::error::{ApiError, ErrorShape};
use crate::shallow::Spec;
use crate::usage::{UsageReader, UsageShape};
use serde_json::{Value, json};

/// OpenAI chat completions.
pub struct Chat;

/// Chat completions' usage: `usage.prompt_tokens` and
/// `usage.completion_tokens` (every API's by default, [`Provider::usage`]).
pub const USAGE: UsageReader = UsageReader {
    key: b"\"usage\"",
    tokens: |data| USAGE_SHAPE.tokens(data),
};

/// Where [`USAGE`] reads.
const USAGE_SHAPE: UsageShape = UsageShape {
    field: "usage",
    tokens: "prompt_tokens",
    added: &[],
    output: "completion_tokens",
    within: &[],
    array: false,
};

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

impl Endpoint for Chat {
    fn name(&self) -> &'static str {
        "chat"
    }

    fn path(&self) -> &'static str {
        "/chat/completions"
    }

    /// Also Azure OpenAI's `…/deployments/{deployment}/chat/completions`,
    /// the deployment naming the model.
    fn claim(&self, path: &str) -> Option<Claim> {
        route::deployment(path, self.path()).or_else(|| route::endpoint(path, self.path()))
    }
}

impl Provider for Chat {
    fn provider(&self) -> &'static str {
        "openai"
    }

    /// `{"error":{"message","type","param","code"}}` (every API's by
    /// default).
    fn error_shape(&self) -> ErrorShape {
        ErrorShape(error_envelope)
    }

    fn client_key_headers(&self) -> &'static [&'static str] {
        &["api-key"]
    }

    /// A conversation on an Azure deployment's path is summarized on the
    /// summarizer model's deployment, with the same `api-version`.
    fn summary_path(&self, model: &str, conversation: Option<&str>) -> String {
        let deployment = conversation.filter(|tail| tail.starts_with("/deployments/"));
        match deployment {
            Some(tail) => {
                let query = tail.split_once('?').map_or("", |(_, q)| q);
                let sep = if query.is_empty() { "" } else { "?" };
                format!("/deployments/{model}{}{sep}{query}", self.path())
            }
            None => self.path().to_string(),
        }
    }

    /// The system prompt and the user's, `response_format` as `format`
    /// says, and the limit in the parameter the model takes.
    fn summary_body(&self, call: SummaryCall<'_>) -> Option<Value> {
        let mut body = json!({
            "model": call.model,
            "messages": [
                { "role": "system", "content": call.system },
                { "role": "user", "content": call.user },
            ],
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
}

/// The messages are the engine's: decoded and filled as [`Codec`]'s
/// defaults do.
impl Codec for Chat {
    fn shallow<'a>(&self, bytes: &'a [u8]) -> Option<RawRequest<'a>> {
        RawRequest::one_per_item(bytes, &SHALLOW, None)
    }

    fn compresses_answers(&self) -> bool {
        true
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
        let resp = error.into_response_as(Chat.error_shape());
        assert_eq!(resp.status(), 413);
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["error"]["code"], "request_too_large");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["param"].is_null());
        assert!(v["error"]["message"].as_str().unwrap().contains("10 bytes"));
    }
}
