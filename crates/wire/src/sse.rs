//! Server-sent events: the one splitter every reader of an upstream stream
//! uses (the usage tap and the recall rounds), and the data of an event.
//! A stream of JSON lines (`application/x-ndjson`) is split by the same
//! splitter, one line an event ([`Framing::Lines`]), and an event's JSON
//! is its [`payload`] either way.
//!
//! An event ends with a blank line; lines end with `\n` or `\r\n` (a lone
//! `\r`, which the standard also allows, is not used by any LLM API and is
//! read as part of its line). Events that fall whole inside one chunk are
//! handed out as slices of it, not copies; only an event split across
//! chunks is gathered in a buffer.

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, header};
use std::borrow::Cow;

/// How a streamed answer's events are delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events (`text/event-stream`): an event ends with a
    /// blank line.
    Sse,
    /// JSON lines (`application/x-ndjson`): each line is one event.
    Lines,
}

impl Framing {
    /// The framing of a response by its `Content-Type`; `None`: not a
    /// stream.
    pub fn of(headers: &HeaderMap) -> Option<Self> {
        let kind = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
        if kind.starts_with("text/event-stream") {
            Some(Self::Sse)
        } else if kind.starts_with("application/x-ndjson") {
            Some(Self::Lines)
        } else {
            None
        }
    }
}

/// Longest event handed out whole: a longer one is handed out in pieces of
/// this size, so neither a broken upstream nor a huge event can make the
/// buffer grow without end.
pub const MAX_EVENT: usize = 4 << 20;

/// Splits a byte stream into events, each with its blank line.
#[derive(Debug)]
pub struct Events {
    buf: BytesMut,
    /// How far `buf` has been searched for the end of its event.
    searched: usize,
    max: usize,
    /// Each line is an event ([`Framing::Lines`]).
    lines: bool,
}

impl Default for Events {
    fn default() -> Self {
        Self::with_max(MAX_EVENT)
    }
}

impl Events {
    /// A splitter handing out pieces of at most `max` bytes (at least 1).
    pub fn with_max(max: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            searched: 0,
            max: max.max(1),
            lines: false,
        }
    }

    /// A splitter for a stream of `framing`.
    pub fn framed(framing: Framing) -> Self {
        Self {
            lines: framing == Framing::Lines,
            ..Self::default()
        }
    }

    /// Adds `chunk`; the iterator hands out the events it completes. What
    /// the iterator has not handed out when dropped stays for the next call.
    pub fn push(&mut self, chunk: Bytes) -> Completed<'_> {
        Completed {
            events: self,
            chunk,
        }
    }

    /// What is left after the last complete event (an event the stream
    /// did not end with a blank line).
    pub fn rest(self) -> Bytes {
        self.buf.freeze()
    }

    /// The next event of the buffer, once `chunk` has joined it.
    fn next_buffered(&mut self, chunk: &mut Bytes) -> Option<Bytes> {
        if !chunk.is_empty() {
            self.buf.extend_from_slice(&std::mem::take(chunk));
        }
        let end = end_of_event(&self.buf, self.searched, self.max, self.lines);
        match end {
            Some(end) => {
                self.searched = 0;
                Some(self.buf.split_to(end).freeze())
            }
            None => {
                self.searched = searched_to(&self.buf);
                None
            }
        }
    }

    /// Buffers the start of an event the next chunks finish.
    fn keep(&mut self, start: Bytes) {
        self.buf.extend_from_slice(&start);
        self.searched = searched_to(&self.buf);
    }
}

/// The events one [`Events::push`] completes.
#[derive(Debug)]
pub struct Completed<'a> {
    events: &'a mut Events,
    /// The part of the chunk not handed out or buffered yet.
    chunk: Bytes,
}

impl Iterator for Completed<'_> {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        let events = &mut *self.events;
        if !events.buf.is_empty() {
            return events.next_buffered(&mut self.chunk);
        }
        if let Some(end) = end_of_event(&self.chunk, 0, events.max, events.lines) {
            return Some(self.chunk.split_to(end));
        }
        events.keep(std::mem::take(&mut self.chunk));
        None
    }
}

impl Drop for Completed<'_> {
    fn drop(&mut self) {
        if !self.chunk.is_empty() {
            self.events.buf.extend_from_slice(&self.chunk);
        }
    }
}

/// How far a buffer without a complete event is known not to end: its
/// last bytes may begin a blank line the next chunk ends.
fn searched_to(buf: &[u8]) -> usize {
    buf.len().saturating_sub(2)
}

/// Where the first event of `buf` ends (after its blank line, or its
/// line when `lines`), or `max` when it is longer; `from` is how far it
/// is known not to end.
fn end_of_event(buf: &[u8], from: usize, max: usize, lines: bool) -> Option<usize> {
    let mut ends = memchr::memchr_iter(b'\n', &buf[from..]).map(|at| from + at + 1);
    let blank = match lines {
        true => ends.next(),
        false => ends.find_map(|line| match &buf[line..] {
            [b'\n', ..] => Some(line + 1),
            [b'\r', b'\n', ..] => Some(line + 2),
            _ => None,
        }),
    };
    match blank {
        Some(end) if end <= max => Some(end),
        _ => (buf.len() >= max).then_some(max),
    }
}

/// The JSON an event carries: a JSON line as it is (it starts with `{`),
/// else the event's [`data`]. An SSE event whose first line starts with
/// `{` is a field SSE ignores, so an event of several lines that has
/// `data` lines is read by them (a JSON line is one line; a JSON text of
/// several lines has no line starting with `data`).
pub fn payload(event: &[u8]) -> Cow<'_, [u8]> {
    let text = event.trim_ascii();
    if text.first() != Some(&b'{') {
        return data(event);
    }
    match memchr::memchr(b'\n', text).map(|_| data(event)) {
        Some(data) if !data.is_empty() => data,
        _ => Cow::Borrowed(text),
    }
}

