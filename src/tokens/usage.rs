//! Reads the prompt tokens an upstream response reports as it streams by,
//! without holding the whole body, for calibration. Where an answer
//! reports them is its API's to say ([`UsageReader`], from
//! `crate::api::Provider::usage`, most often reading a [`UsageShape`]);
//! this module knows no API's shape.

use crate::sse::{self, Events, Framing};
use bytes::Bytes;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
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
/// [`Self::tokens`] member plus the [`Self::added`] ones. The answer is
/// read in one pass that builds nothing: the rest of it (its choices, its
/// text) is only checked and skipped.
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
        // One UTF-8 check of the whole answer, then the parser reads text:
        // reading the bytes checks each key again (640 instructions more on
        // the chat bench's answer, docs/benchmarks.md).
        let text = std::str::from_utf8(data).ok()?;
        if self.array && text.trim_start().starts_with('[') {
            let answers = crate::shallow::elements(data)?;
            return answers
                .into_iter()
                .rev()
                .find_map(|answer| self.object_prompt_tokens(std::str::from_utf8(answer).ok()?));
        }
        self.object_prompt_tokens(text)
    }

    /// [`Self::prompt_tokens`] of one object's text, read in one pass by
    /// the JSON parser: the members the shape names are read, the others
    /// skipped, nothing is built: 5,350 instructions on the chat bench's
    /// answer, where a `Map` of the usage object after the answer's
    /// members were delimited cost 7,700 (docs/benchmarks.md; the
    /// delimiting reader with this typed count may cost less).
    fn object_prompt_tokens(self, text: &str) -> Option<u32> {
        let mut de = serde_json::Deserializer::from_str(text);
        let found = de.deserialize_map(Answer(self)).ok()?;
        de.end().ok()?;
        found
    }
}

/// Most [`UsageShape::added`] and [`UsageShape::within`] names read.
const MAX_NAMES: usize = 4;

/// An answer object: the count of its first [`UsageShape::field`]
/// member when that is a usage object with the count, else of its first
/// [`UsageShape::within`] member that has one (in the shape's order).
struct Answer(UsageShape);

impl<'de> Visitor<'de> for Answer {
    type Value = Option<u32>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an answer object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<u32>, A::Error> {
        let shape = self.0;
        let mut own: Option<Option<u32>> = None;
        let mut inner: [Option<Option<u32>>; MAX_NAMES] = [None; MAX_NAMES];
        while let Some(key) = map.next_key_seed(Named(shape.field, shape.within))? {
            match key {
                Some(0) if own.is_none() => {
                    own = Some(map.next_value_seed(IfObject(Usage(shape)))?)
                }
                Some(i) if i > 0 && inner[i - 1].is_none() => {
                    inner[i - 1] = Some(map.next_value_seed(IfObject(Answer(shape)))?);
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(own
            .flatten()
            .or_else(|| inner.into_iter().flatten().flatten().next()))
    }
}

/// A usage object: its [`UsageShape::tokens`] member plus the
/// [`UsageShape::added`] ones, each read when it is an unsigned number
/// (the last of a member named twice, as a map keeps it).
struct Usage(UsageShape);

impl<'de> Visitor<'de> for Usage {
    type Value = Option<u32>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a usage object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<u32>, A::Error> {
        let shape = self.0;
        let mut tokens = None;
        let mut added: [Option<u64>; MAX_NAMES] = [None; MAX_NAMES];
        while let Some(key) = map.next_key_seed(Named(shape.tokens, shape.added))? {
            let slot = match key {
                Some(0) => &mut tokens,
                Some(i) => &mut added[i - 1],
                None => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = map.next_value::<Value>()?.as_u64();
        }
        let Some(tokens) = tokens.and_then(|n| u32::try_from(n).ok()) else {
            return Ok(None);
        };
        Ok(Some(added.into_iter().flatten().fold(tokens, |sum, n| {
            sum.saturating_add(u32::try_from(n).unwrap_or(u32::MAX))
        })))
    }
}

/// What `V` reads of an object; `None` for any other value, read and
/// dropped.
struct IfObject<V>(V);

impl<'de, V: Visitor<'de, Value = Option<u32>>> DeserializeSeed<'de> for IfObject<V> {
    type Value = Option<u32>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Option<u32>, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de, V: Visitor<'de, Value = Option<u32>>> Visitor<'de> for IfObject<V> {
    type Value = Option<u32>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Option<u32>, A::Error> {
        self.0.visit_map(map)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<u32>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Option<u32>, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Option<u32>, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Option<u32>, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Option<u32>, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Option<u32>, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Option<u32>, E> {
        Ok(None)
    }
}

/// An object's key: `Some(0)` for the first name, `Some(i)` for the
/// `i`-th of the others (from 1, at most [`MAX_NAMES`]), `None` for
/// another key.
struct Named(&'static str, &'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Named {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Option<usize>, D::Error> {
        de.deserialize_str(self)
    }
}

impl Visitor<'_> for Named {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Option<usize>, E> {
        if key == self.0 {
            return Ok(Some(0));
        }
        let mut others = self.1.iter().take(MAX_NAMES);
        Ok(others.position(|name| *name == key).map(|i| i + 1))
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

    /// The answer's first usage member counts, however its key is
    /// escaped; one that is not an object leaves the count to the shape's
    /// inner answers; a count named twice in the usage object counts its
    /// last value, as a map of it would.
    #[test]
    fn members_read_as_a_map_of_them_would() {
        let twice = br#"{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":2}}"#;
        assert_eq!(scan(false, &[twice]), Some(1));
        let escaped = br#"{"us\u0061ge":{"prompt\u005ftokens":4}}"#;
        assert_eq!(scan(false, &[escaped]), Some(4));
        let null_then_inner = br#"{"usage":null,"response":{"usage":{"input_tokens":3}}}"#;
        assert_eq!(scan_as("responses", false, &[null_then_inner]), Some(3));
        let last = br#"{"usage":{"prompt_tokens":5,"prompt_tokens":6,"x":[{"y":"}"}]}}"#;
        assert_eq!(scan(false, &[last]), Some(6));
        let broken_after = br#"{"usage":{"prompt_tokens":5},"choices":[tru]}"#;
        assert_eq!(scan(false, &[broken_after]), None);
        let big = br#"{"usage":{"prompt_tokens":4294967296}}"#;
        assert_eq!(scan(false, &[big]), None);
        let cached = br#"{"usage":{"input_tokens":4294967295,"cache_read_input_tokens":9}}"#;
        assert_eq!(scan_as("anthropic", false, &[cached]), Some(u32::MAX));
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
