//! foldgate's core: the message vocabulary, token counts and windows, and
//! the fold engine (policy, cut planning, views). Pure: no IO, no runtime,
//! no HTTP; every crate above stands on it (docs/architecture.md).
//!
//! - [`config`]: figment configuration, validation, secrets.
//! - [`message`]: the message vocabulary: roles, pinned head, tool pairing.
//! - [`tokens`]: token estimation, model windows, calibration.
//! - [`fold`]: fold policy, cut planning and views.
//! - [`glob`]: model-name patterns.
//! - [`stem`]: the Porter stemmer the archive search and the summary's
//!   grounding share.

pub mod config;
pub mod fold;
pub mod glob;
pub mod message;
pub mod stem;
pub mod tokens;