/// The data of an event: the values of its `data` lines (one space after
/// the colon dropped), joined by `\n`; empty when it has none.
pub fn data(event: &[u8]) -> Cow<'_, [u8]> {
    let mut values = event
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .filter_map(|line| match line.strip_prefix(b"data") {
            Some([]) => Some(&[][..]),
            Some([b':', b' ', value @ ..] | [b':', value @ ..]) => Some(value),
            _ => None,
        });
    let Some(first) = values.next() else {
        return Cow::Borrowed(&[]);
    };
    let Some(second) = values.next() else {
        return Cow::Borrowed(first);
    };
    let mut joined = [first, b"\n", second].concat();
    for value in values {
        joined.push(b'\n');
        joined.extend_from_slice(value);
    }
    Cow::Owned(joined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn split(events: &mut Events, chunks: &[&[u8]]) -> Vec<Bytes> {
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend(events.push(Bytes::copy_from_slice(chunk)));
        }
        out
    }

    #[test]
    fn events_split_across_chunks_and_line_endings() {
        let mut e = Events::default();
        assert!(split(&mut e, &[b"data: 1\n"]).is_empty());
        assert_eq!(
            split(&mut e, &[b"\ndata: 2\r\n\r\ndata: 3\n\r\nda", b"ta: 4"]),
            ["data: 1\n\n", "data: 2\r\n\r\n", "data: 3\n\r\n"]
        );
        assert_eq!(e.rest(), "data: 4");
    }

    #[test]
    fn an_event_whole_in_its_chunk_is_a_slice_of_it() {
        let chunk = Bytes::from_static(b"data: 1\n\ndata: 2\n\n");
        let mut e = Events::default();
        let out: Vec<Bytes> = e.push(chunk.clone()).collect();
        assert_eq!(out[1].as_ptr(), chunk[9..].as_ptr());
    }

    #[test]
    fn an_event_longer_than_the_bound_comes_in_pieces() {
        let mut e = Events::with_max(4);
        assert_eq!(
            split(&mut e, &[b"abcdefghij\n\nxy"]),
            ["abcd", "efgh", "ij\n\n"]
        );
        assert_eq!(e.rest(), "xy");
    }

    // Found by the `sse_usage` fuzz target: a usage event after such a
    // line was read as one broken JSON text, and its usage was lost.
    #[test]
    fn an_event_whose_first_line_starts_with_a_brace_is_read_by_its_data() {
        // A first line SSE ignores (a field named `{x`) before the data.
        assert_eq!(&*payload(b"{x\ndata: {\"y\":2}\n"), b"{\"y\":2}");
        // A JSON text of several lines is still read whole.
        assert_eq!(&*payload(b"{\n  \"z\": 3\n}\n"), b"{\n  \"z\": 3\n}");
    }

    #[test]
    fn json_lines_are_events_of_their_own() {
        let mut e = Events::framed(Framing::Lines);
        assert_eq!(
            split(&mut e, &[b"{\"a\":1}\n{\"b\"", b":2}\r\n{\"c\":3}"]),
            ["{\"a\":1}\n", "{\"b\":2}\r\n"]
        );
        assert_eq!(&*payload(&e.rest()), b"{\"c\":3}");
        assert_eq!(&*payload(b"{\"b\":2}\r\n"), b"{\"b\":2}");
        assert_eq!(&*payload(b"data: {\"x\":1}\n\n"), b"{\"x\":1}");
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            "application/x-ndjson".parse().unwrap(),
        );
        assert_eq!(Framing::of(&headers), Some(Framing::Lines));
        headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        assert_eq!(Framing::of(&headers), None);
    }

    #[test]
    fn data_joins_its_lines_and_drops_one_space() {
        assert_eq!(
            &*data(b"event: x\ndata: {\"a\":\r\ndata:  1}\n\n"),
            b"{\"a\":\n 1}"
        );
        assert_eq!(&*data(b"data\n\n"), b"");
        assert_eq!(&*data(b": keep-alive\n\n"), b"");
        assert_eq!(&*data(b"data: [DONE]"), b"[DONE]");
        assert!(matches!(data(b"data: x\n\n"), Cow::Borrowed(_)));
    }

    proptest! {
        /// However a stream is cut, it splits into the same events, and
        /// the events and the rest are the stream, byte for byte.
        #[test]
        fn splitting_does_not_depend_on_the_chunks(
            stream in proptest::collection::vec(
                prop_oneof![Just(b'\n'), Just(b'\r'), Just(b'd'), any::<u8>()], 0..200),
            cuts in proptest::collection::vec(0..40usize, 0..12),
            max in 1..64usize,
        ) {
            let mut whole = Events::with_max(max);
            let expected = split(&mut whole, &[&stream]);
            let mut chunks = Vec::new();
            let mut rest = stream.as_slice();
            for cut in cuts {
                let (head, tail) = rest.split_at(cut.min(rest.len()));
                chunks.push(head);
                rest = tail;
            }
            chunks.push(rest);
            let mut cut = Events::with_max(max);
            prop_assert_eq!(&split(&mut cut, &chunks), &expected);
            let (whole_rest, cut_rest) = (whole.rest(), cut.rest());
            prop_assert_eq!(&cut_rest, &whole_rest);
            let joined: Vec<u8> = expected.iter().flat_map(|e| e.to_vec()).chain(whole_rest.to_vec()).collect();
            prop_assert_eq!(joined, stream);
        }
    }
}
