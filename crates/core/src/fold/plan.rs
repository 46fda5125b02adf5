//! [`plan`]: one request's fold decision, from the messages and the
//! conversation's fold chain to [`Decision`].

use super::cut::{self, Candidate, CutInput};
use super::hash::PrefixChain;
use super::pins;
use super::plan_call::PlanCall;
use super::state::{FoldChain, FoldPlan, FoldState, Reason, Retained};
use super::trigger::{self, Observed, prefold_at};
use super::view::{Item, ack_message, layout};
use super::{Budget, CountTokens, Messages};
use crate::config::{Placement, Policy};
use crate::message::{Role, is_role, pinned_count};
use serde_json::{Value, json};
use std::borrow::Cow;

/// The largest view a fold aims for: `reset_ratio` of the window, and,
/// when the output reserve leaves less room than the trigger ratio (an
/// agent asking for 32k output tokens), the same band below the room that
/// is left, so that the next turns do not fold again at once.
///
/// Sized by the tokens the conversation adds per step (`step`: those
/// tokens, and whether it calls tools; see [`trigger::step_tokens`]): an
/// agent loop's fold goes deep enough to leave [`ROOM_STEPS`] steps below
/// the trigger, so a step that brings several tool results does not fold
/// again two steps later. A conversation without tools keeps the ratio's
/// target (a shallower one was measured and not taken: docs/folding.md).
fn reset_limit(policy: &Policy, window: u64, window_limit: u64, step: Option<(u64, bool)>) -> u64 {
    let by_window = (policy.reset_ratio * window as f64).floor() as u64;
    let trigger = policy.trigger_ratio.max(f64::EPSILON);
    let by_room = (policy.reset_ratio * window_limit as f64 / trigger).floor() as u64;
    let by_ratio = by_window.min(by_room).min(window_limit);
    let Some((per_step, tools)) = step.filter(|s| s.0 > 0) else {
        return by_ratio;
    };
    let at = trigger::token_at(
        policy.trigger_ratio,
        u32::try_from(window).unwrap_or(u32::MAX),
    )
    .min(window_limit);
    if tools {
        by_ratio.min(at.saturating_sub(ROOM_STEPS * per_step))
    } else {
        by_ratio
    }
}

/// The largest view a restub may leave ([`FoldPlan::restub`]): one step
/// (`per_step` tokens) more than the view the fold would leave
/// (`fold_view`), and one step below the trigger (and the window's room).
/// A restub costs no summarizer call but leaves more in the view than a
/// fold (the stubs of the steps a fold would summarize); beyond one step
/// of room lost, the fold is worth its call. `0` (no restub) without a
/// step measure or a fold to compare with.
fn restub_limit(
    policy: &Policy,
    (window, window_limit): (u64, u64),
    per_step: Option<u64>,
    fold_view: Option<u64>,
) -> u64 {
    let (Some(per_step), Some(fold_view)) = (per_step.filter(|&s| s > 0), fold_view) else {
        return 0;
    };
    let at = trigger::token_at(
        policy.trigger_ratio,
        u32::try_from(window).unwrap_or(u32::MAX),
    )
    .min(window_limit);
    (fold_view + RESTUB_STEPS_LOST * per_step)
        .min(at.saturating_sub(per_step + 1))
        .min(window_limit)
}

/// Steps of room a restub may leave fewer than the fold would.
pub const RESTUB_STEPS_LOST: u64 = 1;

/// Steps of room an agent loop's fold leaves below the trigger.
pub const ROOM_STEPS: u64 = 4;

/// What to do with one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// No trigger fired: send the view of `base` (the messages as they are
    /// when `base` is `None`).
    NoFold(ViewInfo),
    /// Summarize [`FoldPlan::to_fold`], then [`FoldState::after`]; for a
    /// restub ([`FoldPlan::restub`]) only [`FoldState::restubbed`].
    Fold(FoldPlan),
    /// The view overflows the window (an emergency) and no valid cut makes
    /// it fit, e.g. one giant message. Nothing was dropped; the caller
    /// forwards the current view or refuses the request.
    CannotFit(CannotFit),
}

