//! Reads the prompt tokens an upstream response reports as it streams by,
//! without holding the whole body, for calibration. Where an answer
//! reports them is its API's to say ([`UsageReader`], from
//! `crate::api::Provider::usage`, most often reading a [`UsageShape`]);
//! this module knows no API's shape.

use crate::sse::{self, Events, Framing};
use bytes::Bytes;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use std::fmt;

/// Largest JSON body buffered; past it the scanner gives up (a chat
/// completion this large is rare and one missed observation costs nothing).
pub const MAX_JSON_BYTES: usize = 4 * 1024 * 1024;

/// Incremental scanner for the prompt-token count an upstream reports.
///
/// For a JSON body it buffers up to 4 MiB and parses once at
/// the end. For an SSE stream it splits events with [`sse::Events`] and
/// parses only events whose usage field (`"usage"`) is an object, so the
/// `"usage":null` on every chunk of an `include_usage` stream costs a byte
/// scan, not a parse.
#[derive(Debug)]
pub struct UsageScanner {
    reader: UsageReader,
    body: Body,
    found: Option<u32>,
}

/// What the scanner keeps of the body.
#[derive(Debug)]
enum Body {
    /// An event stream, split into events.
    Sse(Events),
    /// A JSON body so far; `None` once it grew past [`MAX_JSON_BYTES`].
    Json(Option<Vec<u8>>),
}

impl UsageScanner {
    /// A scanner for usage as `reader` reads it.
    pub fn with(is_sse: bool, reader: UsageReader) -> Self {
        Self::framed(is_sse.then_some(Framing::Sse), reader)
    }

    /// A scanner for a stream of `framing` (`None`: a JSON body), usage
    /// as `reader` reads it.
    pub fn framed(framing: Option<Framing>, reader: UsageReader) -> Self {
        let body = match framing {
            Some(framing) => Body::Sse(Events::framed(framing)),
            None => Body::Json(Some(Vec::new())),
        };
        Self {
            reader,
            body,
            found: None,
        }
    }

    /// Feeds the next body chunk.
    pub fn feed(&mut self, chunk: &Bytes) {
        match &mut self.body {
            Body::Sse(events) => {
                for event in events.push(chunk.clone()) {
                    self.found = read_event(self.reader, &event).or(self.found);
                }
            }
            Body::Json(buf) => {
                if buf
                    .as_ref()
                    .is_some_and(|b| b.len() + chunk.len() > MAX_JSON_BYTES)
                {
                    *buf = None;
                }
                if let Some(buf) = buf {
                    buf.extend_from_slice(chunk);
                }
            }
        }
    }

    /// Reads one whole SSE event, for a caller that splits the stream
    /// itself.
    pub fn event(&mut self, event: &[u8]) {
        self.found = read_event(self.reader, event).or(self.found);
    }

    /// The last prompt-token count seen, once the body has ended.
    pub fn finish(self) -> Option<u32> {
        match self.body {
            Body::Sse(events) => read_event(self.reader, &events.rest()).or(self.found),
            Body::Json(buf) => buf.and_then(|b| (self.reader.prompt_tokens)(&b)),
        }
    }
}

/// The prompt tokens one event (SSE, or a JSON line) reports, if it has
/// `reader`'s key.
fn read_event(reader: UsageReader, event: &[u8]) -> Option<u32> {
    let data = sse::payload(event);
    has_object(&data, reader.key)
        .then(|| (reader.prompt_tokens)(&data))
        .flatten()
}

/// How an API reports the prompt tokens of an answer: the key (quoted)
/// whose object holds them, so an event without one is not parsed, and the
/// reader of a JSON body or event that has one (most often a
/// [`UsageShape`]'s).
#[derive(Debug, Clone, Copy)]
pub struct UsageReader {
    /// The quoted key, e.g. `"usage"`.
    pub key: &'static [u8],
    /// The prompt tokens a body or event reports.
    pub prompt_tokens: fn(&[u8]) -> Option<u32>,
}

/// Where an API's answers report their prompt tokens, for the common
/// case: the object under [`Self::field`] of the answer (or of an object
/// one level down, or of the last element of an array of answers), its
/// [`Self::tokens`] member plus the [`Self::added`] ones. Only that object
/// is parsed; the rest of the answer (its choices, its text) is only
/// delimited ([`crate::shallow`]).
#[derive(Debug, Clone, Copy)]
pub struct UsageShape {
    /// The member holding the usage object (`usage`); an event without it
    /// as an object is not parsed.
    pub field: &'static str,
    /// The usage object's member counting the prompt tokens
    /// (`prompt_tokens`).
    pub tokens: &'static str,
    /// Members counted on top of it (Anthropic's cached prompt tokens).
    pub added: &'static [&'static str],
    /// Members of the answer whose object may hold the usage instead
    /// (Responses' `response`, Anthropic's `message_start`'s `message`).
    pub within: &'static [&'static str],
    /// Whether a whole answer may be an array of answers (the last one
    /// reporting usage counts).
    pub array: bool,
}

