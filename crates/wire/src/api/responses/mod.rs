//! OpenAI Responses (`POST /v1/responses`): `instructions` and leading
//! system/developer items are pinned; a call and its output are never
//! separated, nor a reasoning item from the item it precedes ([`codec`]);
//! recall speaks function-call items and the Responses stream
//! ([`recall`]).

pub mod codec;
pub mod recall;

use super::route;
use super::spec::{self, ApiSpec, RecallSpec, SummaryPlace};
use super::summary::SummaryAnswer;
use super::{Provider, chat};
use crate::usage::{UsageReader, UsageShape};
use serde_json::Value;

/// OpenAI Responses.
pub struct Responses;

/// Its endpoint.
const PATH: &str = "/responses";

/// OpenAI Responses as data: otherwise chat completions' (OpenAI's errors
/// and usage field, the providers chat completions go to), but without
/// Azure's `api-key` header.
pub const SPEC: ApiSpec = ApiSpec {
    name: "responses",
    path: PATH,
    claim: |path| route::endpoint(path, PATH),
    conversation_field: "input",
    keys: spec::BEARER,
    usage: USAGE,
    error_event: recall::error_event,
    summary: SummaryPlace::NotMerged,
    compresses_answers: false,
    recall: RecallSpec {
        offered: true,
        keeps_tool: false,
        shapes: &Responses,
    },
    ..chat::SPEC
};

/// `usage.input_tokens` and `usage.output_tokens`, of the answer or of
/// the `response` an event carries.
const USAGE: UsageReader = UsageReader::of(b"\"usage\"", &USAGE_SHAPE);

/// Where [`USAGE`] reads.
const USAGE_SHAPE: UsageShape = UsageShape {
    within: &["response"],
    ..UsageShape::of("usage", "input_tokens", "output_tokens")
};

/// No summarizer call is made in its shape: a provider of Responses is an
/// OpenAI one, called with chat completions.
impl Provider for Responses {
    fn summary_answer(&self, answer: &Value) -> SummaryAnswer {
        SummaryAnswer::of_completion(answer)
    }
}
