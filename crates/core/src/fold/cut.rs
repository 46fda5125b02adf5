//! Where to cut: which unfolded messages a fold takes, which stay verbatim.
//!
//! A fold folds `M[start..cut)` (`start = p + covered` of the applied state)
//! and keeps the tail `M[cut..n)`. A cut `x` is *valid* when
//!
//! - it folds at least one message and keeps at least 2 in the tail;
//! - `M[x]` is not a `tool` message and no assistant `tool_calls` message
//!   before `x` has a `tool` result at or after `x` (pairs stay whole);
//! - it never folds the last user message `L`: either `x ≤ L` (a *normal*
//!   cut, `L` is in the tail) or `x > L` (an *agent-loop* cut: `L` stays
//!   verbatim right after the summary as the state's `kept_user`, and the
//!   complete tool exchanges between `L` and `x` are folded). When the
//!   applied state already keeps `L`, every cut keeps it again; a previously
//!   kept message that is no longer the last user message is folded by the
//!   next fold, even by a cut at `start` that folds nothing else. The cut
//!   `x = L + 1` is skipped when `x = L` is itself a cut: both show the same
//!   messages, and the plain one needs no kept message.
//!
//! - it folds no message foldgate does not understand
//!   ([`crate::message::is_opaque`]) unless that message is a pin shown
//!   ahead of the summary or the kept last user message: an opaque tool
//!   call or result stops every cut after it (docs/folding.md).
//!
//! Each valid cut has an expected view size: pinned head, pins before the
//! cut, summary reserve, overhead, kept user and tail (and the `User`
//! placement's acknowledgement). Pins are never folded, so a cut must fold
//! at least one message that is not a pin.
//!
//! The choice, in order:
//!
//! 1. tails of at least `preserve_recent` messages that fit the reset target
//!    (`reset_ratio` × window, and room for the output reserve): for token
//!    and emergency folds the longest such tail, moved forward to the first
//!    tail starting at a user message when there is one; for overflow and
//!    safety folds the shortest, preferring one that starts at a user message
//!    and keeps at most `preserve_recent + overflow_buffer` messages;
//! 2. shorter tails (down to 2) that fit the reset target: the longest,
//!    moved forward to a tail starting at a user message when there is one;
//! 3. tails that only fit the window minus the output reserve: the smallest
//!    view;
//! 4. nothing fits: an emergency becomes [`super::Decision::CannotFit`],
//!    any other trigger is reported as skipped ([`super::ViewInfo::skipped`]).

use super::state::Reason;
use crate::message::{Role, is_opaque, is_role, tool_call_id, tool_call_ids};
use serde_json::Value;
use std::collections::HashMap;

/// Tails never shrink below this many messages.
pub const MIN_TAIL: usize = 2;

/// Everything the choice depends on, in absolute message indices.
#[derive(Debug, Clone)]
pub(crate) struct CutInput<'a> {
    pub messages: &'a [Value],
    /// Per-message token counts (stubs counted as stubs).
    pub counts: &'a [u32],
    /// `pinned[i]`: message `i` is a pin, shown ahead of the summary when
    /// the cut covers it (empty: no pins).
    pub pinned: &'a [bool],
    /// First unfolded message.
    pub start: usize,
    /// The message the applied state keeps verbatim, if any.
    pub old_kept: Option<usize>,
    /// Pinned head + summary reserve + overhead.
    pub fixed: u64,
    /// Tokens of the acknowledgement when the summary is a `user` message
    /// followed by a `user` message; 0 for other placements.
    pub ack: u64,
    /// Largest view that meets the reset target.
    pub reset_limit: u64,
    /// Largest view that leaves room for the output reserve.
    pub window_limit: u64,
    pub preserve_recent: usize,
    pub overflow_buffer: usize,
    pub reason: Reason,
}

/// One valid cut and what it leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// First message of the tail.
    pub cut: usize,
    /// The user message kept verbatim after the summary.
    pub kept: Option<usize>,
    /// Expected prompt tokens of the view after the fold.
    pub expected: u64,
    /// The tail starts at a user message.
    pub user_start: bool,
}

