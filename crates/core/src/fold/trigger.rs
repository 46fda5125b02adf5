//! When to fold: the triggers, evaluated on the current view in priority
//! order, at most one per request.
//!
//! 1. *emergency*: view tokens + output reserve > window (ignores cooldown
//!    and `min_messages`); *token*: view tokens ≥ `trigger_ratio` × window,
//!    once `cooldown_messages` new messages arrived since the applied fold
//!    and the request has at least `min_messages` messages;
//! 2. *overflow*: unfolded messages > `preserve_recent + overflow_buffer`
//!    (off when `overflow_buffer` is 0);
//! 3. *safety*: user messages since the applied fold ≥ `safety_user_turns`
//!    (off at 0);
//! 4. *idle*: the applied fold is older than `idle_fold_after` and more
//!    than `preserve_recent` messages are unfolded (off when unset).
//!
//! "Since the applied fold" compares the request with the counts the fold
//! state recorded; without a state, the whole request counts. View tokens
//! include `overhead` (tool definitions and priming), since they occupy the
//! same window.

use super::Budget;
use super::state::{FoldState, Reason};
use crate::config::{Mode, Policy};
use crate::message::{Role, is_role};
use serde_json::Value;

/// What the triggers look at, measured on the current view.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Observed<'a> {
    /// Prompt tokens of the view, overhead included.
    pub view_tokens: u64,
    /// Messages in the request.
    pub messages: usize,
    /// Messages after the applied state's covered range.
    pub unfolded: usize,
    /// User messages in the request.
    pub user_messages: usize,
    /// The fold state applied to the view, if any.
    pub base: Option<&'a FoldState>,
    /// Unix seconds now.
    pub now_unix: u64,
}

impl<'a> Observed<'a> {
    /// The view of a request of `messages` messages, `user_messages` of
    /// them the user's, whose first `start` are pinned or covered by
    /// `base` (the rest unfolded).
    pub fn new(
        view_tokens: u64,
        (messages, user_messages): (usize, usize),
        start: usize,
        base: Option<&'a FoldState>,
        now_unix: u64,
    ) -> Self {
        Self {
            view_tokens,
            messages,
            unfolded: messages.saturating_sub(start),
            user_messages,
            base,
            now_unix,
        }
    }
}

/// The fewest view tokens at which a background-mode policy starts
/// preparing the next fold off the request path (`None`: the policy does
/// not, being inline or with `prefold_ratio` at or above the trigger).
pub fn prefold_at(policy: &Policy, context_window: u32) -> Option<u64> {
    (policy.mode == Mode::Background && policy.prefold_ratio < policy.trigger_ratio)
        .then(|| token_at(policy.prefold_ratio, context_window))
}

/// The ratio a background fold starts at for a conversation adding
/// `step` tokens per request ([`step_tokens`]), in a window of
/// `context_window` tokens with `room` of them for the prompt (the window
/// less the output reserve).
///
/// The prefold band (`trigger_ratio − prefold_ratio` of the window) gives
/// a fold started at `prefold_ratio` band ÷ step requests to land before
/// the view reaches the trigger. A step as large as the band crosses it in
/// one request wherever the fold starts, so starting at `prefold_ratio`
/// only folds a step early: the fold is planned from that request, lands
/// under the next step, and the view crosses the prefold again a step
/// sooner than inline folding crosses the trigger (at 6k with ≈ 1,100-token
/// steps, a fold every second step). So the ratio rises from
/// `prefold_ratio` toward `trigger_ratio` in proportion to step ÷ band,
/// reaching the trigger at a step as large as the band, and no higher than
/// a view that still fits the window one step later (`room − step`): a
/// larger step than measured is the emergency trigger's, which folds
/// inline. `prefold_ratio` without a step measure.
pub fn prefold_ratio(policy: &Policy, context_window: u32, room: u64, step: Option<u64>) -> f64 {
    let (low, high) = (policy.prefold_ratio, policy.trigger_ratio);
    let window = f64::from(context_window.max(1));
    let band = (high - low) * window;
    let Some(step) = step.filter(|&s| s > 0 && band > 0.0) else {
        return low;
    };
    let rise = (step as f64 / band).min(1.0);
    let fits = room.saturating_sub(step) as f64 / window;
    (low + (high - low) * rise).min(fits).max(low)
}

/// The fewest view tokens at which the emergency trigger fires: the view
/// and the output reserve no longer fit the window.
pub fn emergency_at(context_window: u32, output_reserve: u32) -> u64 {
    (u64::from(context_window) + 1).saturating_sub(u64::from(output_reserve))
}

/// The fewest view tokens at which the token trigger fires (once cooled
/// down, and from `min_messages` messages on): `ratio` of the window.
pub fn token_at(ratio: f64, context_window: u32) -> u64 {
    (ratio * f64::from(context_window)).ceil() as u64
}

/// Steps the tokens-per-step measure averages over: the newest few, so a
/// loop that starts calling several tools at once is sized by that.
pub const RECENT_STEPS: usize = 4;

/// Tokens the conversation adds per step, measured on the request: the
/// mean of its newest `recent` steps (all of them when `recent` is 0). A
/// step starts at an assistant message and runs to the next one: its tool
/// calls' results, or the user's next message, belong to it. `None`
/// before the first assistant message.
pub fn step_tokens(messages: &[Value], counts: &[u32], recent: usize) -> Option<u64> {
    let starts: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| is_role(m, Role::Assistant))
        .map(|(i, _)| i)
        .collect();
    tokens_per_step(&starts, counts, recent)
}

