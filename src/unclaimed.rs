//! Conversation-shaped `POST`s that no API claims: forwarded as they
//! came, but never silently. Each path is counted
//! (`foldgate_unrecognised_total{path}`), warned about once with what to
//! do, and listed for the dashboard (`GET /foldgate/unclaimed`).
//!
//! A body is conversation-shaped when it has a `messages` or `contents`
//! array, or an `input` array holding an item with a `role` (embeddings
//! and moderations take `input` too, as strings or typed parts). Known
//! non-conversation endpoints that carry one (token counting, batches,
//! embeddings, an agent's own compaction on `…/responses/compact`, which
//! the upstream summarizes) are not reported.

use memchr::memmem;
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
const NOT_CONVERSATIONS: [&str; 7] = [
    "/responses/compact",
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

    /// Reports a `POST` to `path` whose body is a `conversation` ([`peek`])
    /// that no API claimed; whether it was reported.
    pub fn check(&self, path: &str, conversation: bool) -> bool {
        if !conversation || NOT_CONVERSATIONS.iter().any(|end| path.ends_with(end)) {
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
                 foldgate folds paths ending in {} (any prefix and version); point the client's \
                 base URL so its SDK calls one of them",
                claimed_paths()
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

/// The endpoints the APIs claim, as their specs name them
/// ([`crate::api::ApiSpec::path`]).
fn claimed_paths() -> String {
    let paths: Vec<&str> = crate::api::all().iter().map(|api| api.path()).collect();
    paths.join(", ")
}

/// What a forwarded JSON body says of itself, read in one pass without
/// building it: its `model`, and whether it carries a conversation.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Peek {
    /// The `model` field.
    pub model: Option<String>,
    /// A `messages` or `contents` array, or `input` turns.
    pub conversation: bool,
}

/// Reads `body` once for its model (when `want_model`) and its shape; a
/// body that names none of the conversation fields is not parsed at all
/// unless its model is wanted.
pub fn peek(body: &[u8], want_model: bool) -> Peek {
    let named = |field: &[u8]| memmem::find(body, field).is_some();
    if !want_model
        && ![&b"\"messages\""[..], b"\"contents\"", b"\"input\""]
            .into_iter()
            .any(named)
    {
        return Peek::default();
    }
    read(body).unwrap_or_default()
}

/// The fields [`peek`] reads, in [`read`]'s order.
const FIELDS: [&str; 4] = ["model", "messages", "contents", "input"];

/// [`peek`]'s read: the body's top-level members delimited by the fast
/// path's reader ([`crate::shallow::members`]), only `model` parsed and
/// `input` looked into. A typed serde read that skipped the rest cost
/// 88,000 instructions on bench/instructions.sh's 32 KB forwarded body
/// (2.7 a byte), this 0.5 a byte (docs/benchmarks.md, "Instructions per
/// request"). `None`, as that
/// read refused them: not one object, one of [`FIELDS`] named twice, a
/// model neither a string nor null, `messages` or `contents` neither an
/// array nor null. What lies inside the other members is delimited, not
/// checked: a body broken deeper inside may be routed by its model (the
/// upstream judges it).
fn read(body: &[u8]) -> Option<Peek> {
    let mut peek = Peek::default();
    let mut seen = [false; FIELDS.len()];
    for (key, value) in crate::shallow::members(body)? {
        let Some(at) = FIELDS.iter().position(|name| *name == key) else {
            continue;
        };
        if std::mem::replace(&mut seen[at], true) {
            return None;
        }
        match at {
            0 => peek.model = serde_json::from_slice::<Option<String>>(value).ok()?,
            3 => peek.conversation |= has_turns(value),
            _ => match value {
                b"null" => {}
                [b'[', ..] => peek.conversation = true,
                _ => return None,
            },
        }
    }
    Some(peek)
}

/// Whether an `input` is a list holding an object with a `role` (a
/// Responses-style conversation; embeddings and moderations take strings,
/// tokens or typed parts), parsed only when it says `"role"` at all.
fn has_turns(input: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Turn {
        role: Option<IgnoredAny>,
    }
    if !input.starts_with(b"[") || memmem::find(input, b"\"role\"").is_none() {
        return false;
    }
    let items = crate::shallow::elements(input).unwrap_or_default();
    items.iter().any(|item| {
        item.starts_with(b"{")
            && serde_json::from_slice::<Turn>(item).is_ok_and(|t| t.role.is_some())
    })
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
            assert!(peek(yes.as_bytes(), false).conversation, "{yes}");
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
            assert!(!peek(no.as_bytes(), true).conversation, "{no}");
        }
    }

    /// The typed serde read [`read`] replaced, as the oracle of well-formed
    /// bodies.
    fn by_serde(body: &[u8]) -> Peek {
        #[derive(Deserialize)]
        struct Shape<'a> {
            #[serde(borrow)]
            model: Option<std::borrow::Cow<'a, str>>,
            messages: Option<Vec<IgnoredAny>>,
            contents: Option<Vec<IgnoredAny>>,
            #[serde(borrow)]
            input: Option<&'a serde_json::value::RawValue>,
        }
        let Ok(shape) = serde_json::from_slice::<Shape>(body) else {
            return Peek::default();
        };
        let turns = shape
            .input
            .is_some_and(|i| has_turns(i.get().trim_start().as_bytes()));
        Peek {
            model: shape.model.map(|m| m.into_owned()),
            conversation: shape.messages.is_some() || shape.contents.is_some() || turns,
        }
    }

    #[test]
    fn reads_what_a_typed_serde_read_reads() {
        for body in [
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
            r#" { "messages" : null , "model" : null } "#,
            r#"{"model":"m\u00e9","contents":[],"x":{"model":"n"}}"#,
            r#"{"m\u006fdel":"m","input":[ {"type":"x"}, {"role":"user"} ]}"#,
            r#"{"model":"m","input":[{"content":"role"}]}"#,
            r#"{"model":"m","model":"n"}"#,
            r#"{"model":1,"messages":[]}"#,
            r#"{"model":"m","messages":{}}"#,
            r#"{"model":"m","contents":"x"}"#,
            r#"{"model":"m","input":null,"prompt":"p"}"#,
            r#"["model","m"]"#,
            r#"{"model":"m"} x"#,
            "",
        ] {
            assert_eq!(
                read(body.as_bytes()).unwrap_or_default(),
                by_serde(body.as_bytes()),
                "{body}"
            );
        }
    }

    #[test]
    fn the_model_is_read_in_the_same_pass() {
        let body = br#"{"messages":[],"model":"a\"b"}"#;
        let read = peek(body, true);
        assert_eq!(read.model.as_deref(), Some("a\"b"));
        assert!(read.conversation);
        // Nothing a conversation names, and no model wanted: not parsed.
        let prompt = br#"{"model":"m","prompt":"x"}"#;
        assert_eq!(peek(prompt, false), Peek::default());
        assert!(!peek(br#"{"model":"m","input":"x"}"#, false).conversation);
        assert_eq!(peek(b"not json", true), Peek::default());
    }

    #[test]
    fn paths_are_counted_bounded_and_known_endpoints_skipped() {
        let unclaimed = Unclaimed::default();
        let chat = true;
        assert!(unclaimed.check("/v2/chat", chat));
        assert!(unclaimed.check("/v2/chat", chat));
        assert!(!unclaimed.check("/v1/messages/count_tokens", chat));
        assert!(!unclaimed.check("/v2/embed", false));
        for i in 0..MAX_PATHS + 5 {
            unclaimed.check(&format!("/p/{i}"), chat);
        }
        let list = unclaimed.list();
        assert_eq!(list.len(), MAX_PATHS + 1);
        assert!(list.contains(&("/v2/chat".to_string(), 2)));
        assert!(list.contains(&(OTHER.to_string(), 6)));
    }
}
