//! Reads the tokens an upstream response reports as it streams by (its
//! prompt's, for calibration; its output's, for traces), without holding
//! the whole body. Where an answer
//! reports them is its API's to say ([`UsageReader`], from
//! `crate::api::ApiSpec::usage`, most often reading a [`UsageShape`]);
//! this module knows no API's shape.

use crate::sse::{self, Events, Framing};
use bytes::Bytes;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt;

/// Largest JSON body buffered; past it the scanner gives up (a chat
/// completion this large is rare and one missed observation costs nothing).
pub const MAX_JSON_BYTES: usize = 4 * 1024 * 1024;

/// Incremental scanner for the token counts an upstream reports.
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
    found: Reported,
}

/// The tokens an answer reports: its prompt's and its output's, each
/// when it says (an Anthropic stream says the prompt's in its first event
/// and the output's in a later one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reported {
    /// Prompt tokens, cached ones included.
    pub prompt: Option<u32>,
    /// Output (completion) tokens.
    pub output: Option<u32>,
}

impl Reported {
    /// Each count of `self`, else `earlier`'s.
    #[must_use]
    pub fn or(self, earlier: Self) -> Self {
        Self {
            prompt: self.prompt.or(earlier.prompt),
            output: self.output.or(earlier.output),
        }
    }

    /// Whether it reports nothing.
    pub fn is_empty(self) -> bool {
        self == Self::default()
    }
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
            found: Reported::default(),
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

    /// The last counts seen, once the body has ended.
    pub fn finish(self) -> Reported {
        match self.body {
            Body::Sse(events) => read_event(self.reader, &events.rest()).or(self.found),
            Body::Json(buf) => buf.map(|b| self.reader.tokens(&b)).unwrap_or_default(),
        }
    }
}

/// The tokens one event (SSE, or a JSON line) reports, if it has
/// `reader`'s key.
fn read_event(reader: UsageReader, event: &[u8]) -> Reported {
    let data = sse::payload(event);
    if has_object(&data, reader.key) {
        reader.tokens(&data)
    } else {
        Reported::default()
    }
}

/// How an API reports the tokens of an answer: the key (quoted) whose
/// object holds them, so an event without one is not parsed, and the
/// reader of a JSON body or event that has one (most often a
/// [`UsageShape`]'s).
#[derive(Debug, Clone, Copy)]
pub struct UsageReader {
    /// The quoted key, e.g. `"usage"`.
    pub key: &'static [u8],
    /// What reads the tokens a body or event reports.
    pub read: ReadTokens,
}

/// What reads the tokens of a body or event.
#[derive(Debug, Clone, Copy)]
pub enum ReadTokens {
    /// A declared shape.
    Shape(&'static UsageShape),
    /// A reader of its own.
    With(fn(&[u8]) -> Reported),
}

impl UsageReader {
    /// The reader of `shape`, whose quoted field is `key`.
    pub const fn of(key: &'static [u8], shape: &'static UsageShape) -> Self {
        Self {
            key,
            read: ReadTokens::Shape(shape),
        }
    }

    /// The tokens a body or event reports.
    pub fn tokens(&self, data: &[u8]) -> Reported {
        match self.read {
            ReadTokens::Shape(shape) => shape.tokens(data),
            ReadTokens::With(read) => read(data),
        }
    }
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
    /// The usage object's member counting the output tokens
    /// (`completion_tokens`).
    pub output: &'static str,
    /// Members of the answer whose object may hold the usage instead
    /// (Responses' `response`, Anthropic's `message_start`'s `message`).
    pub within: &'static [&'static str],
    /// Whether a whole answer may be an array of answers (the last one
    /// reporting usage counts).
    pub array: bool,
}

impl UsageShape {
    /// The object under `field` counting `tokens` and `output`, nothing
    /// added, of the answer itself.
    pub const fn of(field: &'static str, tokens: &'static str, output: &'static str) -> Self {
        Self {
            field,
            tokens,
            added: &[],
            output,
            within: &[],
            array: false,
        }
    }

