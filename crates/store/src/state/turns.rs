//! Recent chat turns of each conversation as foldgate forwarded them: the
//! client's full-history tokens against the forwarded view's, for the
//! dashboard's chart. In memory only and bounded in bytes (a chart, not a
//! record): at most [`MAX_TURNS`] turns of 16 bytes per conversation, and
//! conversations, the most recently used, up to `state.turns_bytes`, each
//! charged what it holds at most ([`CONVERSATION_BYTES`] and its key), so
//! the bound holds however long each one gets; forgotten after
//! `state.ttl` idle. Beside the chart, each
//! conversation's cache-stable share: requests whose forwarded messages
//! start with every message of the previous request's (a prompt cache
//! serves that whole prefix).

use super::ConvKey;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Turns kept per conversation; older ones are dropped.
pub const MAX_TURNS: usize = 120;
/// Bytes a conversation's record holds at most, its key's text aside:
/// the turns' buffer at its largest (a `VecDeque` grows by doubling, so
/// [`MAX_TURNS`] rounded up to a power of two, of 16-byte turns), the
/// record, its `Arc` and `Mutex`, and about 260 bytes of the cache's own
/// entry: 2,420 bytes (was 3,336 charged, 3,467 held, when a turn took 24
/// bytes; `examples/cache_bytes` counts what a record holds).
pub const CONVERSATION_BYTES: u64 = (MAX_TURNS.next_power_of_two() * std::mem::size_of::<Turn>()
    + std::mem::size_of::<Record>()
    + 32
    + 260) as u64;

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

impl TurnFold {
    /// Its `x-foldgate-fold` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Reused => "reused",
            Self::New => "new",
        }
    }
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

/// A [`TurnRecord`] as kept: its time in milliseconds after the record's
/// `since`, so a turn takes 16 bytes, not 24.
#[derive(Debug, Clone, Copy)]
struct Turn {
    after: u32,
    tokens_in: u32,
    tokens_out: u32,
    fold: TurnFold,
    stable: Option<bool>,
}

/// A conversation's requests as far as they are recorded.
#[derive(Debug, Default)]
struct Record {
    /// Unix milliseconds the turns' times count from.
    since: u64,
    turns: VecDeque<Turn>,
    /// The previous request's message count and the hash of its identities.
    last: Option<(usize, u64)>,
    /// Requests compared with the previous one, and how many were stable.
    compared: u64,
    stable: u64,
}

type Series = Arc<Mutex<Record>>;

impl Record {
    /// Keeps `turn`, dropping the oldest past [`MAX_TURNS`].
    fn push(&mut self, turn: TurnRecord) {
        if self.turns.len() == MAX_TURNS {
            self.turns.pop_front();
        }
        if self.turns.is_empty() {
            self.since = turn.at;
        }
        if turn.at.saturating_sub(self.since) > u64::from(u32::MAX) {
            // 49 days after `since`: count from 24 days before this turn
            // (older turns kept show as that time).
            let since = turn.at - u64::from(u32::MAX / 2);
            for kept in &mut self.turns {
                let at = self.since + u64::from(kept.after);
                kept.after = u32::try_from(at.saturating_sub(since)).unwrap_or(0);
            }
            self.since = since;
        }
        self.turns.push_back(Turn {
            after: u32::try_from(turn.at.saturating_sub(self.since)).unwrap_or(u32::MAX),
            tokens_in: turn.tokens_in,
            tokens_out: turn.tokens_out,
            fold: turn.fold,
            stable: turn.stable,
        });
    }

    /// The turns kept, oldest first.
    fn turns(&self) -> Vec<TurnRecord> {
        self.turns
            .iter()
            .map(|t| TurnRecord {
                at: self.since + u64::from(t.after),
                tokens_in: t.tokens_in,
                tokens_out: t.tokens_out,
                fold: t.fold,
                stable: t.stable,
            })
            .collect()
    }
}