impl Decision {
    /// The state applied to the current (pre-fold) view.
    pub fn base(&self) -> Option<&FoldState> {
        match self {
            Self::NoFold(v) => v.base.as_ref(),
            Self::Fold(p) => p.base.as_ref(),
            Self::CannotFit(c) => c.view.base.as_ref(),
        }
    }
}

/// The current view: the matching state applied, if any, and its size.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewInfo {
    /// The deepest fold matching the request.
    pub base: Option<FoldState>,
    /// Prompt tokens of the view, overhead included.
    pub tokens: u32,
    /// Prompt tokens of the client's messages as sent, overhead included.
    pub original_tokens: u32,
    /// A trigger that fired without a fold: no valid cut fits, but the view
    /// already fits the window (an emergency becomes [`Decision::CannotFit`]).
    pub skipped: Option<Reason>,
    /// The view reaches a background-mode policy's prefold ratio
    /// ([`Due::prefold`]).
    pub prefold: bool,
}

impl ViewInfo {
    /// Whether the view differs from the client's messages.
    pub fn changed(&self) -> bool {
        self.base.is_some()
    }
}

/// The view overflows the window and no valid cut brings it under.
#[derive(Debug, Clone, PartialEq)]
pub struct CannotFit {
    /// Always [`Reason::Emergency`].
    pub reason: Reason,
    /// The current view (forward it, or refuse the request).
    pub view: ViewInfo,
    /// The smallest view any valid cut would leave, if one exists.
    pub smallest: Option<u32>,
    /// The largest view that leaves room for the output reserve.
    pub limit: u32,
}

/// What the fold decision measures one view by: the request's roles, the
/// fold applied to it (if any) and the view's prompt tokens. Both callers
/// of [`due`] build it from the same measured inputs: the fast path from
/// the raw JSON ([`Measured::as_sent`]), [`plan`] from the view of the
/// base it chose (the same sum when no fold applies).
#[derive(Debug, Clone, Copy)]
pub struct Measured<'a> {
    /// Each message's role.
    pub roles: &'a [Role],
    /// The fold state applied to the view, if any.
    pub base: Option<&'a FoldState>,
    /// Prompt tokens of the view, overhead included.
    pub view_tokens: u64,
}

impl<'a> Measured<'a> {
    /// The messages as sent, no fold applied: `counts` yields each
    /// message's calibrated prompt tokens (a compressed one's as its stub).
    pub fn as_sent(
        roles: &'a [Role],
        counts: impl IntoIterator<Item = u32>,
        budget: &Budget,
    ) -> Self {
        Self {
            roles,
            base: None,
            view_tokens: sent_tokens(counts, budget),
        }
    }
}

/// Prompt tokens of messages as sent, overhead included.
fn sent_tokens(counts: impl IntoIterator<Item = u32>, budget: &Budget) -> u64 {
    u64::from(budget.overhead) + counts.into_iter().map(u64::from).sum::<u64>()
}

/// What the triggers say of one view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Due {
    /// The trigger that fires, if any ([`trigger::evaluate`]).
    pub reason: Option<Reason>,
    /// The view reaches a background-mode policy's prefold ratio: a keyed
    /// conversation starts its next fold off the request path.
    pub prefold: bool,
}

/// The fold decision's trigger step, the one function every request's
/// decision goes through: the fast path calls it on the messages as sent
/// (and forwards them untouched when nothing is due and no fold is
/// stored), [`plan`] on the view of the base it chose. A trigger that
/// fires leads `plan` on to the cut; `prefold` to a background fold.
pub fn due(view: &Measured<'_>, policy: &Policy, budget: &Budget) -> Due {
    let roles = view.roles;
    let pinned = pinned_count(roles.iter().copied().map(Some));
    let start = pinned + view.base.map_or(0, |b| b.covered);
    let users = roles.iter().filter(|&&r| r == Role::User).count();
    let seen = Observed::new(
        view.view_tokens,
        (roles.len(), users),
        start,
        view.base,
        budget.now_unix,
    );
    Due {
        reason: trigger::evaluate(&seen, policy, budget),
        prefold: prefold_at(policy, budget.context_window).is_some_and(|at| view.view_tokens >= at),
    }
}

