//! The summarizer's call, as an API carries it: what the summarizer asks
//! ([`SummaryCall`]), for the API of the provider it calls to shape
//! ([`crate::api::WireApi::summary_body`]).

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
