//! Billed input cost of a loop's requests under published price sheets
//! with prompt caching.

/// One forwarded request, in prompt tokens.
pub struct Request {
    /// Prompt tokens forwarded.
    pub tokens: u64,
    /// Of those, the prefix equal to the previous request's (what a prompt
    /// cache can serve).
    pub cached: u64,
    /// Input tokens of the summarizer calls this request caused (never
    /// cached: each summarizer prompt is new).
    pub summarizer: u64,
}

/// A model's input prices in US dollars per million tokens.
pub struct Sheet {
    pub name: &'static str,
    /// Uncached input.
    pub input: f64,
    /// Input written to the cache (the uncached part of a request whose
    /// client marks a cache breakpoint; equal to `input` where caching is
    /// automatic).
    pub write: f64,
    /// Input read from the cache.
    pub read: f64,
    /// Shortest cacheable prefix, and its granularity.
    pub min_prefix: u64,
    pub step: u64,
}

/// GPT-4.1 (OpenAI, as published on 2025-04-14: $2.00 input, $0.50 cached
/// input; automatic caching of prefixes of 1,024 tokens and more, in
/// 128-token steps) and Claude Sonnet 4 (Anthropic, as published on
/// 2025-05-22: $3 input, $3.75 five-minute cache writes, $0.30 cache hits;
/// prefixes of 1,024 tokens and more, the client marking the end of each
/// request as Claude Code does).
pub const SHEETS: [Sheet; 2] = [
    Sheet {
        name: "GPT-4.1 input $",
        input: 2.00,
        write: 2.00,
        read: 0.50,
        min_prefix: 1024,
        step: 128,
    },
    Sheet {
        name: "Sonnet 4 input $",
        input: 3.00,
        write: 3.75,
        read: 0.30,
        min_prefix: 1024,
        step: 1,
    },
];

/// Printed under the table.
pub const NOTE: &str = "Prices per million input tokens: GPT-4.1 $2.00, cached $0.50 (OpenAI, as published on 2025-04-14); \
Claude Sonnet 4 $3.00, cache write $3.75, cache hit $0.30 (Anthropic, as published on 2025-05-22). \
A request's cached part is its prefix equal to the previous request's (by messages, tokens in proportion to bytes); \
summarizer input is billed as uncached input.";

impl Sheet {
    /// The billed input of `requests`, in dollars.
    pub fn cost(&self, requests: &[Request]) -> f64 {
        let per = |tokens: u64, price: f64| tokens as f64 * price / 1e6;
        requests
            .iter()
            .map(|r| {
                let cached = if r.cached >= self.min_prefix {
                    r.cached / self.step * self.step
                } else {
                    0
                };
                per(cached, self.read)
                    + per(r.tokens - cached.min(r.tokens), self.write)
                    + per(r.summarizer, self.input)
            })
            .sum()
    }
}