/// The chosen cut, or `Err(smallest expected view)` when none fits
/// (`None` inside when there is no valid cut at all).
pub(crate) fn choose(input: &CutInput<'_>) -> Result<Candidate, Option<u64>> {
    let all = candidates(input);
    let n = input.messages.len();
    let x_max = n.saturating_sub(input.preserve_recent.max(MIN_TAIL));
    let primary: Vec<&Candidate> = all
        .iter()
        .filter(|c| c.cut <= x_max && c.expected <= input.reset_limit)
        .collect();
    let picked = match input.reason {
        _ if primary.is_empty() => None,
        Reason::Token | Reason::Emergency => {
            primary.iter().find(|c| c.user_start).or(primary.first())
        }
        Reason::Overflow | Reason::Safety | Reason::Idle => {
            let x_lo = n.saturating_sub(input.preserve_recent + input.overflow_buffer);
            primary
                .iter()
                .rev()
                .find(|c| c.user_start && c.cut >= x_lo)
                .or(primary.last())
        }
    };
    let picked = picked.copied().or_else(|| {
        let shorter: Vec<&Candidate> = all
            .iter()
            .filter(|c| c.cut > x_max && c.expected <= input.reset_limit)
            .collect();
        shorter
            .iter()
            .find(|c| c.user_start)
            .or(shorter.first())
            .copied()
    });
    let smallest = all
        .iter()
        .min_by_key(|c| (c.expected, std::cmp::Reverse(c.cut)));
    match picked.or(smallest.filter(|c| c.expected <= input.window_limit)) {
        Some(c) => Ok(*c),
        None => Err(smallest.map(|c| c.expected)),
    }
}

/// Every valid cut, in ascending order.
pub(crate) fn candidates(input: &CutInput<'_>) -> Vec<Candidate> {
    let ms = input.messages;
    let n = ms.len();
    let blocked = blocked_cuts(ms);
    let last_user = ms.iter().rposition(|m| is_role(m, Role::User));
    // The last user message constrains cuts only while it is unfolded or kept.
    let guard = last_user.filter(|&l| l >= input.start || Some(l) == input.old_kept);
    let mut suffix = vec![0u64; n + 1];
    for i in (0..n).rev() {
        suffix[i] = suffix[i + 1] + u64::from(input.counts[i]);
    }
    let pin = |i: usize| input.pinned.get(i).copied().unwrap_or(false);
    // No cut folds an opaque message that is neither a pin nor kept.
    let barrier = (input.start..n)
        .find(|&i| Some(i) != last_user && !pin(i) && is_opaque(&ms[i]))
        .unwrap_or(n);
    // pins_before[x]: tokens of the pins before x, how many of them are
    // unfolded (at or after `start`), and how many in all.
    let mut pins_before = vec![(0u64, 0usize, 0u64); n + 1];
    for i in 0..n {
        let (t, c, all) = pins_before[i];
        pins_before[i + 1] = if pin(i) {
            (
                t + u64::from(input.counts[i]),
                c + usize::from(i >= input.start),
                all + 1,
            )
        } else {
            (t, c, all)
        };
    }
    let last = n.saturating_sub(MIN_TAIL);
    (input.start..=last)
        .filter(|&x| x < n && x <= barrier && !blocked[x])
        .filter_map(|x| {
            let kept = guard.filter(|&l| x > l);
            if guard.is_some_and(|l| x == l + 1 && l > input.start && !blocked[l]) {
                return None; // the same view as the cut at the last user message
            }
            let kept_pin = kept.is_some_and(pin);
            let folded = (x - input.start)
                - usize::from(kept.is_some_and(|k| k >= input.start) && !kept_pin)
                - pins_before[x].1
                + usize::from(
                    input.old_kept.is_some()
                        && input.old_kept != kept
                        && !input.old_kept.is_some_and(pin),
                );
            if folded == 0 {
                return None;
            }
            let user_start = is_role(&ms[x], Role::User);
            // A kept pin is shown once, as the kept message.
            let kept_tokens = kept
                .filter(|&k| !pin(k))
                .map_or(0, |k| u64::from(input.counts[k]));
            let ack = if kept.is_some() || user_start {
                input.ack
            } else {
                0
            };
            // The `User` placement follows each pin with an acknowledgement.
            let pin_acks = input.ack * pins_before[x].2;
            let expected =
                input.fixed + pins_before[x].0 + pin_acks + kept_tokens + ack + suffix[x];
            Some(Candidate {
                cut: x,
                kept,
                expected,
                user_start,
            })
        })
        .collect()
}