    /// The tokens a body or event reports.
    pub fn tokens(self, data: &[u8]) -> Reported {
        // One UTF-8 check of the whole answer, then the parser reads text:
        // reading the bytes checks each key again (640 instructions more on
        // the chat bench's answer, docs/benchmarks.md, "Instructions per
        // request").
        let Ok(text) = std::str::from_utf8(data) else {
            return Reported::default();
        };
        if self.array && text.trim_start().starts_with('[') {
            let answers = crate::shallow::elements(data).unwrap_or_default();
            return answers
                .into_iter()
                .rev()
                .filter_map(|answer| std::str::from_utf8(answer).ok())
                .map(|answer| self.object_tokens(answer))
                .find(|found| !found.is_empty())
                .unwrap_or_default();
        }
        self.object_tokens(text)
    }

    /// [`Self::tokens`] of one object's text, read in one pass by
    /// the JSON parser: the members the shape names are read, the others
    /// skipped, nothing is built: 5,350 instructions on the chat bench's
    /// answer, where a `Map` of the usage object after the answer's
    /// members were delimited cost 7,700 (callgrind on bench/instructions.sh; the
    /// delimiting reader with this typed count may cost less).
    fn object_tokens(self, text: &str) -> Reported {
        let mut de = serde_json::Deserializer::from_str(text);
        match de.deserialize_map(Answer(self)) {
            Ok(found) if de.end().is_ok() => found,
            _ => Reported::default(),
        }
    }
}

/// Most [`UsageShape::added`] and [`UsageShape::within`] names read.
const MAX_NAMES: usize = 4;

/// An answer object: each count of its first [`UsageShape::field`]
/// member when that is a usage object with the count, else of its first
/// [`UsageShape::within`] member that has one (in the shape's order).
struct Answer(UsageShape);

impl<'de> Visitor<'de> for Answer {
    type Value = Reported;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an answer object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Reported, A::Error> {
        let shape = self.0;
        let mut own: Option<Reported> = None;
        let mut inner: [Option<Reported>; MAX_NAMES] = [None; MAX_NAMES];
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
            .into_iter()
            .chain(inner.into_iter().flatten())
            .rev()
            .fold(Reported::default(), |later, found| found.or(later)))
    }
}

/// A usage object: its [`UsageShape::tokens`] member plus the
/// [`UsageShape::added`] ones, and its [`UsageShape::output`] member,
/// each read when it is an unsigned number (the last of a member named
/// twice, as a map keeps it).
struct Usage(UsageShape);

impl<'de> Visitor<'de> for Usage {
    type Value = Reported;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a usage object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Reported, A::Error> {
        let shape = self.0;
        let mut tokens = None;
        let mut output = None;
        let mut added: [Option<u64>; MAX_NAMES] = [None; MAX_NAMES];
        while let Some(key) = map.next_key_seed(UsageKey(shape))? {
            let slot = match key {
                Member::Prompt => &mut tokens,
                Member::Added(i) => &mut added[i],
                Member::Output => &mut output,
                Member::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = map.next_value::<Value>()?.as_u64();
        }
        let output = output.and_then(|n| u32::try_from(n).ok());
        let prompt = tokens.and_then(|n| u32::try_from(n).ok()).map(|tokens| {
            added.into_iter().flatten().fold(tokens, |sum, n| {
                sum.saturating_add(u32::try_from(n).unwrap_or(u32::MAX))
            })
        });
        Ok(Reported { prompt, output })
    }
}

/// What `V` reads of an object; nothing for any other value, read and
/// dropped.
struct IfObject<V>(V);

impl<'de, V: Visitor<'de, Value = Reported>> DeserializeSeed<'de> for IfObject<V> {
    type Value = Reported;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Reported, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de, V: Visitor<'de, Value = Reported>> Visitor<'de> for IfObject<V> {
    type Value = Reported;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Reported, A::Error> {
        self.0.visit_map(map)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Reported, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Reported::default())
    }

