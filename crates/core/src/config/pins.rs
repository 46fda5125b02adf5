//! `policy.pin`: the regular expressions that pin a message (agent
//! instruction files, system reminders), compiled once when the
//! configuration loads.

use regex::RegexSet;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::sync::{Arc, LazyLock};

/// The markers coding agents put around their standing instructions:
/// Claude Code's `<system-reminder>` blocks and the "Contents of
/// …/CLAUDE.md" it quotes in them, Codex's "# AGENTS.md instructions for
/// …" and older `<user_instructions>` / `<environment_context>` messages,
/// OpenCode's "Instructions from: …/AGENTS.md", and Gemini CLI's
/// "--- Context from: …/GEMINI.md ---" blocks (any context file name it is
/// configured with) and its session context ("This is the Gemini CLI. We
/// are setting up the context for our chat.", bare or in
/// `<session_context>`).
pub const DEFAULT_PINS: [&str; 8] = [
    "<system-reminder>",
    r"Contents of [^\n]*(CLAUDE|AGENTS)(\.local)?\.md",
    r"# AGENTS\.md instructions",
    "<user_instructions>",
    "<environment_context>",
    r"Instructions from: [^\n]*\.md",
    r"--- Context from: [^\n]+ ---",
    r"This is the Gemini CLI\. We are setting up the context",
];

/// A list of regular expressions and their compiled set. Equal when their
/// sources are equal; serialized as the sources.
#[derive(Clone)]
pub struct Patterns {
    // Shared: a policy is resolved per request, and cloning its patterns
    // is then two reference counts, not a string each.
    sources: Arc<[String]>,
    set: Arc<RegexSet>,
}

static DEFAULT: LazyLock<Patterns> = LazyLock::new(|| {
    Patterns::new(DEFAULT_PINS.iter().map(|s| s.to_string()).collect()).unwrap_or_else(|_| {
        // The defaults are literals checked by a test; never reached.
        Patterns::empty()
    })
});

impl Patterns {
    /// Compiles `sources`; the error names the pattern that failed.
    pub fn new(sources: Vec<String>) -> Result<Self, String> {
        let set = RegexSet::new(&sources).map_err(|e| format!("invalid pin pattern: {e}"))?;
        Ok(Self {
            sources: sources.into(),
            set: Arc::new(set),
        })
    }

    /// No pattern: nothing is pinned.
    pub fn empty() -> Self {
        Self {
            sources: Arc::new([]),
            set: Arc::new(RegexSet::empty()),
        }
    }

    /// The agents' markers ([`DEFAULT_PINS`]), compiled once per process.
    pub fn defaults() -> Self {
        DEFAULT.clone()
    }

    /// Whether any pattern matches `text`.
    pub fn is_match(&self, text: &str) -> bool {
        !self.sources.is_empty() && self.set.is_match(text)
    }

    /// The patterns as configured.
    pub fn sources(&self) -> &[String] {
        &self.sources
    }
}

impl std::fmt::Debug for Patterns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.sources.iter()).finish()
    }
}

impl PartialEq for Patterns {
    fn eq(&self, other: &Self) -> bool {
        self.sources == other.sources
    }
}

impl Serialize for Patterns {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.sources.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Patterns {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::new(Vec::<String>::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_compile_and_match_the_agents_markers() {
        let p = Patterns::new(DEFAULT_PINS.iter().map(|s| s.to_string()).collect()).unwrap();
        assert_eq!(Patterns::defaults(), p);
        for text in [
            "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# claudeMd\nContents of /repo/CLAUDE.md (project instructions, checked into the codebase):\n\nUse pnpm.\n</system-reminder>",
            "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\nRun cargo fmt.\n</INSTRUCTIONS>",
            "<user_instructions>\nBe terse.\n</user_instructions>",
            "Instructions from: /repo/AGENTS.md\nUse bun.",
            "--- Context from: ../../.gemini/GEMINI.md ---\nAnswer in Japanese.\n--- End of Context from: ../../.gemini/GEMINI.md ---",
            "--- Context from: AGENTS.md ---\nUse uv.\n--- End of Context from: AGENTS.md ---",
            "<session_context>\nThis is the Gemini CLI. We are setting up the context for our chat.\nToday's date is Friday.\n</session_context>",
            "This is the Gemini CLI. We are setting up the context for our chat.\nMy operating system is: linux",
        ] {
            assert!(p.is_match(text), "{text}");
        }
        assert!(!p.is_match("please fix the failing test in src/lib.rs"));
        assert!(!p.is_match("--- Context from: ---"));
        assert!(!Patterns::empty().is_match("<system-reminder>"));
    }

    #[test]
    fn a_bad_pattern_is_named() {
        let e = Patterns::new(vec!["(unclosed".into()]).unwrap_err();
        assert!(e.contains("invalid pin pattern"), "{e}");
    }
}