/// `blocked[x]`: a tail starting at `x` would begin with a `tool` message or
/// separate an assistant `tool_calls` message from one of its results.
/// Results are matched by `tool_call_id`, else to the nearest preceding
/// assistant message with `tool_calls`.
pub(crate) fn blocked_cuts(messages: &[Value]) -> Vec<bool> {
    let n = messages.len();
    let mut depth = vec![0i64; n + 2];
    let mut owner: HashMap<&str, usize> = HashMap::new();
    let mut last_caller: Option<usize> = None;
    for (j, m) in messages.iter().enumerate() {
        match Role::of_message(m) {
            Some(Role::Assistant) => {
                if let Some(ids) = tool_call_ids(m) {
                    last_caller = Some(j);
                    for id in ids {
                        owner.insert(id, j);
                    }
                }
            }
            Some(Role::Tool) => {
                let from = tool_call_id(m)
                    .and_then(|id| owner.get(id).copied())
                    .or(last_caller)
                    .map_or(j, |a| a + 1);
                depth[from.min(j)] += 1;
                depth[j + 1] -= 1;
            }
            _ => {}
        }
    }
    let mut open = 0;
    (0..=n)
        .map(|x| {
            open += depth[x];
            open > 0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn no_cut_folds_an_opaque_call() {
        let ms = vec![
            json!({"role":"user","content":"go"}),
            json!({"role":"assistant","content":"a"}),
            json!({"role":"assistant","foldgate_opaque":"x","tool_calls":[{"id":"a"}]}),
            json!({"role":"tool","tool_call_id":"a","content":"1"}),
            json!({"role":"assistant","content":"b"}),
            json!({"role":"user","content":"more"}),
            json!({"role":"assistant","content":"c"}),
        ];
        let input = CutInput {
            messages: &ms,
            counts: &[10; 7],
            pinned: &[],
            start: 0,
            old_kept: None,
            fixed: 0,
            ack: 0,
            reset_limit: 1000,
            window_limit: 1000,
            preserve_recent: 2,
            overflow_buffer: 0,
            reason: Reason::Token,
        };
        let cuts: Vec<usize> = candidates(&input).iter().map(|c| c.cut).collect();
        assert_eq!(cuts, vec![1, 2]);
        let plain = ms.iter().map(|m| {
            let mut m = m.clone();
            m.as_object_mut().unwrap().remove("foldgate_opaque");
            m
        });
        let plain: Vec<Value> = plain.collect();
        let cuts: Vec<usize> = candidates(&CutInput {
            messages: &plain,
            ..input
        })
        .iter()
        .map(|c| c.cut)
        .collect();
        assert_eq!(cuts, vec![1, 2, 4, 5]);
    }

    #[test]
    fn parallel_tool_calls_block_every_inner_cut() {
        let ms = vec![
            json!({"role":"user","content":"go"}),
            json!({"role":"assistant","tool_calls":[{"id":"a"},{"id":"b"}]}),
            json!({"role":"tool","tool_call_id":"a","content":"1"}),
            json!({"role":"tool","tool_call_id":"b","content":"2"}),
            json!({"role":"assistant","content":"done"}),
        ];
        assert_eq!(
            blocked_cuts(&ms),
            vec![false, false, true, true, false, false]
        );
    }
}
