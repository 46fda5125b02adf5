//! The wire formats foldgate folds, one folder each, behind one trait.
//!
//! An API is data plus a small codec (docs/architecture.md, "An API: a
//! spec and a small codec"): a `const` [`ApiSpec`] (its name, routes,
//! conversation field, keys, usage, framing, error shapes, where the
//! summary goes, its recall round's settings and telemetry names) and a
//! [`WireApi`]: its [`Codec`] (decode, fill, the fast path's reader), its
//! [`Provider`] side (the summarizer's call) and, through the spec, its
//! [`Recall`] shapes. What every API does alike reads the spec, once
//! (`parts.rs`, [`codec`], [`recall`]). The server's pipeline holds an
//! [`Api`] and names none of them; adding an API is a folder here and one
//! line in [`APIS`].
//!
//! - [`chat`]: OpenAI chat completions; the messages are the engine's.
//! - [`anthropic`]: Anthropic Messages; `system` pinned, `tool_use` and
//!   its `tool_result`s one unit, the summary appended to `system`.
//! - [`responses`]: OpenAI Responses; `instructions` pinned, calls and
//!   outputs paired by `call_id`.
//! - [`gemini`]: Gemini `generateContent`; `systemInstruction` pinned,
//!   `functionCall` and `functionResponse` parts one unit, the model in
//!   the path.
//! - [`ollama`]: Ollama's native `/api/chat`; JSON-line streams, calls'
//!   arguments as objects, `options.num_ctx` the request's window.
//! - [`bedrock`]: Amazon Bedrock's `InvokeModel` for Claude: Anthropic
//!   Messages bodies, the model in the path, AWS event-stream answers,
//!   requests signed with SigV4.
//! - [`codec`] (with [`crate::shallow`]), [`recall`], [`context_error`], [`summary`]:
//!   what the APIs share.

pub mod anthropic;
pub mod bedrock;
pub mod chat;
pub mod codec;
pub mod context_error;
#[doc(hidden)]
pub mod fuzzing;
pub mod gemini;
pub mod ollama;
pub mod recall;
pub mod responses;
pub mod route;
pub mod spec;
pub mod summary;

pub use context_error::ContextError;
pub use parts::{Codec, Provider, Recall, Signer, WireApi};
pub use registry::*;
pub use spec::ApiSpec;

mod parts;
mod registry;
#[cfg(test)]
mod tests;
