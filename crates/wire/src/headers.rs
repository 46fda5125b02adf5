//! The response headers foldgate adds to an intercepted conversation
//! request (the README's quick start lists them), as constants: a name given as a `&str` is checked
//! byte by byte on every insert and every lookup.

use http::HeaderName;

/// `none` | `reused` | `new`.
pub const FOLD: HeaderName = HeaderName::from_static("x-foldgate-fold");
/// Estimated tokens of the client's messages.
pub const TOKENS_IN: HeaderName = HeaderName::from_static("x-foldgate-tokens-in");
/// Estimated tokens of the forwarded view.
pub const TOKENS_OUT: HeaderName = HeaderName::from_static("x-foldgate-tokens-out");
/// Older tool outputs replaced by stubs in the view.
pub const COMPRESSED: HeaderName = HeaderName::from_static("x-foldgate-compressed");
/// Archive excerpts injected into the view.
pub const RECALL_INJECTED: HeaderName = HeaderName::from_static("x-foldgate-recall-injected");
/// Why a fold that was tried did not happen.
pub const WARNING: HeaderName = HeaderName::from_static("x-foldgate-warning");
/// The conversation id used (a header's value or a fingerprint).
pub const CONVERSATION: HeaderName = HeaderName::from_static("x-foldgate-conversation");
