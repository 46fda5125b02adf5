//! What an API is as data: one `const` [`ApiSpec`] per API folder
//! (docs/architecture.md, "An API: a spec and a small codec"). Whatever is
//! the same for every API reads it here, through [`Api`](super::Api)'s
//! accessors (`parts.rs`); the codec traits keep only what is code.

use super::Recall;
use super::context_error::ContextError;
use super::route::Claim;
use crate::config::Placement;
use crate::error::ErrorShape;
use crate::usage::UsageReader;
use bytes::Bytes;

/// One API's data: its routes, keys, usage, framing, error shapes, where
/// its summary goes, its recall round's settings and its telemetry names.
pub struct ApiSpec {
    /// A short label for logs, metrics and the admin API.
    pub name: &'static str,
    /// The `api` setting of the providers its requests go to: never to a
    /// provider of another API, whose host would get the client's key.
    pub provider: &'static str,
    /// Its endpoint, as its SDKs append it to their base URL
    /// (`/chat/completions`; `{model}` where the path names the model).
    pub path: &'static str,
    /// Whether a `POST` to a path is this API's, and what the path says
    /// ([`super::route`]).
    pub claim: fn(&str) -> Option<Claim>,
    /// Whether a path is another of its endpoints (any method): not
    /// folded, forwarded only to its providers ([`super::sibling`]).
    pub owns: fn(&str) -> Option<Claim>,
    /// Whether its requests name their model in the path, not the body.
    pub model_in_path: bool,
    /// The request field holding the conversation.
    pub conversation_field: &'static str,
    /// Where a key goes and where clients send theirs.
    pub keys: Keys,
    /// How an answer reports its tokens (read as it streams by).
    pub usage: UsageReader,
    /// The field of a whole answer that reports its usage (summed over
    /// recall rounds before the client sees it).
    pub usage_field: &'static str,
    /// How a streamed answer is framed.
    pub framing: Framing,
    /// The shape of foldgate's own errors on its route.
    pub error_shape: ErrorShape,
    /// The event that ends a stream foldgate cannot finish.
    pub error_event: fn(&str) -> Bytes,
    /// Reads an upstream 400 body: `Some` when it says the prompt is too
    /// long for the model ([`super::context_error::detect`] for most).
    pub context_error: fn(&[u8]) -> Option<ContextError>,
    /// Words in a summarizer call's error body (lower-cased) saying the
    /// provider rejects the output format asked for.
    pub format_errors: &'static [&'static str],
    /// Where the summary may go.
    pub summary: SummaryPlace,
    /// Whether older assistant answers may be compressed to stubs (only
    /// where a stub keeps the wire pairing).
    pub compresses_answers: bool,
    /// Whether tool results answer calls by position, not by id: a unit's
    /// engine message then depends on whether the unit before it makes
    /// tool calls (Gemini).
    pub answers_by_position: bool,
    /// The recall round.
    pub recall: RecallSpec,
    /// Its names in OpenTelemetry's GenAI conventions.
    pub telemetry: Telemetry,
}

/// Where a provider's key goes, and where clients send theirs.
pub struct Keys {
    /// The header a provider speaking this API reads its key from.
    pub header: &'static str,
    /// Whether the header's value is `Bearer KEY` (else the bare key).
    pub bearer: bool,
    /// Other headers its clients send their key in (Azure's `api-key`).
    pub client_headers: &'static [&'static str],
    /// The query parameter its clients may send their key in (`key`).
    pub query: Option<&'static str>,
}

/// OpenAI's `Authorization: Bearer KEY`.
pub const BEARER: Keys = Keys {
    header: "authorization",
    bearer: true,
    client_headers: &[],
    query: None,
};

/// How a streamed answer's events are delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events.
    Sse,
    /// JSON lines.
    Lines,
    /// AWS event-stream frames.
    EventStream,
}

/// Where an API's body can take the summary, whatever the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SummaryPlace {
    /// Where configured.
    Configured,
    /// Only in the pinned system field.
    System,
    /// Where configured, but not merged into the pinned head
    /// (`instructions` cannot take a merge): then in the system field.
    NotMerged,
}

impl SummaryPlace {
    /// The placement used for a configured one.
    pub fn of(self, configured: Placement) -> Placement {
        match (self, configured) {
            (Self::System, _) | (Self::NotMerged, Placement::Merge) => Placement::System,
            (_, placement) => placement,
        }
    }
}

/// The recall round's settings.
pub struct RecallSpec {
    /// Whether the recall tool may be offered at all (not where a round
    /// would have to read and write frames foldgate does not rewrite).
    pub offered: bool,
    /// Whether the tool must stay defined after the last round (the
    /// history then holds calls of it).
    pub keeps_tool: bool,
    /// The round's shapes (another API's, where the body is that API's).
    pub shapes: &'static dyn Recall,
}

/// An API's names in OpenTelemetry's GenAI conventions.
pub struct Telemetry {
    /// `gen_ai.operation.name`.
    pub operation: &'static str,
    /// `gen_ai.provider.name` of its providers.
    pub provider: &'static str,
}