    fn visit_bool<E>(self, _: bool) -> Result<Reported, E> {
        Ok(Reported::default())
    }

    fn visit_i64<E>(self, _: i64) -> Result<Reported, E> {
        Ok(Reported::default())
    }

    fn visit_u64<E>(self, _: u64) -> Result<Reported, E> {
        Ok(Reported::default())
    }

    fn visit_f64<E>(self, _: f64) -> Result<Reported, E> {
        Ok(Reported::default())
    }

    fn visit_str<E>(self, _: &str) -> Result<Reported, E> {
        Ok(Reported::default())
    }

    fn visit_unit<E>(self) -> Result<Reported, E> {
        Ok(Reported::default())
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

/// A usage object's member, by its key.
enum Member {
    /// [`UsageShape::tokens`].
    Prompt,
    /// The `i`-th of [`UsageShape::added`] (from 0, at most [`MAX_NAMES`]).
    Added(usize),
    /// [`UsageShape::output`].
    Output,
    /// Another.
    Other,
}

/// A usage object's key, as a [`Member`].
struct UsageKey(UsageShape);

impl<'de> DeserializeSeed<'de> for UsageKey {
    type Value = Member;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Member, D::Error> {
        de.deserialize_str(self)
    }
}

impl Visitor<'_> for UsageKey {
    type Value = Member;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Member, E> {
        let shape = self.0;
        if key == shape.tokens {
            return Ok(Member::Prompt);
        }
        if key == shape.output {
            return Ok(Member::Output);
        }
        let mut added = shape.added.iter().take(MAX_NAMES);
        Ok(added
            .position(|name| *name == key)
            .map_or(Member::Other, Member::Added))
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

    /// Scans as the API named `api` reads usage: the prompt's tokens.
    fn scan_as(api: &str, sse: bool, chunks: &[&[u8]]) -> Option<u32> {
        scan_both(api, sse, chunks).prompt
    }

    /// Scans as the API named `api` reads usage: both counts.
    fn scan_both(api: &str, sse: bool, chunks: &[&[u8]]) -> Reported {
        let reader = crate::api::named(api).map(|api| api.usage());
        let mut s = UsageScanner::with(sse, reader.unwrap_or_else(|| unreachable!("{api}")));
        for c in chunks {
            s.feed(&Bytes::copy_from_slice(c));
        }
        s.finish()
    }

    /// Each API's output count is read beside its prompt's, from the same
    /// usage object or, in an Anthropic stream, from the later
    /// `message_delta`.
    #[test]
    fn output_tokens_are_read_beside_the_prompts() {
        let both = |prompt, output| Reported {
            prompt: Some(prompt),
            output: Some(output),
        };
        let chat = br#"{"choices":[],"usage":{"prompt_tokens":57,"completion_tokens":3}}"#;
        assert_eq!(scan_both("chat", false, &[chat]), both(57, 3));
        let anthropic = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":20,\"cache_read_input_tokens\":5,\"output_tokens\":1}}}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{},\"usage\":{\"output_tokens\":15}}\n\n",
        );
        assert_eq!(
            scan_both("anthropic", true, &[anthropic.as_bytes()]),
            both(25, 15)
        );
        let responses = br#"{"type":"response.completed","response":{"usage":{"input_tokens":8,"output_tokens":4}}}"#;
        assert_eq!(scan_both("responses", false, &[responses]), both(8, 4));
        let gemini = br#"[{"candidates":[]},{"usageMetadata":{"promptTokenCount":7,"candidatesTokenCount":2}}]"#;
        assert_eq!(scan_both("gemini", false, &[gemini]), both(7, 2));
        let only_output = br#"{"usage":{"completion_tokens":3}}"#;
        assert_eq!(
            scan_both("chat", false, &[only_output]),
            Reported {
                prompt: None,
                output: Some(3)
            }
        );
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