/// Decides what to do with one request. `chain` holds the conversation's
/// recent folds; the deepest one matching the messages is applied first.
/// `counter` counts only the messages foldgate itself adds (the summary, an
/// acknowledgement); the request's own come counted in `request`.
///
/// In four stages: choose the base (the deepest matching fold, or an
/// earlier one, [`choose_base`]), decide ([`due`] on its view), cut
/// ([`Folding::cut`], or a restub instead, [`Folding::restub`]) and retain
/// ([`Folding::retain`]: what the fold covers, pins and stubs).
pub fn plan<C: CountTokens + ?Sized>(
    request: Messages<'_>,
    chain: Option<&FoldChain>,
    policy: &Policy,
    budget: &Budget,
    counter: &C,
    placement: Placement,
) -> Decision {
    let inputs = Inputs {
        request,
        policy,
        budget,
        counter,
        placement,
        p: pinned_count(request.roles.iter().copied().map(Some)),
        n: request.values.len(),
    };
    let (p, n) = (inputs.p, inputs.n);
    let mut prefix = PrefixChain::new(&request.ids[p..]);
    let matching = chain.map_or_else(Vec::new, |c| c.matching_prefix(n - p, &mut prefix));
    let view_of = |base: Option<&FoldState>| inputs.view_tokens(base);
    let (base, view_tokens) = choose_base(&matching, (n, p), policy, budget, &view_of);
    let measured = Measured {
        roles: request.roles,
        base,
        view_tokens,
    };
    let due = due(&measured, policy, budget);
    let view = ViewInfo {
        base: base.cloned(),
        tokens: clamp(view_tokens),
        original_tokens: clamp(inputs.view_tokens(None)),
        skipped: None,
        prefold: due.prefold,
    };
    let Some(reason) = due.reason else {
        return Decision::NoFold(view);
    };
    let window = u64::from(budget.context_window);
    let folding = Folding {
        start: p + base.map_or(0, |b| b.covered),
        window,
        window_limit: window.saturating_sub(u64::from(budget.output_reserve)),
        per_step: trigger::step_tokens(request.values, request.counts, trigger::RECENT_STEPS),
        pins: inputs.pins(),
        plan_tokens: inputs.plan_tokens(),
        inputs,
        base,
        view,
        view_tokens,
        reason,
    };
    let chosen = folding.cut();
    if let Some(restub) = folding.restub(&chosen) {
        return Decision::Fold(restub);
    }
    folding.retain(chosen, &mut prefix)
}

/// What every stage of [`plan`] reads: the request and what it is planned
/// within.
struct Inputs<'a, C: ?Sized> {
    request: Messages<'a>,
    policy: &'a Policy,
    budget: &'a Budget,
    counter: &'a C,
    placement: Placement,
    /// The pinned head's length.
    p: usize,
    /// The messages' count.
    n: usize,
}

