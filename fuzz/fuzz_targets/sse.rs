//! The SSE event splitter on arbitrary streams cut into arbitrary chunks,
//! with an arbitrary bound on an event's length. Checked: the events do
//! not depend on where the stream was cut; the events and the rest are the
//! stream, byte for byte; no event is longer than the bound; and every
//! event but a piece of an overlong one ends with a blank line.

#![no_main]

use arbitrary::Arbitrary;
use bytes::Bytes;
use foldgate::sse::{self, Events};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    /// Chunk lengths; the rest of the stream is the last chunk.
    cuts: Vec<u8>,
    max: u8,
    stream: Vec<u8>,
}

fn split(max: usize, chunks: &[&[u8]]) -> (Vec<Bytes>, Bytes) {
    let mut events = Events::with_max(max);
    let mut out = Vec::new();
    for chunk in chunks {
        out.extend(events.push(Bytes::copy_from_slice(chunk)));
    }
    (out, events.rest())
}

fuzz_target!(|input: Input| {
    let max = usize::from(input.max).max(1);
    let (whole, rest) = split(max, &[&input.stream]);
    let mut chunks = Vec::new();
    let mut left = input.stream.as_slice();
    for &cut in &input.cuts {
        let (head, tail) = left.split_at(usize::from(cut).min(left.len()));
        chunks.push(head);
        left = tail;
    }
    chunks.push(left);
    assert_eq!(split(max, &chunks), (whole.clone(), rest.clone()), "events depend on the chunking");
    let joined: Vec<u8> = whole.iter().chain([&rest]).flat_map(|e| e.to_vec()).collect();
    assert_eq!(joined, input.stream, "the events are not the stream");
    for event in &whole {
        assert!(event.len() <= max, "an event longer than the bound");
        let blank = event.ends_with(b"\n\n") || event.ends_with(b"\n\r\n");
        assert!(blank || event.len() == max, "an event without its blank line");
        let _ = sse::data(event);
    }
});
