//! Reads the prompt tokens an upstream response reports (chat
//! completions, Responses and Anthropic Messages usage) as it streams by,
//! without holding the whole body, for calibration.

use serde::Deserialize;

/// Largest JSON body buffered; past it the scanner gives up (a chat
/// completion this large is rare and one missed observation costs nothing).
pub const MAX_JSON_BYTES: usize = 4 * 1024 * 1024;
/// Largest single SSE line kept; longer lines are skipped.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// Incremental scanner for the prompt-token count an upstream reports.
///
/// For a JSON body it buffers up to 4 MiB and parses once at
/// the end. For an SSE stream it splits `data:` lines across chunk
/// boundaries and parses only lines whose `"usage"` is an object, so the
/// `"usage":null` on every chunk of an `include_usage` stream costs a byte
/// scan, not a parse. Chat-completion `usage.prompt_tokens` and
/// Responses-API `usage.input_tokens` (also under `response`) are read.
#[derive(Debug)]
pub struct UsageScanner {
    sse: bool,
    reader: UsageReader,
    /// JSON: the body so far. SSE: the unfinished last line.
    buf: Vec<u8>,
    /// JSON: the body was too large. SSE: skipping to the next newline.
    overflow: bool,
    found: Option<u32>,
}

impl UsageScanner {
    /// A scanner for an SSE stream (`text/event-stream`) or a JSON body
    /// that reports usage as [`UsageReader::USAGE`] reads it.
    pub fn new(is_sse: bool) -> Self {
        Self::with(is_sse, UsageReader::USAGE)
    }

    /// A scanner for usage as `reader` reads it.
    pub fn with(is_sse: bool, reader: UsageReader) -> Self {
        Self {
            sse: is_sse,
            reader,
            buf: Vec::new(),
            overflow: false,
            found: None,
        }
    }

    /// Feeds the next body chunk.
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.sse {
            self.feed_sse(chunk);
        } else if !self.overflow {
            if self.buf.len() + chunk.len() > MAX_JSON_BYTES {
                self.overflow = true;
                self.buf = Vec::new();
            } else {
                self.buf.extend_from_slice(chunk);
            }
        }
    }

    /// The last prompt-token count seen, once the body has ended.
    pub fn finish(mut self) -> Option<u32> {
        if self.sse {
            if !self.overflow && !self.buf.is_empty() {
                let line = std::mem::take(&mut self.buf);
                self.line(&line);
            }
            self.found
        } else if self.overflow {
            None
        } else {
            (self.reader.prompt_tokens)(&self.buf)
        }
    }

    fn feed_sse(&mut self, chunk: &[u8]) {
        let mut rest = chunk;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = (&rest[..nl], &rest[nl + 1..]);
            if self.buf.is_empty() && !self.overflow {
                self.line(head);
            } else {
                if !self.overflow && self.buf.len() + head.len() <= MAX_LINE_BYTES {
                    self.buf.extend_from_slice(head);
                    let line = std::mem::take(&mut self.buf);
                    self.line(&line);
                }
                self.buf.clear();
                self.overflow = false;
            }
            rest = tail;
        }
        if self.overflow {
            return;
        }
        if self.buf.len() + rest.len() > MAX_LINE_BYTES {
            self.overflow = true;
            self.buf = Vec::new();
        } else {
            self.buf.extend_from_slice(rest);
        }
    }

    /// One complete SSE line, without its `\n`.
    fn line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        if !has_object(data, self.reader.key) {
            return;
        }
        if let Some(n) = (self.reader.prompt_tokens)(data) {
            self.found = Some(n);
        }
    }
}

/// How an API reports the prompt tokens of an answer: the key (quoted)
/// whose object holds them, so an event without one is not parsed, and the
/// reader of a JSON body or event that has one.
#[derive(Debug, Clone, Copy)]
pub struct UsageReader {
    /// The quoted key, e.g. `"usage"`.
    pub key: &'static [u8],
    /// The prompt tokens a body or event reports.
    pub prompt_tokens: fn(&[u8]) -> Option<u32>,
}

impl UsageReader {
    /// `usage` as chat completions, Responses (also under `response`) and
    /// Anthropic Messages (also under `message`, cached tokens added) write it.
    pub const USAGE: Self = Self {
        key: b"\"usage\"",
        prompt_tokens: usage_prompt_tokens,
    };
}

