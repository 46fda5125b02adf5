//! The usage scanner on arbitrary response bodies, SSE or JSON, cut into
//! arbitrary chunks. Checked: the result does not depend on where the body
//! was cut; and an SSE stream that ends with a usage event reports it.

#![no_main]

use arbitrary::Arbitrary;
use foldgate::tokens::UsageScanner;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    sse: bool,
    /// Chunk lengths; the rest of the body is the last chunk.
    cuts: Vec<u8>,
    body: Vec<u8>,
    /// A usage event appended to SSE bodies.
    prompt_tokens: Option<u32>,
}

fn scan(sse: bool, chunks: &[&[u8]]) -> Option<u32> {
    let mut scanner = UsageScanner::with(sse, foldgate::api::chat::USAGE);
    for chunk in chunks {
        scanner.feed(&bytes::Bytes::copy_from_slice(chunk));
    }
    scanner.finish().prompt
}

fuzz_target!(|input: Input| {
    let mut body = input.body;
    if let (true, Some(n)) = (input.sse, input.prompt_tokens) {
        body.extend_from_slice(
            format!("\ndata: {{\"usage\":{{\"prompt_tokens\":{n}}}}}\n").as_bytes(),
        );
    }
    let whole = scan(input.sse, &[&body]);
    let mut chunks = Vec::new();
    let mut rest = body.as_slice();
    for &cut in &input.cuts {
        let (head, tail) = rest.split_at(usize::from(cut).min(rest.len()));
        chunks.push(head);
        rest = tail;
    }
    chunks.push(rest);
    assert_eq!(
        scan(input.sse, &chunks),
        whole,
        "result depends on the chunking"
    );
    if let (true, Some(n)) = (input.sse, input.prompt_tokens) {
        assert_eq!(whole, Some(n), "the last usage event was missed");
    }
});