impl UsageShape {
    /// The prompt tokens a body or event reports.
    pub fn prompt_tokens(self, data: &[u8]) -> Option<u32> {
        let text = std::str::from_utf8(data).ok()?;
        if self.array && text.trim_start().starts_with('[') {
            let answers = crate::shallow::elements(text)?;
            return answers
                .into_iter()
                .rev()
                .find_map(|answer| self.object_prompt_tokens(answer));
        }
        self.object_prompt_tokens(text)
    }

    /// [`Self::prompt_tokens`] of one object's text.
    fn object_prompt_tokens(self, text: &str) -> Option<u32> {
        let members = crate::shallow::members(text)?;
        let value = |name: &str| {
            members
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| *value)
        };
        let own = value(self.field).and_then(|usage| self.count(usage));
        own.or_else(|| {
            self.within
                .iter()
                .find_map(|name| value(name).and_then(|inner| self.object_prompt_tokens(inner)))
        })
    }

    /// The prompt tokens of a usage object's text: read as a typed
    /// record of the members the shape names, the others skipped, not
    /// built into a map (2,950 instructions an answer as a `Map`, ~600
    /// this way, on chat completions' usage; docs/benchmarks.md).
    fn count(self, usage: &str) -> Option<u32> {
        let mut de = serde_json::Deserializer::from_str(usage);
        let counts = de.deserialize_map(Counts(self)).ok()?;
        de.end().ok()?;
        let tokens = u32::try_from(counts.tokens?).ok()?;
        let added = counts.added.into_iter().flatten();
        Some(added.fold(tokens, |sum, n| {
            sum.saturating_add(u32::try_from(n).unwrap_or(u32::MAX))
        }))
    }
}

/// Most [`UsageShape::added`] members read.
const MAX_ADDED: usize = 4;

/// A usage object's members a [`UsageShape`] names, each as an unsigned
/// number when it is one (the last of a member named twice, as a map
/// would keep it).
#[derive(Default)]
struct Read {
    tokens: Option<u64>,
    added: [Option<u64>; MAX_ADDED],
}

/// Reads a usage object into [`Read`].
struct Counts(UsageShape);

impl<'de> Visitor<'de> for Counts {
    type Value = Read;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a usage object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Read, A::Error> {
        let mut read = Read::default();
        while let Some(key) = map.next_key_seed(Member(self.0))? {
            let slot = match key {
                Some(0) => &mut read.tokens,
                Some(i) => &mut read.added[i - 1],
                None => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = map.next_value::<Value>()?.as_u64();
        }
        Ok(read)
    }
}

/// A usage object's key: `Some(0)` for [`UsageShape::tokens`], `Some(i)`
/// for the `i`-th of [`UsageShape::added`] (from 1), `None` for another.
struct Member(UsageShape);

impl<'de> DeserializeSeed<'de> for Member {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Option<usize>, D::Error> {
        de.deserialize_str(self)
    }
}

impl Visitor<'_> for Member {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Option<usize>, E> {
        if key == self.0.tokens {
            return Ok(Some(0));
        }
        let mut added = self.0.added.iter().take(MAX_ADDED);
        Ok(added.position(|name| *name == key).map(|i| i + 1))
    }
}

