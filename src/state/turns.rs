//! Recent chat turns of each conversation as foldgate forwarded them: the
//! client's full-history tokens against the forwarded view's, for the
//! dashboard's chart. In memory only and bounded (a chart, not a record):
//! at most [`MAX_TURNS`] turns of at most [`MAX_CONVERSATIONS`]
//! conversations, forgotten after `state.ttl` idle.

use super::ConvKey;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Turns kept per conversation; older ones are dropped.
pub const MAX_TURNS: usize = 120;
/// Conversations whose turns are kept.
pub const MAX_CONVERSATIONS: u64 = 4096;

/// One forwarded chat request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Turn {
    /// Unix milliseconds when the answer started.
    pub at: u64,
    /// Estimated tokens of the client's messages (`x-foldgate-tokens-in`).
    pub tokens_in: u32,
    /// Estimated tokens of the forwarded view (`x-foldgate-tokens-out`).
    pub tokens_out: u32,
    /// `x-foldgate-fold`: `none`, `reused` or `new`.
    pub fold: &'static str,
}

type Series = Arc<Mutex<VecDeque<Turn>>>;

/// The turns of recent conversations.
#[derive(Debug)]
pub struct Turns {
    series: moka::sync::Cache<ConvKey, Series>,
}

impl Turns {
    /// Kept while used within `idle`.
    pub fn new(idle: Duration) -> Self {
        Self {
            series: moka::sync::Cache::builder()
                .max_capacity(MAX_CONVERSATIONS)
                .time_to_idle(idle)
                .build(),
        }
    }

    /// Records a turn from the `x-foldgate-*` headers of an intercepted
    /// chat answer; does nothing when they are absent.
    pub fn record(&self, key: ConvKey, headers: &http::HeaderMap) {
        let number = |name: &str| headers.get(name)?.to_str().ok()?.parse::<u32>().ok();
        let (Some(tokens_in), Some(tokens_out)) = (
            number("x-foldgate-tokens-in"),
            number("x-foldgate-tokens-out"),
        ) else {
            return;
        };
        let fold = match headers.get("x-foldgate-fold").map(|v| v.as_bytes()) {
            Some(b"new") => "new",
            Some(b"reused") => "reused",
            _ => "none",
        };
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let series = self.series.get_with(key, Series::default);
        if let Ok(mut turns) = series.lock() {
            if turns.len() == MAX_TURNS {
                turns.pop_front();
            }
            turns.push_back(Turn {
                at,
                tokens_in,
                tokens_out,
                fold,
            });
        }
    }

    /// The conversation's recorded turns, oldest first.
    pub fn of(&self, key: &ConvKey) -> Vec<Turn> {
        self.series
            .get(key)
            .and_then(|s| s.lock().ok().map(|t| t.iter().copied().collect()))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};

    #[test]
    fn keeps_the_latest_turns_of_annotated_answers_only() {
        let turns = Turns::new(Duration::from_secs(60));
        let key = ConvKey {
            tenant: "t".into(),
            conversation: "c".into(),
        };
        turns.record(key.clone(), &HeaderMap::new());
        assert!(turns.of(&key).is_empty(), "a passthrough answer is no turn");
        for i in 0..MAX_TURNS as u32 + 5 {
            let mut h = HeaderMap::new();
            h.insert("x-foldgate-tokens-in", HeaderValue::from(1000 + i));
            h.insert("x-foldgate-tokens-out", HeaderValue::from(400 + i));
            h.insert("x-foldgate-fold", HeaderValue::from_static("reused"));
            turns.record(key.clone(), &h);
        }
        let kept = turns.of(&key);
        assert_eq!(kept.len(), MAX_TURNS);
        assert_eq!((kept[0].tokens_in, kept[0].tokens_out), (1005, 405));
        assert_eq!(kept[0].fold, "reused");
    }
}
