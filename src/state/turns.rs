//! Recent chat turns of each conversation as foldgate forwarded them: the
//! client's full-history tokens against the forwarded view's, for the
//! dashboard's chart. In memory only and bounded (a chart, not a record):
//! at most [`MAX_TURNS`] turns of 24 bytes for at most
//! [`MAX_CONVERSATIONS`] conversations (about 3 MiB at the bound),
//! forgotten after `state.ttl` idle. Beside the chart, each
//! conversation's cache-stable share: requests whose forwarded messages
//! start with every message of the previous request's (a prompt cache
//! serves that whole prefix).

use super::ConvKey;
use crate::headers as names;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use twox_hash::XxHash3_64;

/// The identities of the messages a request forwarded (in order), put in
/// the response's extensions by the chat pipeline.
#[derive(Debug, Clone)]
pub struct ViewIds(pub Arc<[u128]>);

/// Turns kept per conversation; older ones are dropped.
pub const MAX_TURNS: usize = 120;
/// Conversations whose turns are kept (the most recently used).
pub const MAX_CONVERSATIONS: u64 = 1024;

/// How a turn's view came about (`x-foldgate-fold`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TurnFold {
    /// Nothing folded.
    None,
    /// The stored summary was reused.
    Reused,
    /// A fold was made for this turn.
    New,
}

/// One forwarded chat request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TurnRecord {
    /// Unix milliseconds when the answer started.
    pub at: u64,
    /// Estimated tokens of the client's messages (`x-foldgate-tokens-in`).
    pub tokens_in: u32,
    /// Estimated tokens of the forwarded view (`x-foldgate-tokens-out`).
    pub tokens_out: u32,
    /// `x-foldgate-fold`: `none`, `reused` or `new`.
    pub fold: TurnFold,
    /// Whether the forwarded messages started with every message of the
    /// previous request's (`None`: no previous request to compare).
    pub stable: Option<bool>,
}

/// A conversation's requests as far as they are recorded.
#[derive(Debug, Default)]
struct Record {
    turns: VecDeque<TurnRecord>,
    /// The previous request's message count and the hash of its identities.
    last: Option<(usize, u64)>,
    /// Requests compared with the previous one, and how many were stable.
    compared: u64,
    stable: u64,
}

type Series = Arc<Mutex<Record>>;

/// The hash of the first `len` identities (`None` when there are fewer),
/// in one call over their bytes (the streaming hasher costs ten times as
/// much on a few hundred bytes).
fn prefix_hash(ids: &[u128], len: usize) -> Option<u64> {
    let bytes: Vec<u8> = ids
        .get(..len)?
        .iter()
        .flat_map(|id| id.to_le_bytes())
        .collect();
    Some(XxHash3_64::oneshot(&bytes))
}

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
    /// chat answer and the identities of the messages it forwarded; does
    /// nothing when the headers are absent.
    pub fn record(&self, key: ConvKey, headers: &http::HeaderMap, view: Option<&ViewIds>) {
        let number =
            |name: &http::HeaderName| headers.get(name)?.to_str().ok()?.parse::<u32>().ok();
        let (Some(tokens_in), Some(tokens_out)) =
            (number(&names::TOKENS_IN), number(&names::TOKENS_OUT))
        else {
            return;
        };
        let fold = match headers.get(names::FOLD).map(|v| v.as_bytes()) {
            Some(b"new") => TurnFold::New,
            Some(b"reused") => TurnFold::Reused,
            _ => TurnFold::None,
        };
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let series = self.series.get_with(key, Series::default);
        if let Ok(mut record) = series.lock() {
            let stable = match (record.last, view) {
                (Some((len, hash)), Some(ids)) => Some(prefix_hash(&ids.0, len) == Some(hash)),
                _ => None,
            };
            if let Some(stable) = stable {
                record.compared += 1;
                record.stable += u64::from(stable);
            }
            record.last =
                view.and_then(|ids| Some((ids.0.len(), prefix_hash(&ids.0, ids.0.len())?)));
            if record.turns.len() == MAX_TURNS {
                record.turns.pop_front();
            }
            record.turns.push_back(TurnRecord {
                at,
                tokens_in,
                tokens_out,
                fold,
                stable,
            });
        }
    }

    /// The conversation's cache-stable requests and the requests compared
    /// (every recorded request after its first).
    pub fn cache_stable(&self, key: &ConvKey) -> (u64, u64) {
        self.series
            .get(key)
            .and_then(|s| s.lock().ok().map(|r| (r.stable, r.compared)))
            .unwrap_or_default()
    }

    /// The conversation's recorded turns, oldest first.
    pub fn of(&self, key: &ConvKey) -> Vec<TurnRecord> {
        self.series
            .get(key)
            .and_then(|s| s.lock().ok().map(|r| r.turns.iter().copied().collect()))
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
        turns.record(key.clone(), &HeaderMap::new(), None);
        assert!(turns.of(&key).is_empty(), "a passthrough answer is no turn");
        for i in 0..MAX_TURNS as u32 + 5 {
            let mut h = HeaderMap::new();
            h.insert("x-foldgate-tokens-in", HeaderValue::from(1000 + i));
            h.insert("x-foldgate-tokens-out", HeaderValue::from(400 + i));
            h.insert("x-foldgate-fold", HeaderValue::from_static("reused"));
            turns.record(key.clone(), &h, None);
        }
        let kept = turns.of(&key);
        assert_eq!(kept.len(), MAX_TURNS);
        assert_eq!((kept[0].tokens_in, kept[0].tokens_out), (1005, 405));
        assert_eq!(kept[0].fold, TurnFold::Reused);
        assert_eq!(
            std::mem::size_of::<TurnRecord>(),
            24,
            "the bound's arithmetic"
        );
    }

    #[test]
    fn a_request_is_stable_when_it_extends_the_previous_one() {
        let turns = Turns::new(Duration::from_secs(60));
        let key = ConvKey {
            tenant: "t".into(),
            conversation: "c".into(),
        };
        let mut h = HeaderMap::new();
        h.insert("x-foldgate-tokens-in", HeaderValue::from(10));
        h.insert("x-foldgate-tokens-out", HeaderValue::from(10));
        let view = |ids: &[u128]| ViewIds(ids.into());
        turns.record(key.clone(), &h, Some(&view(&[1, 2])));
        turns.record(key.clone(), &h, Some(&view(&[1, 2, 3, 4])));
        turns.record(key.clone(), &h, Some(&view(&[1, 9, 3, 4, 5])));
        turns.record(key.clone(), &h, Some(&view(&[1, 9, 3, 4, 5, 6])));
        assert_eq!(turns.cache_stable(&key), (2, 3));
        let stable: Vec<Option<bool>> = turns.of(&key).iter().map(|t| t.stable).collect();
        assert_eq!(stable, [None, Some(true), Some(false), Some(true)]);
    }
}
