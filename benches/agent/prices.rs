//! Billed input of a loop's requests under two providers' prompt-caching
//! rules, and what the same client would pay sending its history directly
//! or trimmed to the window.
//!
//! - **OpenAI** (automatic prefix caching): a request's prefix equal to a
//!   prefix of an earlier request's is read from the cache, counted in
//!   128-token increments from 1,024 tokens on, at
//!   [`OPENAI_CACHED_DISCOUNT`] of the input price; the rest is input.
//! - **Anthropic** (breakpoints): only the prefixes a request marks with
//!   `cache_control` are written, at [`ANTHROPIC_WRITE`] of the input
//!   price, and read by a later request, at [`ANTHROPIC_READ`], when one
//!   of its breakpoints, or a position up to [`ANTHROPIC_LOOKBACK`] units
//!   before one, ends a written prefix; prefixes under 1,024 tokens are
//!   not cached; what follows the last breakpoint is input.
//!
//! A unit is a request's system part or one of its items (see
//! `Wire::prefix`); prefix tokens are apportioned to units by their bytes.
//! Summarizer input is billed as uncached input.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};

/// OpenAI's cached input price as a share of its input price (50%: the
/// discount prompt caching launched with, on gpt-4o's $2.50).
pub const OPENAI_CACHED_DISCOUNT: f64 = 0.5;
/// Anthropic's cache write price as a share of its input price (5-minute
/// TTL).
pub const ANTHROPIC_WRITE: f64 = 1.25;
/// Anthropic's cache read price as a share of its input price.
pub const ANTHROPIC_READ: f64 = 0.1;
/// How far before a breakpoint Anthropic looks for a written prefix (20
/// content blocks; counted here in units, each one message or more).
pub const ANTHROPIC_LOOKBACK: usize = 20;

/// One request as a prompt cache sees it.
#[derive(Clone, Default)]
pub struct Request {
    /// Each unit's identity (its bytes, hashed), in order.
    pub units: Vec<u64>,
    /// Each unit's prompt tokens.
    pub tokens: Vec<u64>,
    /// Units that end with a cache breakpoint (Anthropic), ascending.
    pub breakpoints: Vec<usize>,
    /// Units where a step starts (an assistant turn), ascending: what
    /// trimming drops whole.
    pub steps: Vec<usize>,
    /// Input tokens of the summarizer calls this request caused.
    pub summarizer: u64,
}

impl Request {
    /// A request of `units` (their bytes) and `total` prompt tokens,
    /// apportioned by bytes.
    pub fn new(units: &[String], total: u64, breakpoints: Vec<usize>, steps: Vec<usize>) -> Self {
        let bytes: usize = units.iter().map(String::len).sum::<usize>().max(1);
        Self {
            units: units.iter().map(hash).collect(),
            tokens: units
                .iter()
                .map(|u| (total as f64 * u.len() as f64 / bytes as f64).round() as u64)
                .collect(),
            breakpoints,
            steps,
            summarizer: 0,
        }
    }

    /// Prompt tokens, summarizer input aside.
    pub fn total(&self) -> u64 {
        self.tokens.iter().sum()
    }

    /// The prefix identities: `chain[i]` stands for units `0..=i`.
    fn chain(&self) -> Vec<u64> {
        let mut h = 0u64;
        self.units
            .iter()
            .map(|u| {
                h = hash(&(h, *u));
                h
            })
            .collect()
    }

    /// Tokens of units `0..=i`.
    fn upto(&self, i: usize) -> u64 {
        self.tokens[..=i].iter().sum()
    }
}

fn hash<T: Hash + ?Sized>(t: &T) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    t.hash(&mut h);
    h.finish()
}

/// How a provider caches prompts.
#[derive(Clone, Copy)]
pub enum Caching {
    /// Every prefix, read in `step`-token increments from `min` tokens on.
    Automatic { min: u64, step: u64 },
    /// The prefixes a request marks, from `min` tokens on.
    Breakpoints { min: u64 },
}

/// A provider's input prices.
pub struct Sheet {
    pub name: &'static str,
    /// US dollars per million input tokens.
    pub input: f64,
    /// Cache reads and writes, as shares of `input`.
    pub read: f64,
    pub write: f64,
    pub caching: Caching,
}

pub const SHEETS: [Sheet; 2] = [
    Sheet {
        name: "OpenAI",
        input: 2.50,
        read: OPENAI_CACHED_DISCOUNT,
        write: 1.0,
        caching: Caching::Automatic {
            min: 1024,
            step: 128,
        },
    },
    Sheet {
        name: "Anthropic",
        input: 3.00,
        read: ANTHROPIC_READ,
        write: ANTHROPIC_WRITE,
        caching: Caching::Breakpoints { min: 1024 },
    },
];

