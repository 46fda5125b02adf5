//! Which API claims a request, by the shape of its path: the endpoint's
//! last segments, under any mount prefix and version segment. A claim
//! also says where the client's base URL ends — the rest of the path
//! (the *tail*) is what its SDK appended, and goes after the provider's
//! `base_url` — and which model the path names, if any.
//!
//! | client's path | tail | model |
//! |---|---|---|
//! | `/v1/chat/completions`, `/api/v1/…`, `/openai/v1/…` | `/chat/completions` | |
//! | `/openai/deployments/{d}/chat/completions` (Azure) | `/deployments/{d}/chat/completions` | `d` |
//! | `/anthropic/v1/messages` | `/messages` | |
//! | `/v1/responses` | `/responses` | |
//! | `/v1beta/models/{m}:generateContent` | the whole path, version kept | `m` |
//! | `/v1/projects/{p}/locations/{l}/publishers/google/models/{m}:…` (Vertex) | the whole path | `m` |

use std::ops::Range;

/// What an API's claim on a path says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Where the tail starts: the client's base URL ends just before.
    pub tail: usize,
    /// The model the path names (a Gemini model, an Azure deployment).
    pub model: Option<Range<usize>>,
}

/// A path ending in `endpoint` (`/chat/completions`) at a segment
/// boundary: the endpoint is the tail.
pub fn endpoint(path: &str, endpoint: &str) -> Option<Claim> {
    path.ends_with(endpoint).then(|| Claim {
        tail: path.len() - endpoint.len(),
        model: None,
    })
}

/// Azure OpenAI's `…/deployments/{deployment}{endpoint}`: the tail starts
/// at `/deployments` (the SDK's base URL ends in `/openai`) and the
/// deployment names the model.
pub fn deployment(path: &str, endpoint: &str) -> Option<Claim> {
    let before = path.strip_suffix(endpoint)?;
    // A byte search: the part before the endpoint is short (`/v1`), where
    // `rfind`'s searcher costs more than the walk.
    let slash = before.bytes().rposition(|b| b == b'/')?;
    let name = &before[slash + 1..];
    let parent = before[..slash].strip_suffix("/deployments")?;
    (!name.is_empty()).then(|| Claim {
        tail: parent.len(),
        model: Some(slash + 1..before.len()),
    })
}

/// Gemini's `…/models/{model}:{method}` for one of `methods` (any
/// method when `methods` is empty): the tail
/// keeps the path from its version segment (`v1`, `v1beta`, `v1beta1`,
/// `v1alpha`), and with it Vertex AI's `projects/{p}/locations/{l}/`
/// and `publishers/{publisher}/` segments, since a Gemini provider's
/// `base_url` is the bare host; without a version, from `models/`.
pub fn gemini_model(path: &str, methods: &[&str]) -> Option<Claim> {
    // Byte walks, as in `deployment`: every claimed request asks.
    let slash = path.bytes().rposition(|b| b == b'/')?;
    let last = &path[slash + 1..];
    let colon = last.bytes().position(|b| b == b':')?;
    if colon == 0 || !(methods.is_empty() || methods.contains(&&last[colon..])) {
        return None;
    }
    let head = path[..slash].strip_suffix("/models")?;
    // Each segment before `/models` with where it starts (after its `/`).
    let mut segments: Vec<(usize, &str)> = Vec::new();
    let mut at = 0;
    for segment in head.split('/') {
        segments.push((at, segment));
        at += segment.len() + 1;
    }
    let name = |n: usize, back: usize| n.checked_sub(back).map(|i| segments[i].1);
    let mut n = segments.len();
    if name(n, 2) == Some("publishers") && name(n, 1).is_some_and(|p| !p.is_empty()) {
        n -= 2;
    }
    if name(n, 4) == Some("projects") && name(n, 2) == Some("locations") {
        n -= 4;
    }
    if name(n, 1).is_some_and(is_version) {
        n -= 1;
    }
    let tail = match segments.get(n) {
        Some(&(start, _)) => start.saturating_sub(1),
        None => head.len(),
    };
    Some(Claim {
        tail,
        model: Some(slash + 1..slash + 1 + colon),
    })
}

/// Whether a path segment is an API version: `v` and digits, then
/// optionally `alpha` or `beta` and digits.
pub fn is_version(segment: &str) -> bool {
    let Some(rest) = segment.strip_prefix('v') else {
        return false;
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let suffix = &rest[digits..];
    let label = suffix
        .strip_prefix("alpha")
        .or_else(|| suffix.strip_prefix("beta"));
    digits > 0
        && (suffix.is_empty() || label.is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        for v in ["v1", "v1beta", "v1alpha", "v1beta1", "v2", "v10alpha3"] {
            assert!(is_version(v), "{v}");
        }
        for v in [
            "v", "vbeta", "v1gamma", "1", "api", "version1", "v1-beta", "",
        ] {
            assert!(!is_version(v), "{v}");
        }
    }

    #[test]
    fn endpoints_end_at_a_segment() {
        assert_eq!(
            endpoint("/a/messages", "/messages").map(|c| c.tail),
            Some(2)
        );
        assert_eq!(endpoint("/a/ws_messages", "/messages"), None);
        assert_eq!(
            deployment("/openai/chat/completions", "/chat/completions"),
            None
        );
        assert_eq!(
            deployment("/deployments//chat/completions", "/chat/completions"),
            None
        );
    }
}