/// The prompt tokens of a body or event in [`UsageReader::USAGE`]'s shapes.
fn usage_prompt_tokens(data: &[u8]) -> Option<u32> {
    serde_json::from_slice::<Envelope>(data)
        .ok()
        .and_then(Envelope::prompt_tokens)
}

/// Whether `data` holds `key` followed by `:` and an object.
fn has_object(data: &[u8], key: &[u8]) -> bool {
    let mut from = 0;
    while let Some(at) = data[from..].windows(key.len()).position(|w| w == key) {
        let after = &data[from + at + key.len()..];
        let mut it = after.iter().copied().skip_while(u8::is_ascii_whitespace);
        if it.next() == Some(b':') && it.find(|b| !b.is_ascii_whitespace()) == Some(b'{') {
            return true;
        }
        from += at + key.len();
    }
    false
}

/// The parts of a response or chunk that can carry usage.
#[derive(Deserialize)]
struct Envelope {
    usage: Option<Usage>,
    /// Responses API events wrap the response object.
    response: Option<Box<Envelope>>,
    /// Anthropic's `message_start` event wraps the message.
    message: Option<Box<Envelope>>,
}

#[derive(Deserialize)]
struct Usage {
    prompt_tokens: Option<u32>,
    input_tokens: Option<u32>,
    /// Anthropic counts cached prompt tokens apart from `input_tokens`.
    cache_creation_input_tokens: Option<u32>,
    cache_read_input_tokens: Option<u32>,
}

impl Usage {
    fn prompt_tokens(&self) -> Option<u32> {
        let cached = [
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
        ];
        self.prompt_tokens.or_else(|| {
            let input = self.input_tokens?;
            Some(
                cached
                    .iter()
                    .flatten()
                    .fold(input, |a, b| a.saturating_add(*b)),
            )
        })
    }
}

impl Envelope {
    fn prompt_tokens(self) -> Option<u32> {
        let own = self.usage.and_then(|u| u.prompt_tokens());
        own.or_else(|| self.response.and_then(|r| r.prompt_tokens()))
            .or_else(|| self.message.and_then(|m| m.prompt_tokens()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(sse: bool, chunks: &[&[u8]]) -> Option<u32> {
        let mut s = UsageScanner::new(sse);
        for c in chunks {
            s.feed(c);
        }
        s.finish()
    }

    #[test]
    fn json_body() {
        let body = br#"{"id":"x","choices":[{"message":{"content":"hi \"usage\": {"}}],"usage":{"prompt_tokens":57,"completion_tokens":3}}"#;
        assert_eq!(scan(false, &[&body[..10], &body[10..]]), Some(57));
        assert_eq!(scan(false, &[br#"{"choices":[]}"#]), None);
        assert_eq!(scan(false, &[b"not json"]), None);
    }

    #[test]
    fn json_too_large_gives_up() {
        let mut s = UsageScanner::new(false);
        s.feed(&vec![b' '; MAX_JSON_BYTES]);
        s.feed(br#"{"usage":{"prompt_tokens":1}}"#);
        assert_eq!(s.finish(), None);
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
        assert_eq!(scan(true, &[ev]), Some(77));
    }

    #[test]
    fn anthropic_events_and_cache_counts() {
        let stream = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":90,\"output_tokens\":1}}}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n";
        assert_eq!(scan(true, &[stream]), Some(100));
        let body = br#"{"type":"message","usage":{"input_tokens":7,"cache_creation_input_tokens":3,"output_tokens":2}}"#;
        assert_eq!(scan(false, &[body]), Some(10));
    }

    #[test]
    fn overlong_line_skipped_then_recovers() {
        let mut s = UsageScanner::new(true);
        s.feed(b"data: ");
        s.feed(&vec![b'x'; MAX_LINE_BYTES + 1]);
        s.feed(b"\"usage\":{}\ndata: {\"usage\":{\"prompt_tokens\":5}}\n");
        assert_eq!(s.finish(), Some(5));
    }

    #[test]
    fn usage_detection() {
        let has_usage_object = |data: &[u8]| has_object(data, UsageReader::USAGE.key);
        assert!(has_usage_object(br#"{"usage" : {"a":1}}"#));
        assert!(!has_usage_object(br#"{"usage":null}"#));
        assert!(!has_usage_object(br#"{"usage_x":{}}"#));
        assert!(has_usage_object(br#"{"a":"usage","usage":{}}"#));
    }
}