/// Printed under the tables.
pub const NOTE: &str = "Bills: input tokens of the forwarded requests and of the summarizer calls, in US dollars. \
OpenAI: $2.50 per million input tokens, automatic prefix caching (a prefix equal to an earlier request's, from 1,024 tokens \
in 128-token increments) at 0.5x (`OPENAI_CACHED_DISCOUNT`). Anthropic: $3.00 per million, cache writes 1.25x, \
reads 0.1x, only at the request's `cache_control` breakpoints (the Anthropic loops: the client's on its last message and \
the one foldgate puts after the summary; the other loops: one on the last message, as a client would mark it), \
prefixes from 1,024 tokens, a lookback of 20 units. Summarizer input is billed as uncached input with the request after \
which its fold ran (its JSON's bytes at the conversation's tokens per byte). Read share: input tokens read from the cache.";

/// A sheet's bill for a sequence of requests.
#[derive(Clone, Copy, Default)]
pub struct Bill {
    /// US dollars.
    pub cost: f64,
    /// Input tokens billed, summarizer input included.
    pub input: u64,
    /// Of those, read from the cache.
    pub read: u64,
}

impl Bill {
    /// The share of input tokens read from the cache.
    pub fn read_share(&self) -> f64 {
        self.read as f64 / self.input.max(1) as f64
    }
}

impl Sheet {
    /// The bill for `requests`, sent in order to one cache.
    pub fn bill(&self, requests: &[Request]) -> Bill {
        let per = |tokens: u64, share: f64| tokens as f64 * share * self.input / 1e6;
        let mut cache: HashSet<u64> = HashSet::new();
        let mut bill = Bill::default();
        for r in requests {
            let chain = r.chain();
            let total = r.total();
            let (read, written) = match self.caching {
                Caching::Automatic { min, step } => {
                    let common = (0..chain.len())
                        .rev()
                        .find(|&i| cache.contains(&chain[i]))
                        .map_or(0, |i| r.upto(i));
                    cache.extend(chain.iter().copied());
                    let read = if common >= min {
                        common / step * step
                    } else {
                        0
                    };
                    (read, 0)
                }
                Caching::Breakpoints { min } => {
                    let read = r
                        .breakpoints
                        .iter()
                        .flat_map(|&b| (b.saturating_sub(ANTHROPIC_LOOKBACK)..=b).rev())
                        .filter(|&i| i < chain.len() && cache.contains(&chain[i]))
                        .map(|i| r.upto(i))
                        .max()
                        .unwrap_or(0);
                    let last = r.breakpoints.last().map_or(0, |&b| r.upto(b));
                    for &b in &r.breakpoints {
                        if b < chain.len() && r.upto(b) >= min {
                            cache.insert(chain[b]);
                        }
                    }
                    let written = if last >= min {
                        last.saturating_sub(read)
                    } else {
                        0
                    };
                    (read, written)
                }
            };
            let plain = total - read - written + r.summarizer;
            bill.cost += per(read, self.read) + per(written, self.write) + per(plain, 1.0);
            bill.input += total + r.summarizer;
            bill.read += read;
        }
        bill
    }
}

/// The requests a client sends when it trims its history to `room`
/// tokens instead: each request of `direct` (the whole history) with its
/// oldest steps dropped whole, after the system part and the task (the
/// units before the first step), until it fits; a breakpoint on its last
/// unit. `None` for a request even its newest step alone does not fit.
pub fn trimmed(direct: &[Request], room: u64) -> Vec<Request> {
    direct
        .iter()
        .map(|r| {
            let head = r.steps.first().copied().unwrap_or(r.units.len());
            let head_tokens: u64 = r.tokens[..head].iter().sum();
            let from = r
                .steps
                .iter()
                .copied()
                .find(|&s| head_tokens + r.tokens[s..].iter().sum::<u64>() <= room)
                .or_else(|| r.steps.last().copied())
                .unwrap_or(head);
            let keep: Vec<usize> = (0..head).chain(from..r.units.len()).collect();
            Request {
                units: keep.iter().map(|&i| r.units[i]).collect(),
                tokens: keep.iter().map(|&i| r.tokens[i]).collect(),
                breakpoints: vec![keep.len() - 1],
                steps: Vec::new(),
                summarizer: 0,
            }
        })
        .collect()
}