/// Whether `data` holds `key` followed by `:` and an object (or a
/// number: a count reported at the top level).
fn has_object(data: &[u8], key: &[u8]) -> bool {
    let mut from = 0;
    while let Some(at) = data[from..].windows(key.len()).position(|w| w == key) {
        let end = from + at + key.len();
        let after = &data[end..];
        let mut it = after.iter().copied().skip_while(u8::is_ascii_whitespace);
        let value = (it.next() == Some(b':'))
            .then(|| it.find(|b| !b.is_ascii_whitespace()))
            .flatten();
        if value.is_some_and(|b| b == b'{' || b.is_ascii_digit()) {
            return true;
        }
        from = end;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scans as the API named `api` reads usage.
    fn scan_as(api: &str, sse: bool, chunks: &[&[u8]]) -> Option<u32> {
        let reader = crate::api::named(api).map(|api| api.usage());
        let mut s = UsageScanner::with(sse, reader.unwrap_or_else(|| unreachable!("{api}")));
        for c in chunks {
            s.feed(&Bytes::copy_from_slice(c));
        }
        s.finish()
    }

    /// Scans as chat completions read usage.
    fn scan(sse: bool, chunks: &[&[u8]]) -> Option<u32> {
        scan_as("chat", sse, chunks)
    }

    #[test]
    fn json_body() {
        let body = br#"{"id":"x","choices":[{"message":{"content":"hi \"usage\": {"}}],"usage":{"prompt_tokens":57,"completion_tokens":3}}"#;
        assert_eq!(scan(false, &[&body[..10], &body[10..]]), Some(57));
        assert_eq!(scan(false, &[br#"{"choices":[]}"#]), None);
        assert_eq!(scan(false, &[b"not json"]), None);
    }

    /// Only the answer's own `usage` (or its `response`'s or `message`'s)
    /// counts: not one nested deeper, not one in a string, not a cut body.
    #[test]
    fn only_the_top_level_usage_counts() {
        let nested = br#"{"choices":[{"message":{"usage":{"prompt_tokens":1}}}],"model":"m"}"#;
        assert_eq!(scan(false, &[nested]), None);
        let both = br#"{"choices":[{"usage":{"prompt_tokens":1}}],"usage":{"prompt_tokens":9}}"#;
        assert_eq!(scan(false, &[both]), Some(9));
        let wrapped = br#"{"type":"x","response":{"output":[{"usage":{"input_tokens":1}}],"usage":{"input_tokens":8}}}"#;
        assert_eq!(scan_as("responses", false, &[wrapped]), Some(8));
        assert_eq!(scan(false, &[wrapped]), None, "not chat completions' shape");
        assert_eq!(scan(false, &[br#"{"usage":null}"#]), None);
        assert_eq!(
            scan(false, &[br#"{"usage":{"prompt_tokens":"many"}}"#]),
            None
        );
        let cut = br#"{"usage":{"prompt_tokens":5},"choices":["#;
        assert_eq!(scan(false, &[cut]), None);
    }

    #[test]
    fn json_too_large_gives_up() {
        let body = vec![b' '; MAX_JSON_BYTES];
        assert_eq!(
            scan(false, &[&body, br#"{"usage":{"prompt_tokens":1}}"#]),
            None
        );
    }

    #[test]
    fn sse_usage_chunk() {
        let stream = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":42,\"completion_tokens\":1}}\r\n\r\n\
data: [DONE]\n\n";
        assert_eq!(scan(true, &[stream]), Some(42));
        assert_eq!(
            scan(true, &[b"data: {\"usage\":null}\n\ndata: [DONE]\n\n"]),
            None
        );
    }

    #[test]
    fn sse_without_trailing_newline() {
        assert_eq!(
            scan(true, &[b"data: {\"usage\": {\"prompt_tokens\": 9}}"]),
            Some(9)
        );
    }

    #[test]
    fn responses_api_event() {
        let ev = b"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":77}}}\n\n";
        assert_eq!(scan_as("responses", true, &[ev]), Some(77));
    }

    #[test]
    fn anthropic_events_and_cache_counts() {
        let stream = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":90,\"output_tokens\":1}}}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n";
        assert_eq!(scan_as("anthropic", true, &[stream]), Some(100));
        let body = br#"{"type":"message","usage":{"input_tokens":7,"cache_creation_input_tokens":3,"output_tokens":2}}"#;
        assert_eq!(scan_as("anthropic", false, &[body]), Some(10));
    }

    #[test]
    fn overlong_event_skipped_then_recovers() {
        let long = vec![b'x'; sse::MAX_EVENT + 1];
        let next = b"\"usage\":{}\n\ndata: {\"usage\":{\"prompt_tokens\":5}}\n\n";
        assert_eq!(scan(true, &[b"data: ", &long, next]), Some(5));
    }

    #[test]
    fn usage_detection() {
        let has_usage_object = |data: &[u8]| has_object(data, b"\"usage\"");
        assert!(has_usage_object(br#"{"usage" : {"a":1}}"#));
        assert!(!has_usage_object(br#"{"usage":null}"#));
        assert!(!has_usage_object(br#"{"usage_x":{}}"#));
        assert!(has_usage_object(br#"{"a":"usage","usage":{}}"#));
        assert!(!has_usage_object(br#"{"x_usage":{}}"#));
        assert!(!has_usage_object(br#"{"usage_x":"usage","b":{}}"#));
    }
}