/// The hashes of `ids`' first `len` identities (`None` when there are
/// fewer) and of all of them, in one pass and without copying them out:
/// the identities are uniform 128-bit hashes already, so each is mixed
/// in with a rotation and a multiply, not hashed again.
fn prefix_hashes(ids: &[u128], len: usize) -> (Option<u64>, u64) {
    let mut prefix = None;
    let mut hash = 0u64;
    for (i, id) in ids.iter().enumerate() {
        if i == len {
            prefix = Some(hash);
        }
        let folded = (*id as u64) ^ ((*id >> 64) as u64).rotate_left(32);
        hash = (hash.rotate_left(23) ^ folded).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    if ids.len() == len {
        prefix = Some(hash);
    }
    (prefix, hash)
}

/// The turns of recent conversations.
#[derive(Debug)]
pub struct Turns {
    series: moka::sync::Cache<ConvKey, Series>,
}

impl Turns {
    /// At most `bytes` (`state.turns_bytes`), each conversation kept while
    /// used within `idle`; the least recently used go first.
    pub fn new(bytes: u64, idle: Duration) -> Self {
        Self {
            series: moka::sync::Cache::builder()
                .max_capacity(bytes)
                .weigher(|key: &ConvKey, _: &Series| {
                    let key = (key.tenant.len() + key.conversation.len()) as u64;
                    u32::try_from(CONVERSATION_BYTES + key).unwrap_or(u32::MAX)
                })
                .time_to_idle(idle)
                // A new conversation is recorded, evicting the least
                // recently used (moka's default may refuse a newcomer).
                .eviction_policy(moka::policy::EvictionPolicy::lru())
                .build(),
        }
    }

    /// Bytes charged against `state.turns_bytes`.
    pub fn bytes(&self) -> u64 {
        self.series.run_pending_tasks();
        self.series.weighted_size()
    }

    /// Conversations recorded.
    pub fn conversations(&self) -> u64 {
        self.series.run_pending_tasks();
        self.series.entry_count()
    }

    /// Records a turn: the estimated tokens of the client's messages and
    /// of the forwarded view, how the view came about, and the identities
    /// of the messages it forwarded (in order).
    pub fn record(&self, key: ConvKey, tokens: (u32, u32), fold: TurnFold, view: &[u128]) {
        let (tokens_in, tokens_out) = tokens;
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let series = self.series.get_with(key, Series::default);
        if let Ok(mut record) = series.lock() {
            let (last_len, last_hash) = record.last.unzip();
            let (prefix, hash) = prefix_hashes(view, last_len.unwrap_or(usize::MAX));
            let stable = last_hash.map(|last| prefix == Some(last));
            if let Some(stable) = stable {
                record.compared += 1;
                record.stable += u64::from(stable);
            }
            record.last = Some((view.len(), hash));
            record.push(TurnRecord {
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
            .and_then(|s| s.lock().ok().map(|r| r.turns()))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ConvKey {
        ConvKey {
            tenant: "t".into(),
            conversation: "c".into(),
        }
    }

    #[test]
    fn keeps_the_latest_turns() {
        let turns = Turns::new(1 << 20, Duration::from_secs(60));
        assert!(turns.of(&key()).is_empty());
        for i in 0..MAX_TURNS as u32 + 5 {
            turns.record(key(), (1000 + i, 400 + i), TurnFold::Reused, &[]);
        }
        let kept = turns.of(&key());
        assert_eq!(kept.len(), MAX_TURNS);
        assert_eq!((kept[0].tokens_in, kept[0].tokens_out), (1005, 405));
        assert_eq!(kept[0].fold, TurnFold::Reused);
        assert_eq!(std::mem::size_of::<Turn>(), 16, "the bound's arithmetic");
        assert_eq!(CONVERSATION_BYTES, 2_420);
    }

    /// However many conversations and turns, the charge stays within the
    /// bound, the charge covers what a full record holds, and the latest
    /// conversation is kept.
    #[test]
    fn bounded_in_bytes() {
        let conv = |i: usize| ConvKey {
            tenant: "t".into(),
            conversation: format!("c{i}"),
        };
        let bound = 10 * (CONVERSATION_BYTES + 8);
        let turns = Turns::new(bound, Duration::from_secs(60));
        for i in 0..200 {
            for t in 0..MAX_TURNS as u32 + 3 {
                turns.record(conv(i), (t, t), TurnFold::None, &[1, 2]);
            }
        }
        assert!(turns.bytes() <= bound, "{} > {bound}", turns.bytes());
        assert!((5..=10).contains(&turns.conversations()));
        assert_eq!(turns.of(&conv(199)).len(), MAX_TURNS);
        let full = turns.series.get(&conv(199)).unwrap();
        let held = full.lock().unwrap().turns.capacity() * std::mem::size_of::<Turn>();
        assert!(held as u64 + 260 <= CONVERSATION_BYTES, "{held}");
    }

    #[test]
    fn a_request_is_stable_when_it_extends_the_previous_one() {
        let turns = Turns::new(1 << 20, Duration::from_secs(60));
        let views = [
            &[1, 2][..],
            &[1, 2, 3, 4],
            &[1, 9, 3, 4, 5],
            &[1, 9, 3, 4, 5, 6],
            &[1, 9, 3, 4, 5, 6],
            &[1, 9],
            &[],
            &[7],
        ];
        for view in views {
            turns.record(key(), (10, 10), TurnFold::None, view);
        }
        assert_eq!(turns.cache_stable(&key()), (4, 7));
        let stable: Vec<Option<bool>> = turns.of(&key()).iter().map(|t| t.stable).collect();
        let (yes, no) = (Some(true), Some(false));
        assert_eq!(stable, [None, yes, no, yes, yes, no, no, yes]);
    }

    /// A turn's time comes back to the millisecond, also past the 49 days
    /// a turn's 32-bit offset spans.
    #[test]
    fn times_come_back_exact() {
        let mut record = Record::default();
        let day = 86_400_000u64;
        let times = [
            1_700_000_000_123,
            1_700_000_000_456,
            1_700_000_000_456 + 60 * day,
            1_700_000_000_999 + 60 * day,
        ];
        for at in times {
            record.push(TurnRecord {
                at,
                tokens_in: 1,
                tokens_out: 2,
                fold: TurnFold::New,
                stable: Some(false),
            });
        }
        let back: Vec<u64> = record.turns().iter().map(|t| t.at).collect();
        // The two turns 60 days back are older than the offset reaches.
        assert_eq!(back[2..], times[2..]);
        let reach = times[2] - u64::from(u32::MAX / 2);
        assert_eq!(back[..2], [reach, reach]);
        assert_eq!(record.turns()[3].fold, TurnFold::New);
    }

    /// The header's labels are the dashboard's (serde's) names.
    #[test]
    fn fold_labels() {
        for fold in [TurnFold::None, TurnFold::Reused, TurnFold::New] {
            let named = serde_json::to_value(fold).unwrap();
            assert_eq!(named, fold.as_str());
        }
    }
}
