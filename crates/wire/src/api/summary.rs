//! The summarizer's call, as an API carries it: what the summarizer asks
//! ([`SummaryCall`]), for the API of the provider it calls to shape
//! ([`crate::api::Provider::summary_body`]), and what its answer says
//! ([`SummaryAnswer`], read by [`crate::api::Provider::summary_answer`]).

use serde_json::Value;

/// How the summarizer is asked for JSON; downgraded when a model rejects it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Format {
    /// `response_format: {"type": "json_schema", ...}` (strict schema).
    JsonSchema,
    /// `response_format: {"type": "json_object"}`.
    JsonObject,
    /// No `response_format`; the prompt alone asks for JSON.
    Instructions,
}

impl Format {
    /// The next weaker format, if any.
    pub fn downgrade(self) -> Option<Self> {
        match self {
            Self::JsonSchema => Some(Self::JsonObject),
            Self::JsonObject => Some(Self::Instructions),
            Self::Instructions => None,
        }
    }
}

/// One summarizer call, before an API shapes it.
pub struct SummaryCall<'a> {
    /// The summarizer's model.
    pub model: &'a str,
    /// The standing instructions.
    pub system: &'a str,
    /// The prompt: the summary so far and the messages to fold.
    pub user: String,
    /// The summary's JSON schema, for an API that takes one.
    pub schema: fn() -> Value,
    /// How JSON is asked for, where the API has a choice.
    pub format: Format,
    /// The output limit.
    pub max_tokens: u32,
    /// Whether the limit goes in `max_completion_tokens` (else `max_tokens`).
    pub completion_param: bool,
}

impl SummaryCall<'_> {
    /// The system prompt and the user's, as chat messages.
    pub fn messages(&self) -> Value {
        serde_json::json!([
            {"role": "system", "content": self.system},
            {"role": "user", "content": self.user},
        ])
    }
}

/// What a successful answer to a summarizer call says, read by the API
/// of the provider that answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SummaryAnswer {
    /// The answer's text (`None`: it has none).
    pub text: Option<String>,
    /// Prompt plus completion tokens (0 when not reported).
    pub tokens: u64,
    /// Whether the output was cut off at the token limit.
    pub cut_off: bool,
}

impl SummaryAnswer {
    /// A chat completion's first choice: its message's `content`,
    /// `usage.total_tokens`, a `length` finish.
    pub fn of_completion(answer: &Value) -> Self {
        Self {
            text: answer
                .pointer("/choices/0/message/content")
                .and_then(Value::as_str)
                .map(str::to_string),
            tokens: answer
                .pointer("/usage/total_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            cut_off: answer
                .pointer("/choices/0/finish_reason")
                .and_then(Value::as_str)
                == Some("length"),
        }
    }
}