/// [`step_tokens`] from where the steps start (the assistant messages'
/// indices, ascending) and each message's tokens.
pub fn tokens_per_step(starts: &[usize], counts: &[u32], recent: usize) -> Option<u64> {
    let steps = if recent == 0 {
        starts.len()
    } else {
        recent.min(starts.len())
    };
    let from = *starts.get(starts.len().checked_sub(steps)?)?;
    let tokens: u64 = counts.get(from..)?.iter().map(|&c| u64::from(c)).sum();
    Some(tokens / steps as u64)
}

/// Whether the request is an agent loop: an assistant message in it calls
/// tools.
pub fn calls_tools(messages: &[Value]) -> bool {
    messages
        .iter()
        .any(|m| is_role(m, Role::Assistant) && m.get("tool_calls").is_some())
}

/// The trigger that fires, if any.
pub(crate) fn evaluate(seen: &Observed<'_>, policy: &Policy, budget: &Budget) -> Option<Reason> {
    let window = budget.context_window;
    if seen.view_tokens >= emergency_at(window, budget.output_reserve) {
        return Some(Reason::Emergency);
    }
    if seen.messages < policy.min_messages {
        return None;
    }
    let new_messages = seen
        .base
        .map_or(seen.messages, |b| seen.messages.saturating_sub(b.messages));
    let cooled = seen.base.is_none() || new_messages >= policy.cooldown_messages;
    if cooled && seen.view_tokens >= token_at(policy.trigger_ratio, window) {
        return Some(Reason::Token);
    }
    if policy.overflow_buffer > 0 && seen.unfolded > policy.preserve_recent + policy.overflow_buffer
    {
        return Some(Reason::Overflow);
    }
    let new_users = seen.base.map_or(seen.user_messages, |b| {
        seen.user_messages.saturating_sub(b.user_turns)
    });
    if policy.safety_user_turns > 0 && new_users >= policy.safety_user_turns {
        return Some(Reason::Safety);
    }
    let idle = match (policy.idle_fold_after, seen.base) {
        (Some(after), Some(b)) => seen.now_unix >= b.created_at.saturating_add(after.as_secs()),
        _ => false,
    };
    if idle && seen.unfolded > policy.preserve_recent {
        return Some(Reason::Idle);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(view_tokens: u64, messages: usize) -> Observed<'static> {
        Observed {
            view_tokens,
            messages,
            unfolded: messages,
            user_messages: messages / 2,
            base: None,
            now_unix: 0,
        }
    }

    fn budget() -> Budget {
        Budget {
            context_window: 1000,
            output_reserve: 100,
            overhead: 0,
            summary_reserve: 50,
            now_unix: 0,
            lands_later: false,
        }
    }

    #[test]
    fn tokens_per_step_are_the_newest_steps_mean() {
        use serde_json::json;
        let ms = vec![
            json!({"role": "system", "content": "s"}),
            json!({"role": "user", "content": "task"}),
            json!({"role": "assistant", "tool_calls": [{"id": "a"}]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "1"}),
            json!({"role": "assistant", "tool_calls": [{"id": "b"}, {"id": "c"}]}),
            json!({"role": "tool", "tool_call_id": "b", "content": "2"}),
            json!({"role": "tool", "tool_call_id": "c", "content": "3"}),
        ];
        let counts = [5, 7, 10, 100, 10, 300, 300];
        assert_eq!(step_tokens(&ms, &counts, 1), Some(610));
        assert_eq!(step_tokens(&ms, &counts, 4), Some(360));
        assert_eq!(step_tokens(&ms, &counts, 0), Some(360));
        assert_eq!(step_tokens(&ms[..2], &counts[..2], 4), None);
        assert!(calls_tools(&ms) && !calls_tools(&ms[..2]));
    }

    #[test]
    fn the_prefold_rises_toward_the_trigger_with_the_step() {
        let policy = Policy::default();
        let at = |step| token_at(prefold_ratio(&policy, 6_000, 5_800, step), 6_000);
        // No measure, or no band: the configured prefold.
        assert_eq!(at(None), 4_200);
        let flat = Policy {
            prefold_ratio: 0.8,
            ..Policy::default()
        };
        assert_eq!(prefold_ratio(&flat, 6_000, 5_800, Some(300)), 0.8);
        // Half the 600-token band: half way to the trigger.
        assert_eq!(at(Some(300)), 4_500);
        // A step as large as the band: the trigger.
        assert_eq!(at(Some(600)), 4_800);
        // Larger: no higher than a view that fits one step later.
        assert_eq!(at(Some(1_100)), 4_700);
        // Never below the configured prefold.
        assert_eq!(at(Some(2_000)), 4_200);
        // 32k: a 700-token step rises a fifth of the 3,200-token band.
        let r = prefold_ratio(&policy, 32_000, 31_800, Some(700));
        assert_eq!(token_at(r, 32_000), 23_100);
    }

    #[test]
    fn priority_and_thresholds() {
        let mut policy = Policy {
            overflow_buffer: 2,
            safety_user_turns: 3,
            ..Policy::default()
        };
        let b = budget();
        assert_eq!(
            evaluate(&seen(901, 2), &policy, &b),
            Some(Reason::Emergency)
        );
        assert_eq!(evaluate(&seen(800, 20), &policy, &b), Some(Reason::Token));
        assert_eq!(
            evaluate(&seen(799, 20), &policy, &b),
            Some(Reason::Overflow)
        );
        assert_eq!(evaluate(&seen(10, 8), &policy, &b), Some(Reason::Safety));
        assert_eq!(evaluate(&seen(10, 5), &policy, &b), None);
        policy.min_messages = 30;
        assert_eq!(evaluate(&seen(800, 20), &policy, &b), None);
    }
}
