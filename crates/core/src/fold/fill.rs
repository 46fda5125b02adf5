//! Filling a folded chat's view back up to the window: a fold cuts a view
//! down to `reset_ratio` of the window so that the next turns add no
//! rewrite, but what the summary stands for is then out of view while
//! trimming to the window would have kept it. On a conversation without
//! tools the room the window has left is given to the newest folded
//! messages, verbatim, right after the summary (docs/folding.md, *Fold
//! economy*): the same recent history trimming keeps, less the summary.
//!
//! The fill starts on a grid of [`STEP`] messages counted back from the
//! fold's cut, so its first message moves only once every few turns (when
//! the tail has grown by a step): the bytes after the summary stay the
//! same between those moves, as trimming's never do. Pure: numbers in,
//! message indices out; the trigger and the cut never see the fill.

use super::view::Item;

/// Messages the fill's start moves by: the grid it starts on.
pub const STEP: usize = 8;

/// Where the fill goes and what it shows: `items[at]` is the tail's first
/// message, and `shown` the folded messages to insert before it, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fill {
    pub at: usize,
    pub shown: Vec<usize>,
    /// Their tokens, by `counts`.
    pub tokens: u64,
}

/// How much a fill may take: `anchored` tokens, a budget that does not
/// depend on the tail (the fill's first message then stays put while the
/// tail grows), as long as they fit `room`, the tokens the window has
/// left; past that, the most of `room` the grid allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub anchored: u64,
    pub room: u64,
}

/// The fill of `items` (a folded view: the pinned head, pins, the summary,
/// the tail) within `limits`, by each message's `counts`: the folded
/// messages from a grid point before the tail's first message up to it,
/// the earliest grid point whose messages fit; those the view already
/// shows (pins) are left out. `None` when the view has no summary, or not
/// even one step of messages fits.
pub fn fill(items: &[Item], counts: &[u32], limits: Limits) -> Option<Fill> {
    let summary = items.iter().rposition(|i| matches!(i, Item::New(_)))?;
    let at = summary + 1;
    let Some(Item::Original(tail)) = items.get(at) else {
        return None;
    };
    let tail = *tail;
    // The pinned head: the leading run of the request's first messages.
    let head = items
        .iter()
        .enumerate()
        .take_while(|(k, i)| matches!(i, Item::Original(j) if j == k))
        .count();
    let shown: std::collections::HashSet<usize> = items
        .iter()
        .filter_map(|i| match i {
            Item::Original(j) => Some(*j),
            _ => None,
        })
        .collect();
    let tokens = |from: usize| -> u64 {
        (from..tail)
            .filter(|j| !shown.contains(j))
            .map(|j| u64::from(counts.get(j).copied().unwrap_or(u32::MAX)))
            .sum()
    };
    let earliest = |within: u64| {
        let mut from = tail;
        loop {
            let next = from.saturating_sub(STEP).max(head);
            if next == from || tokens(next) > within {
                return from;
            }
            from = next;
        }
    };
    let anchored = earliest(limits.anchored);
    let from = if tokens(anchored) <= limits.room {
        anchored
    } else {
        earliest(limits.room)
    };
    let shown: Vec<usize> = (from..tail).filter(|j| !shown.contains(j)).collect();
    let tokens = shown
        .iter()
        .map(|&j| u64::from(counts.get(j).copied().unwrap_or(u32::MAX)))
        .sum();
    (!shown.is_empty()).then_some(Fill { at, tokens, shown })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn folded(head: usize, cut: usize, n: usize) -> Vec<Item> {
        let mut items: Vec<Item> = (0..head).map(Item::Original).collect();
        items.push(Item::New(json!({"role": "system", "content": "summary"})));
        items.extend((cut..n).map(Item::Original));
        items
    }

    #[test]
    fn the_fill_starts_on_the_grid_and_fits_the_room() {
        let items = folded(1, 41, 60);
        let counts = vec![10u32; 60];
        let room = |room: u64| Limits {
            anchored: room,
            room,
        };
        // 100 tokens of room: one step of 8 messages (80), not two (160).
        let f = fill(&items, &counts, room(100)).unwrap();
        assert_eq!(
            (f.at, f.shown.clone(), f.tokens),
            (2, (33..41).collect(), 80)
        );
        // Room for everything folded: back to the pinned head, not into it.
        let f = fill(&items, &counts, room(10_000)).unwrap();
        assert_eq!(f.shown, (1..41).collect::<Vec<_>>());
        // Less than a step: nothing.
        assert_eq!(fill(&items, &counts, room(79)), None);
        // No summary: nothing to fill.
        let plain: Vec<Item> = (0..60).map(Item::Original).collect();
        assert_eq!(fill(&plain, &counts, room(10_000)), None);
    }

    #[test]
    fn pins_already_shown_are_not_shown_twice() {
        let mut items = folded(1, 41, 60);
        items.insert(1, Item::Original(38));
        let counts = vec![10u32; 60];
        let room = Limits {
            anchored: 75,
            room: 75,
        };
        let f = fill(&items, &counts, room).unwrap();
        assert_eq!(f.at, 3);
        assert_eq!(f.shown, [33, 34, 35, 36, 37, 39, 40]);
        assert_eq!(f.tokens, 70);
    }

    #[test]
    fn the_anchored_budget_holds_while_the_room_takes_it() {
        let items = folded(1, 41, 60);
        let counts = vec![10u32; 60];
        let limits = |room: u64| Limits {
            anchored: 170,
            room,
        };
        // Two steps (160 tokens) whatever the room above them.
        for room in [160, 200, 5_000] {
            assert_eq!(
                fill(&items, &counts, limits(room)).unwrap().shown,
                (25..41).collect::<Vec<_>>()
            );
        }
        // Less room: what the room takes.
        assert_eq!(
            fill(&items, &counts, limits(159)).unwrap().shown,
            (33..41).collect::<Vec<_>>()
        );
    }
}