impl<C: CountTokens + ?Sized> Inputs<'_, C> {
    /// Prompt tokens of the view of `base`, overhead included (the
    /// messages as sent without one).
    fn view_tokens(&self, base: Option<&FoldState>) -> u64 {
        match base {
            None => sent_tokens(self.request.counts.iter().copied(), self.budget),
            Some(_) => self.tokens_at(base, mark_of(base, self.request.values)),
        }
    }

    /// Prompt tokens of the view of `base` with the stub-eligible
    /// messages before `mark` as stubs, overhead included.
    fn tokens_at(&self, base: Option<&FoldState>, mark: usize) -> u64 {
        let marked = with_stubs(self.request.counts, self.request.stubbed, mark);
        let items = layout(self.request.values, base, self.placement);
        u64::from(self.budget.overhead) + layout_tokens(&items, &marked, self.counter)
    }

    /// The pins: every matching message but the last user message (shown
    /// anyway, in the tail or kept), newest first within the budget.
    fn pins(&self) -> Pins {
        let Messages {
            values,
            counts,
            roles,
            ..
        } = self.request;
        let last_user = roles.iter().rposition(|&r| r == Role::User);
        let window = u64::from(self.budget.context_window);
        let budget = (self.policy.pin_ratio * window as f64).floor() as u64;
        let (list, over) = pins::choose(
            values,
            counts,
            (self.p, self.n),
            last_user,
            self.policy,
            budget,
        );
        let mut marks = vec![false; if list.is_empty() { 0 } else { self.n }];
        for &i in &list {
            marks[i] = true;
        }
        Pins { list, over, marks }
    }

    /// Tokens of the newest plan call's message, which a fold shows
    /// ([`PlanCall`]); 0 without one.
    fn plan_tokens(&self) -> u64 {
        let after_head = self.request.values[self.p..].iter();
        PlanCall::newest(after_head, self.policy).map_or(0, |c| {
            let message = json!({"role": "system", "content": c.render()});
            u64::from(self.counter.message_tokens(&message))
        })
    }
}

/// The messages a fold shows pinned: `list` (indices into the request),
/// `over` those over the pin budget, `marks` one flag per message (empty
/// when none is pinned).
struct Pins {
    list: Vec<usize>,
    over: Vec<usize>,
    marks: Vec<bool>,
}

/// The cut candidate chosen (or the smallest view any cut leaves, if
/// any), and the stub mark it was chosen with.
type Chosen = (Result<Candidate, Option<u64>>, usize);

/// A request whose view a trigger fired on: what the cut and the retain
/// stages read.
struct Folding<'a, C: ?Sized> {
    inputs: Inputs<'a, C>,
    base: Option<&'a FoldState>,
    view: ViewInfo,
    view_tokens: u64,
    reason: Reason,
    /// The first message the base does not cover.
    start: usize,
    window: u64,
    /// The window less the output reserve.
    window_limit: u64,
    /// The tokens the conversation adds per step, when measured.
    per_step: Option<u64>,
    pins: Pins,
    /// Tokens of the plan message the fold would show ([`PlanCall`]).
    plan_tokens: u64,
}

