//! Fold policy knobs and how the three levels that set them combine.
//!
//! Every knob can be set in `[policy]`, in `[providers.NAME.policy]` and in
//! `[models."glob"]`; the most specific level that sets a knob wins.

use super::pins::Patterns;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// When summaries are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Fold ahead of time, off the request path, once the view crosses
    /// `prefold_ratio`; only an emergency waits for a summary.
    #[default]
    Background,
    /// Fold on the request that crosses the trigger, which waits for it.
    Inline,
}

/// The resolved policy for one request: every knob has a value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Policy {
    /// Fold when the view's estimated tokens reach this share of the window.
    pub trigger_ratio: f64,
    /// A fold shrinks the view to at most this share of the window, the
    /// recent messages counted in tokens (hysteresis: the next trigger is
    /// far away, so folds, and the prompt-cache misses they cost, are few).
    pub reset_ratio: f64,
    /// Messages at the end of the conversation always kept verbatim.
    pub preserve_recent: usize,
    /// Fold when more than `preserve_recent + overflow_buffer` messages are
    /// unfolded. 0 turns the overflow trigger off.
    pub overflow_buffer: usize,
    /// Fold after this many user turns since the last fold. 0 turns it off.
    pub safety_user_turns: usize,
    /// After a fold, the token trigger waits for this many new messages
    /// (the emergency case ignores it).
    pub cooldown_messages: usize,
    /// Never fold a conversation with fewer messages than this
    /// (the emergency case ignores it).
    pub min_messages: usize,
    /// In background mode, start folding once the view reaches this share
    /// of the window (default: 0.10 below `trigger_ratio`).
    pub prefold_ratio: f64,
    /// `background` or `inline`.
    pub mode: Mode,
    /// The summary (narrative and ledger) may take at most this share of
    /// the window, and at most `summarizer.max_summary_tokens`.
    pub summary_ratio: f64,
    /// After this many rewrites of a summary, the next fold rebuilds it from
    /// the raw messages instead of summarizing the summary again (0 = off).
    pub max_depth: u32,
    /// Fold a conversation that has not folded for this long once more than
    /// `preserve_recent` messages are unfolded (off when unset).
    #[serde(with = "humantime_serde")]
    pub idle_fold_after: Option<Duration>,
    /// Regular expressions: a user (or later system) message whose text
    /// matches one is never folded; it stays verbatim, in order, ahead of
    /// the summary (agent instruction files, system reminders).
    pub pin: Patterns,
    /// Pinned messages may take at most this share of the window; over it,
    /// the oldest pins fold (with a warning).
    pub pin_ratio: f64,
    /// Which tool calls are the agent's plan; the newest one (with its
    /// arguments) is rendered verbatim under its own heading in the
    /// summary. Unset (the default): any call whose arguments hold a
    /// non-empty list of items that each have a text and a `status` string
    /// (TodoWrite, update_plan, todowrite, write_todos, …). Set: exactly
    /// the calls of the tools named, whatever their arguments; `[]`: none.
    pub plan_tools: Option<Arc<[String]>>,
    /// The longest a request waits for folding, all of it together: an
    /// inline or emergency fold (waiting for a fold already running
    /// included), the reactive fold after an upstream context-length
    /// error, and every summarizer retry in them. Past it the request goes
    /// on as `summarizer.on_failure` says, with `x-foldgate-warning`; the
    /// fold itself runs on in the background.
    #[serde(with = "humantime_serde")]
    pub fold_deadline: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            trigger_ratio: 0.80,
            reset_ratio: 0.50,
            preserve_recent: 6,
            overflow_buffer: 0,
            safety_user_turns: 0,
            cooldown_messages: 2,
            min_messages: 4,
            prefold_ratio: 0.70,
            mode: Mode::Background,
            summary_ratio: 0.15,
            max_depth: 0,
            idle_fold_after: None,
            pin: Patterns::defaults(),
            pin_ratio: 0.20,
            plan_tools: None,
            fold_deadline: Duration::from_secs(60),
        }
    }
}

/// One level's policy settings; a knob left unset falls through to the
/// level below it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyOverrides {
    /// See [`Policy::trigger_ratio`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger_ratio: Option<f64>,
    /// See [`Policy::reset_ratio`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset_ratio: Option<f64>,
    /// See [`Policy::preserve_recent`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preserve_recent: Option<usize>,
    /// See [`Policy::overflow_buffer`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overflow_buffer: Option<usize>,
    /// See [`Policy::safety_user_turns`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub safety_user_turns: Option<usize>,
    /// See [`Policy::cooldown_messages`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cooldown_messages: Option<usize>,
    /// See [`Policy::min_messages`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_messages: Option<usize>,
    /// See [`Policy::prefold_ratio`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefold_ratio: Option<f64>,
    /// See [`Policy::mode`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// See [`Policy::summary_ratio`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_ratio: Option<f64>,
    /// See [`Policy::max_depth`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<u32>,
    /// See [`Policy::idle_fold_after`].
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub idle_fold_after: Option<Duration>,
    /// See [`Policy::pin`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pin: Option<Patterns>,
    /// See [`Policy::pin_ratio`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pin_ratio: Option<f64>,
    /// See [`Policy::plan_tools`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_tools: Option<Vec<String>>,
    /// See [`Policy::fold_deadline`].
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub fold_deadline: Option<Duration>,
}

