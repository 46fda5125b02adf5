//! Conversation-shaped `POST`s that no API claims: forwarded as they
//! came, but never silently. Each path is counted
//! (`foldgate_unrecognised_total{path}`), warned about once with what to
//! do, and listed for the dashboard (`GET /foldgate/unclaimed`).
//!
//! A body is conversation-shaped when it has a `messages` or `contents`
//! array, or an `input` array holding an item with a `role` (embeddings
//! and moderations take `input` too, as strings or typed parts). Known
//! non-conversation endpoints that carry one (token counting, batches,
//! embeddings) are not reported.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Distinct paths reported; past them, [`OTHER`] (paths may carry ids).
const MAX_PATHS: usize = 64;

/// The label of paths past [`MAX_PATHS`].
pub const OTHER: &str = "other";

/// Endpoints whose bodies look like conversations but are not ones.
const NOT_CONVERSATIONS: [&str; 6] = [
    "/count_tokens",
    ":countTokens",
    "/input_tokens",
    ":embedContent",
    ":batchEmbedContents",
    "/batches",
];

/// The paths seen and their counts.
#[derive(Debug, Default)]
pub struct Unclaimed {
    seen: Mutex<BTreeMap<String, u64>>,
    counter: Family<Vec<(&'static str, String)>, Counter>,
}

impl Unclaimed {
    /// The counter family, for the metrics registry.
    pub fn family(&self) -> Family<Vec<(&'static str, String)>, Counter> {
        self.counter.clone()
    }

    /// Reports a `POST` to `path` with `body` when it is an unclaimed
    /// conversation; whether it was.
    pub fn check(&self, path: &str, body: &[u8]) -> bool {
        if NOT_CONVERSATIONS.iter().any(|end| path.ends_with(end)) || !is_conversation(body) {
            return false;
        }
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let label = match seen.contains_key(path) || seen.len() < MAX_PATHS {
            true => path,
            false => OTHER,
        };
        let count = seen.entry(label.to_string()).or_insert(0);
        if *count == 0 && label != OTHER {
            tracing::warn!(
                path,
                "a conversation was POSTed to a path no API claims, and was forwarded unfolded: \
                 foldgate folds paths ending in /chat/completions, /messages, /responses or \
                 /models/{{model}}:generateContent (any prefix and version); point the client's \
                 base URL so its SDK calls one of them"
            );
        }
        *count += 1;
        drop(seen);
        self.counter
            .get_or_create(&vec![("path", label.to_string())])
            .inc();
        true
    }

    /// Every path reported, with its count.
    pub fn list(&self) -> Vec<(String, u64)> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.iter().map(|(p, n)| (p.clone(), *n)).collect()
    }
}

/// Whether a JSON body carries a conversation (read without building it).
pub fn is_conversation(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Shape {
        messages: Option<Vec<IgnoredAny>>,
        contents: Option<Vec<IgnoredAny>>,
        input: Option<Input>,
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Input {
        Items(Vec<Item>),
        Other(IgnoredAny),
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Item {
        Turn {
            #[serde(rename = "role")]
            _role: IgnoredAny,
        },
        Other(IgnoredAny),
    }
    let Ok(shape) = serde_json::from_slice::<Shape>(body) else {
        return false;
    };
    let turns = |items: &[Item]| items.iter().any(|i| matches!(i, Item::Turn { .. }));
    shape.messages.is_some()
        || shape.contents.is_some()
        || matches!(shape.input, Some(Input::Items(items)) if turns(&items))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversations_by_shape() {
        for yes in [
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#,
            r#"{"model":"m","input":[{"role":"user","content":"hi"}]}"#,
        ] {
            assert!(is_conversation(yes.as_bytes()), "{yes}");
        }
        for no in [
            r#"{"model":"m","input":"embed me"}"#,
            r#"{"model":"m","input":["a","b"]}"#,
            r#"{"model":"m","input":[[1,2,3]]}"#,
            r#"{"input":[{"type":"text","text":"moderate me"}]}"#,
            r#"{"model":"m","prompt":"complete me"}"#,
            r#"{"messages":"not a list"}"#,
            "not json",
        ] {
            assert!(!is_conversation(no.as_bytes()), "{no}");
        }
    }

    #[test]
    fn paths_are_counted_bounded_and_known_endpoints_skipped() {
        let unclaimed = Unclaimed::default();
        let chat = br#"{"messages":[]}"#;
        assert!(unclaimed.check("/v2/chat", chat));
        assert!(unclaimed.check("/v2/chat", chat));
        assert!(!unclaimed.check("/v1/messages/count_tokens", chat));
        assert!(!unclaimed.check("/v2/embed", br#"{"input":"x"}"#));
        for i in 0..MAX_PATHS + 5 {
            unclaimed.check(&format!("/p/{i}"), chat);
        }
        let list = unclaimed.list();
        assert_eq!(list.len(), MAX_PATHS + 1);
        assert!(list.contains(&("/v2/chat".to_string(), 2)));
        assert!(list.contains(&(OTHER.to_string(), 6)));
    }
}