impl<C: CountTokens + ?Sized> Folding<'_, C> {
    /// The base's stub mark, as this request shows it.
    fn base_mark(&self) -> usize {
        mark_of(self.base, self.inputs.request.values)
    }

    /// The stub mark that stubs every tool result before the newest
    /// exchange; for a plan shown first on a later request
    /// ([`Budget::lands_later`]: a background fold or restub), every one
    /// of these messages', the newest exchange being an older one there.
    fn deeper_mark(&self) -> usize {
        self.base_mark().max(self.reach())
    }

    /// The furthest a stub mark of this plan reaches where it is shown:
    /// the newest exchange (the end of these messages for a plan shown
    /// first on a later request).
    fn reach(&self) -> usize {
        let values = self.inputs.request.values;
        match self.inputs.budget.lands_later {
            true => values.len(),
            false => last_exchange(values),
        }
    }

    /// The cut: the candidate [`cut::choose`] picks with the base's stubs,
    /// or, when stubs ride on the fold, with every long tool result
    /// before the preserved tail stubbed — and when the preserved tail
    /// alone is over the reset target, the tail's older ones too (never
    /// the newest exchange).
    fn cut(&self) -> Chosen {
        let base_mark = self.base_mark();
        if self.inputs.request.stubbed.is_empty() {
            return (self.cut_at(base_mark).0, base_mark);
        }
        let (n, policy) = (self.inputs.n, self.inputs.policy);
        let tail = n.saturating_sub(policy.preserve_recent).min(self.reach());
        let before_tail = base_mark.max(tail);
        let (first, limit) = self.cut_at(before_tail);
        let short = |c: &Candidate| {
            c.expected > limit || n - c.cut < policy.preserve_recent.min(n - self.start)
        };
        match first {
            Ok(c) if !short(&c) => (Ok(c), before_tail),
            first => {
                let deeper = self.deeper_mark();
                match (first, self.cut_at(deeper).0) {
                    (Ok(a), Ok(b))
                        if b.cut > a.cut || (b.cut == a.cut && b.expected >= a.expected) =>
                    {
                        (Ok(a), before_tail)
                    }
                    (_, Ok(b)) => (Ok(b), deeper),
                    (first, Err(_)) => (first, before_tail),
                }
            }
        }
    }

    /// [`cut::choose`] with the stub-eligible messages before `mark` as
    /// stubs, and the reset limit it aimed for.
    fn cut_at(&self, mark: usize) -> (Result<Candidate, Option<u64>>, u64) {
        let Inputs {
            request,
            policy,
            budget,
            counter,
            placement,
            p,
            ..
        } = self.inputs;
        let messages = request.values;
        let step = self.per_step.map(|g| (g, trigger::calls_tools(messages)));
        let marked = with_stubs(request.counts, request.stubbed, mark);
        let input = CutInput {
            messages,
            counts: &marked,
            pinned: &self.pins.marks,
            start: self.start,
            old_kept: self.old_kept(),
            fixed: request.counts[..p]
                .iter()
                .map(|&c| u64::from(c))
                .sum::<u64>()
                + u64::from(budget.summary_reserve)
                + self.plan_tokens
                + u64::from(budget.overhead),
            ack: if placement == Placement::User {
                u64::from(counter.message_tokens(&ack_message()))
            } else {
                0
            },
            reset_limit: reset_limit(policy, self.window, self.window_limit, step),
            window_limit: self.window_limit,
            preserve_recent: policy.preserve_recent,
            overflow_buffer: policy.overflow_buffer,
            reason: self.reason,
        };
        (cut::choose(&input), input.reset_limit)
    }

    /// The message the base kept verbatim after its summary, if any.
    fn old_kept(&self) -> Option<usize> {
        self.base
            .and_then(|b| b.kept_user)
            .map(|k| self.inputs.p + k)
    }

    /// A token trigger on a folded view: stubbing the tool results before
    /// the newest exchange, without a summarizer call, when that leaves
    /// at most one step less room than the fold would (see
    /// [`restub_limit`]).
    fn restub(&self, chosen: &Chosen) -> Option<FoldPlan> {
        let b = self.base?;
        let deeper = self.deeper_mark();
        if !matches!(self.reason, Reason::Token | Reason::Emergency) || deeper <= self.base_mark() {
            return None;
        }
        let fold_view = chosen.0.as_ref().ok().map(|c| c.expected);
        let tokens = self.inputs.tokens_at(self.base, deeper);
        let limits = (self.window, self.window_limit);
        let limit = restub_limit(self.inputs.policy, limits, self.per_step, fold_view);
        (tokens < self.view_tokens && tokens <= limit).then(|| FoldPlan {
            base: self.view.base.clone(),
            reason: self.reason,
            fold: Vec::new(),
            pinned: self.inputs.p,
            covered: b.covered,
            kept_user: b.kept_user,
            chain: b.chain,
            tokens_before: self.view.tokens,
            tokens_after: clamp(tokens),
            messages: self.inputs.n,
            user_turns: self.user_turns(),
            rebuild: false,
            retained: Retained {
                stubs_before: deeper,
                step_tokens: self.per_step.map_or(0, clamp),
                ..b.retained.clone()
            },
            restub: true,
        })
    }

    fn user_turns(&self) -> usize {
        let roles = self.inputs.request.roles;
        roles.iter().filter(|&&r| r == Role::User).count()
    }

    /// The decision for the cut `chosen`: the fold (what it summarizes,
    /// covers and retains), or no fold when no cut is valid, or
    /// [`Decision::CannotFit`] when the view overflows.
    fn retain(self, chosen: Chosen, prefix: &mut PrefixChain<'_>) -> Decision {
        let (c, mark) = match chosen {
            (Ok(c), mark) => (c, mark),
            (Err(_), _) if self.reason != Reason::Emergency => {
                return Decision::NoFold(ViewInfo {
                    skipped: Some(self.reason),
                    ..self.view
                });
            }
            (Err(smallest), _) => {
                return Decision::CannotFit(CannotFit {
                    reason: self.reason,
                    view: self.view,
                    smallest: smallest.map(clamp),
                    limit: clamp(self.window_limit),
                });
            }
        };
        let (p, policy) = (self.inputs.p, self.inputs.policy);
        let rebuild =
            policy.max_depth > 0 && self.base.is_some_and(|b| b.depth >= policy.max_depth);
        let fold = self.folded(&c, rebuild);
        let covered = c.cut - p;
        let plan_call = PlanCall::newest(
            fold.iter()
                .filter_map(|&i| self.inputs.request.values.get(i)),
            policy,
        )
        .or_else(|| self.base.and_then(|b| b.retained.plan.clone()));
        let retained = Retained {
            pins: (self.pins.list.iter())
                .filter(|&&i| i < c.cut && Some(i) != c.kept)
                .map(|&i| i - p)
                .collect(),
            // Pins over the budget leave the view once a cut covers them.
            pins_folded: self.pins.over.iter().filter(|&&i| i < c.cut).count(),
            stubs_before: mark,
            plan: plan_call,
            step_tokens: self.per_step.map_or(0, clamp),
        };
        Decision::Fold(FoldPlan {
            reason: self.reason,
            fold,
            pinned: p,
            covered,
            kept_user: c.kept.map(|k| k - p),
            chain: prefix.get(covered).unwrap_or_default(),
            tokens_before: self.view.tokens,
            tokens_after: clamp(c.expected),
            messages: self.inputs.n,
            user_turns: self.user_turns(),
            rebuild,
            retained,
            restub: false,
            base: self.view.base,
        })
    }

    /// The messages the fold at `c` summarizes: on a rebuild everything
    /// before the cut that the view does not show; else the base's pins the
    /// budget no longer holds, a previously kept message no longer kept,
    /// and the newly folded run.
    fn folded(&self, c: &Candidate, rebuild: bool) -> Vec<usize> {
        let p = self.inputs.p;
        let shown =
            |i: usize| Some(i) == c.kept || (i < c.cut && self.pins.marks.get(i) == Some(&true));
        if rebuild {
            return (p..c.cut).filter(|&i| !shown(i)).collect();
        }
        let dropped = self
            .base
            .map(|b| b.retained.pins.iter().map(|&k| p + k).collect::<Vec<_>>())
            .unwrap_or_default();
        let mut fold: Vec<usize> = dropped
            .into_iter()
            .chain(self.old_kept())
            .chain(self.start..c.cut)
            .filter(|&i| !shown(i))
            .collect();
        fold.sort_unstable();
        fold.dedup();
        fold
    }
}

