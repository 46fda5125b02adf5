//! The wire formats foldgate folds, one folder each, behind one trait.
//!
//! A [`WireApi`] is everything one API means to the pipeline, in four
//! parts: its [`Endpoint`] (the route it serves), its [`Provider`] side
//! (keys, error shape and context-length error, usage, the summarizer's
//! call to a provider that speaks it), its [`Codec`] (how its body becomes
//! the fold engine's messages and a view goes back into it, where the
//! summary goes) and its [`Recall`] round. Every part's defaults are chat
//! completions', so a folder writes only what its wire does differently
//! (docs/architecture.md, "An API: the `WireApi` parts", has the table).
//! The server's pipeline holds an [`Api`] and names none of
//! them; adding an API is a folder here and one line in [`APIS`].
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
pub mod summary;

pub use context_error::ContextError;
pub use parts::{Codec, Endpoint, Provider, Recall, Signer, WireApi};
pub use registry::*;

mod parts;
mod registry;
#[cfg(test)]
mod tests;
