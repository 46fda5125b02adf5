//! `[compress]`: older-turn compression, the tier before summarizing. Long
//! tool results (and, when asked, long assistant answers) of older turns
//! become short stubs in the view; the full messages go to the archive.
//!
//! Like the policy knobs, every key can be set in `[compress]`, in
//! `[providers.NAME.compress]` and in `[models."glob".compress]`; the most
//! specific level that sets a key wins.

use serde::{Deserialize, Serialize};

/// The resolved compression settings for one request: every key has a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Compress {
    /// Compress long tool results of older turns.
    pub enabled: bool,
    /// Compress long assistant answers of older turns too (chat
    /// completions only). Off by default: an answer is the model's own
    /// reasoning and decisions, short next to tool output, and a stub of
    /// it loses the thread the model follows.
    pub assistant: bool,
    /// Only messages of at least this many tokens are compressed.
    pub min_tokens: u32,
    /// Only messages followed by at least this many turns are compressed
    /// (a turn starts at a user message or at a run of tool results).
    pub after_turns: usize,
    /// Stubs change the view only when this many new candidates have
    /// accumulated, so the prompt prefix stays stable between batches.
    pub batch: usize,
    /// A fold also stubs every long tool result before the preserved tail
    /// (the batch that is due rides on the fold's rewrite) and, when the
    /// preserved tail alone is over the reset target, the tail's older
    /// ones: one rewrite, one prompt-cache miss, and the next fold far away.
    pub with_fold: bool,
    /// A batch is shown only when it pays for its prompt-cache miss: the
    /// window is at risk within two steps, or the tokens it saves over the
    /// expected remaining requests outweigh the miss (see
    /// `docs/folding.md`, fold economy). Off: every batch is shown when due.
    pub when_it_pays: bool,
}

impl Default for Compress {
    fn default() -> Self {
        Self {
            enabled: true,
            assistant: false,
            min_tokens: 500,
            after_turns: 3,
            batch: 4,
            with_fold: true,
            when_it_pays: true,
        }
    }
}

impl Compress {
    /// Whether anything at all may be compressed.
    pub fn active(&self) -> bool {
        self.enabled || self.assistant
    }
}

/// One level's compression settings; a key left unset falls through to
/// the level below it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CompressOverrides {
    /// See [`Compress::enabled`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// See [`Compress::assistant`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assistant: Option<bool>,
    /// See [`Compress::min_tokens`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_tokens: Option<u32>,
    /// See [`Compress::after_turns`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_turns: Option<usize>,
    /// See [`Compress::batch`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<usize>,
    /// See [`Compress::with_fold`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub with_fold: Option<bool>,
    /// See [`Compress::when_it_pays`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when_it_pays: Option<bool>,
}

impl CompressOverrides {
    /// Applies the keys this level sets on top of `base`.
    pub fn apply(&self, base: &mut Compress) {
        macro_rules! take {
            ($($k:ident),*) => { $(if let Some(v) = self.$k { base.$k = v; })* };
        }
        take!(
            enabled,
            assistant,
            min_tokens,
            after_turns,
            batch,
            with_fold,
            when_it_pays
        );
    }

    /// Checks ranges; `at` names the level (e.g. `compress`) for the message.
    pub fn validate(&self, at: &str) -> Result<(), String> {
        if self.batch == Some(0) {
            return Err(format!("{at}.batch must be at least 1"));
        }
        if self.after_turns == Some(0) {
            return Err(format!(
                "{at}.after_turns must be at least 1: the current turn is never compressed"
            ));
        }
        Ok(())
    }
}

/// Resolves the settings for one request: defaults, then `[compress]`,
/// then the provider's, then the model's.
pub fn resolve(levels: &[&CompressOverrides]) -> Compress {
    let mut settings = Compress::default();
    for level in levels {
        level.apply(&mut settings);
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn most_specific_level_wins() {
        let global = CompressOverrides {
            min_tokens: Some(100),
            batch: Some(2),
            ..Default::default()
        };
        let model = CompressOverrides {
            enabled: Some(false),
            batch: Some(8),
            ..Default::default()
        };
        let c = resolve(&[&global, &model]);
        assert_eq!((c.enabled, c.min_tokens, c.batch), (false, 100, 8));
        assert_eq!(c.after_turns, 3);
        assert!(!c.active());
    }

    #[test]
    fn zero_batch_is_named() {
        let bad = CompressOverrides {
            batch: Some(0),
            ..Default::default()
        };
        assert_eq!(
            bad.validate("models.\"x\".compress").unwrap_err(),
            "models.\"x\".compress.batch must be at least 1"
        );
    }
}