/// The state to apply: the best match, unless it was made from a longer
/// history than this request (a regenerate or an edit re-sends an older
/// one) and leaves fewer than `preserve_recent` messages verbatim while an
/// earlier fold of the chain, or no fold, serves the request without
/// triggering a token fold. Returns the state and its view's tokens.
fn choose_base<'s>(
    matching: &[&'s FoldState],
    (n, pinned): (usize, usize),
    policy: &Policy,
    budget: &Budget,
    view_of: &dyn Fn(Option<&FoldState>) -> u64,
) -> (Option<&'s FoldState>, u64) {
    let best = matching.first().copied();
    let best_tokens = view_of(best);
    let short = |s: &FoldState| n - pinned - s.covered < policy.preserve_recent;
    let Some(b) = best.filter(|b| b.messages > n && short(b)) else {
        return (best, best_tokens);
    };
    let window = f64::from(budget.context_window);
    let room = window - f64::from(budget.output_reserve);
    let serves =
        |tokens: u64| (tokens as f64) < policy.trigger_ratio * window && (tokens as f64) <= room;
    let earlier = matching[1..]
        .iter()
        .copied()
        .filter(|s| s.covered < b.covered && !short(s))
        .map(Some)
        .chain(std::iter::once(None));
    earlier
        .map(|s| (s, view_of(s)))
        .find(|&(_, tokens)| serves(tokens))
        .unwrap_or((best, best_tokens))
}

