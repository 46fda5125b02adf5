//! Token estimation: counts a chat request's prompt tokens in the model's
//! encoding, knows each model's context window, and calibrates itself
//! against the upstream's reported usage.
//!
//! - [`encoding`]: which tiktoken encoding a model is counted in.
//! - [`message`]: the per-message counting rules (OpenAI cookbook, extended).
//! - `tools`: tokens of tool/function definitions.
//! - `hash`: structural hash of a message, the count cache's key.
//! - `registry`: [`ModelLimits`] and built-in windows of well-known models.
//! - `calibration`: the per-model actual/estimated factor.
//! - `counter`: [`TokenCounter`], which ties these together.
//! - `estimate`: [`Estimate`], its result.
//! - `discovery`: parsers of providers' `/models`, LiteLLM's `/model/info`, llama.cpp's `/props`, Ollama's `/api/show`.
//! - `windows`: windows read from providers or learned, and the ones missing.
//!
//! Reading `usage` out of responses is `foldgate_wire::usage`'s.

mod cache;
mod calibration;
mod counter;
mod discovery;
pub mod encoding;
mod estimate;
pub(crate) mod hash;
pub mod message;
mod registry;
mod tools;
mod windows;

pub use crate::config::default_reserve;
pub use calibration::{ALPHA as CALIBRATION_ALPHA, MAX_FACTOR, MIN_FACTOR};
pub use counter::{RawCount, RawUnits, TokenCounter};
pub use discovery::{
    parse_litellm_model_info, parse_llamacpp_props, parse_model_ids, parse_models_listing,
    parse_ollama_show, parse_ollama_tags, parse_openapi_title,
};
pub use encoding::Encoding;
pub use estimate::{CacheStats, Estimate, REQUEST_WINDOW};
pub use registry::{LimitSource, ModelLimits, UNKNOWN_WINDOW};
pub use windows::{KnownWindow, MissingWindow};