impl PolicyOverrides {
    /// Applies the knobs this level sets on top of `base`.
    pub fn apply(&self, base: &mut Policy) {
        macro_rules! take {
            ($($k:ident),*) => { $(if let Some(v) = self.$k { base.$k = v; })* };
        }
        take!(
            trigger_ratio,
            reset_ratio,
            preserve_recent,
            overflow_buffer,
            safety_user_turns,
            cooldown_messages,
            min_messages,
            prefold_ratio,
            mode,
            summary_ratio,
            max_depth,
            pin_ratio,
            fold_deadline
        );
        if self.idle_fold_after.is_some() {
            base.idle_fold_after = self.idle_fold_after;
        }
        if let Some(pin) = &self.pin {
            base.pin = pin.clone();
        }
        if let Some(tools) = &self.plan_tools {
            base.plan_tools = Some(tools.as_slice().into());
        }
    }

    /// Checks ranges; `at` names the level (e.g. `policy`) for the message.
    pub fn validate(&self, at: &str) -> Result<(), String> {
        let ratios = [
            ("trigger_ratio", self.trigger_ratio),
            ("reset_ratio", self.reset_ratio),
            ("prefold_ratio", self.prefold_ratio),
            ("summary_ratio", self.summary_ratio),
            ("pin_ratio", self.pin_ratio),
        ];
        for (name, value) in ratios {
            if let Some(v) = value {
                if !(v > 0.0 && v <= 1.0) {
                    return Err(format!("{at}.{name} must be in (0, 1], got {v}"));
                }
            }
        }
        if self.fold_deadline.is_some_and(|d| d.is_zero()) {
            return Err(format!("{at}.fold_deadline must be above 0"));
        }
        if let (Some(trigger), Some(reset)) = (self.trigger_ratio, self.reset_ratio) {
            if reset > trigger {
                return Err(format!(
                    "{at}.reset_ratio ({reset}) must not be above {at}.trigger_ratio ({trigger}): \
                     a fold cuts down to reset_ratio after the trigger fires"
                ));
            }
        }
        Ok(())
    }
}

/// Resolves the policy for one request: defaults, then `[policy]`, then the
/// provider's, then the model's overrides.
pub fn resolve(levels: &[&PolicyOverrides]) -> Policy {
    let mut policy = Policy::default();
    for level in levels {
        level.apply(&mut policy);
    }
    policy.reset_ratio = policy.reset_ratio.min(policy.trigger_ratio);
    // Unset, the prefold ratio follows the trigger wherever it was set.
    if levels.iter().all(|l| l.prefold_ratio.is_none()) {
        // Rounded, so 0.80 gives 0.7, not 0.7000000000000001.
        let below = ((policy.trigger_ratio - 0.10) * 1e6).round() / 1e6;
        policy.prefold_ratio = below.max(0.05);
    }
    policy.prefold_ratio = policy.prefold_ratio.min(policy.trigger_ratio);
    policy
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn most_specific_level_wins() {
        let global = PolicyOverrides {
            trigger_ratio: Some(0.7),
            preserve_recent: Some(8),
            ..Default::default()
        };
        let provider = PolicyOverrides {
            preserve_recent: Some(4),
            ..Default::default()
        };
        let model = PolicyOverrides {
            trigger_ratio: Some(0.9),
            ..Default::default()
        };
        let p = resolve(&[&global, &provider, &model]);
        assert_eq!(p.trigger_ratio, 0.9);
        assert_eq!(p.preserve_recent, 4);
        assert_eq!(p.reset_ratio, 0.50);
    }

    #[test]
    fn prefold_follows_the_trigger_unless_set() {
        let global = PolicyOverrides {
            trigger_ratio: Some(0.9),
            ..Default::default()
        };
        let p = resolve(&[&global]);
        assert!((p.prefold_ratio - 0.8).abs() < 1e-9);
        assert_eq!(p.mode, Mode::Background);
        let model = PolicyOverrides {
            prefold_ratio: Some(0.5),
            mode: Some(Mode::Inline),
            ..Default::default()
        };
        let p = resolve(&[&global, &model]);
        assert_eq!((p.prefold_ratio, p.mode), (0.5, Mode::Inline));
    }

    #[test]
    fn reset_never_exceeds_trigger() {
        let global = PolicyOverrides {
            trigger_ratio: Some(0.4),
            ..Default::default()
        };
        assert_eq!(resolve(&[&global]).reset_ratio, 0.4);
    }

    #[test]
    fn ratios_out_of_range_are_named() {
        let bad = PolicyOverrides {
            trigger_ratio: Some(1.5),
            ..Default::default()
        };
        assert_eq!(
            bad.validate("policy").unwrap_err(),
            "policy.trigger_ratio must be in (0, 1], got 1.5"
        );
    }
}