/// The stub mark of a state as `messages` show it: stub-eligible messages
/// before it show as stubs, never those of the newest tool exchange (a
/// background rewrite's mark may reach into it, made for a later request:
/// [`Budget::lands_later`]).
fn mark_of(state: Option<&FoldState>, messages: &[Value]) -> usize {
    state.map_or(0, |s| s.retained.stubs_before.min(last_exchange(messages)))
}

/// `counts` with every message before `mark` counted as its stub, where
/// `stubbed` has one.
fn with_stubs<'c>(counts: &'c [u32], stubbed: &[u32], mark: usize) -> Cow<'c, [u32]> {
    if stubbed.is_empty() || mark == 0 {
        return Cow::Borrowed(counts);
    }
    let stub = |(i, &c): (usize, &u32)| match stubbed.get(i) {
        Some(&s) if i < mark => s.min(c),
        _ => c,
    };
    Cow::Owned(counts.iter().enumerate().map(stub).collect())
}

/// Where the newest tool exchange starts: the results after the last
/// assistant message that calls tools stay verbatim (the last message
/// when none: it stays verbatim too).
pub(crate) fn last_exchange(messages: &[Value]) -> usize {
    messages
        .iter()
        .rposition(|m| is_role(m, Role::Assistant) && m.get("tool_calls").is_some())
        .unwrap_or(messages.len().saturating_sub(1))
}

/// Tokens of a laid-out view, messages only.
fn layout_tokens<C: CountTokens + ?Sized>(items: &[Item], counts: &[u32], counter: &C) -> u64 {
    items
        .iter()
        .map(|item| match item {
            Item::Original(i) => u64::from(counts[*i]),
            Item::New(v) | Item::Stub(_, v) => u64::from(counter.message_tokens(v)),
        })
        .sum()
}

fn clamp(tokens: u64) -> u32 {
    u32::try_from(tokens).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_output_reserve_keeps_the_hysteresis_band() {
        let policy = Policy {
            trigger_ratio: 0.8,
            reset_ratio: 0.7,
            ..Policy::default()
        };
        // A small reserve: the window's reset ratio.
        assert_eq!(reset_limit(&policy, 100_000, 96_000, None), 70_000);
        // An agent's 32k reserve in a 64k window: 7/8 of the room left,
        // not all of it (which would fold again on the next turn).
        assert_eq!(reset_limit(&policy, 64_000, 32_000, None), 28_000);
    }

    #[test]
    fn the_reset_target_is_sized_by_the_tokens_per_step() {
        let policy = Policy::default();
        // 6k window, trigger at 4,800, ratio target 3,000.
        assert_eq!(reset_limit(&policy, 6_000, 5_800, None), 3_000);
        // An agent loop adding 800 tokens a step: four steps of room.
        assert_eq!(reset_limit(&policy, 6_000, 5_800, Some((800, true))), 1_600);
        // Small steps: the ratio's target is deep enough.
        assert_eq!(reset_limit(&policy, 6_000, 5_800, Some((200, true))), 3_000);
        // Without tools: the ratio's target, whatever the steps.
        assert_eq!(
            reset_limit(&policy, 6_000, 5_800, Some((400, false))),
            3_000
        );
        assert_eq!(
            reset_limit(&policy, 6_000, 5_800, Some((1_500, false))),
            3_000
        );
    }
}
