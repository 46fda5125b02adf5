//! Built-in context windows and output limits of well-known models.
//!
//! Patterns are lowercase globs ([`crate::glob`]) matched against the model
//! name lowercased and stripped of any router namespace (`anthropic/`,
//! `meta-llama/`); the most specific match wins. Leading `*` patterns catch
//! vendor spellings (`Meta-Llama-3.1-8B-Instruct`, Bedrock's
//! `anthropic.claude-3-5-sonnet-…`), trailing `*` catch dates and Ollama tags
//! (`llama3.1:8b`). Where a family ships with several windows the table
//! takes the one common providers serve by default, erring small: a window
//! too small folds early, one too large lets requests overflow.
//!
//! Besides the models themselves the table holds *families*: a generic
//! pattern per vendor line (`gpt-6*`, `o4*`, `*claude*`, `*gemini*`,
//! `*grok*`, `*qwen*`, …) whose window every current member has, so a new
//! name in a known family gets its family's window rather than none. A
//! specific entry always wins over its family (it has more literal
//! characters, see [`built_in`]).

use crate::glob;

/// Where a model's context window came from, in order of precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitSource {
    /// A `[models."glob"]` entry with `context_window`.
    Config,
    /// Read from the provider at start-up: its `/models` listing, llama.cpp's
    /// `/props`, Ollama's `/api/show`, a probe ([`super::TokenCounter::record_window`]).
    Discovered,
    /// From an upstream's context-length error, kept with the fold states.
    Learned,
    /// foldgate's built-in table of well-known models.
    BuiltIn,
    /// `tokens.default_context_window` (set): nothing named the model.
    Default,
    /// Nothing named the model and `tokens.default_context_window` is
    /// unset: the window is not known, so no proactive fold is made (the
    /// window is [`UNKNOWN_WINDOW`]) until the upstream's first
    /// context-length error names it.
    Unknown,
}

/// The `context_window` of a model whose window is not known
/// ([`LimitSource::Unknown`]): so large that no token trigger fires. Never
/// shown as a number; [`ModelLimits::known`] tells it apart.
pub const UNKNOWN_WINDOW: u32 = u32::MAX;

impl LimitSource {
    /// Lowercase label for reports and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Config => "config",
            Self::Discovered => "discovered",
            Self::Learned => "learned",
            Self::BuiltIn => "built-in",
            Self::Default => "default",
            Self::Unknown => "unknown",
        }
    }
}

/// A model's token limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelLimits {
    /// Prompt plus completion, in tokens.
    pub context_window: u32,
    /// Largest completion, when configured or built in.
    pub max_output_tokens: Option<u32>,
    /// Where `context_window` came from.
    pub source: LimitSource,
}

impl ModelLimits {
    /// Whether the window is known (anything but [`LimitSource::Unknown`]).
    pub fn known(&self) -> bool {
        self.source != LimitSource::Unknown
    }
}

/// (pattern, context window, largest completion when published).
type Entry = (&'static str, u32, Option<u32>);

const K128: u32 = 128_000;
const K131: u32 = 131_072;
const K200: u32 = 200_000;
const M1: u32 = 1_048_576;

/// The table. Keep one family per block and the most generic pattern first.
pub(crate) const BUILT_IN: &[Entry] = &[
    // OpenAI
    ("gpt-4o*", K128, Some(16_384)),
    ("chatgpt-4o*", K128, Some(16_384)),
    ("gpt-4o-mini*", K128, Some(16_384)),
    ("gpt-4.1*", 1_047_576, Some(32_768)),
    ("gpt-4.5*", K128, Some(16_384)),
    ("gpt-5*", 400_000, Some(128_000)),
    ("gpt-5-chat*", K128, Some(16_384)),
    ("gpt-5.?-chat*", K128, Some(16_384)),
    // The generation after gpt-5: its family's window until one is published.
    ("gpt-6*", 400_000, Some(128_000)),
    ("gpt-oss*", K131, Some(K131)),
    ("o1*", K200, Some(100_000)),
    ("o1-mini*", K128, Some(65_536)),
    ("o1-preview*", K128, Some(32_768)),
    ("o3*", K200, Some(100_000)),
    ("o4*", K200, Some(100_000)),
    ("o4-mini*", K200, Some(100_000)),
    ("codex-mini*", K200, Some(100_000)),
    ("gpt-4*", 8_192, Some(8_192)),
    ("gpt-4-32k*", 32_768, Some(32_768)),
    ("gpt-4-turbo*", K128, Some(4_096)),
    ("gpt-4-*-preview", K128, Some(4_096)),
    ("gpt-3.5-turbo*", 16_385, Some(4_096)),
    ("gpt-35-turbo*", 16_385, Some(4_096)),
    ("gpt-3.5-turbo-instruct*", 4_096, Some(4_096)),
    // Anthropic (dashes in first-party ids, dots on OpenRouter)
    ("*claude*", K200, None),
    ("*claude-3-opus*", K200, Some(4_096)),
    ("*claude-3-sonnet*", K200, Some(4_096)),
    ("*claude-3-haiku*", K200, Some(4_096)),
    ("*claude-3-5-*", K200, Some(8_192)),
    ("*claude-3.5-*", K200, Some(8_192)),
    ("*claude-3-7-*", K200, Some(64_000)),
    ("*claude-3.7-*", K200, Some(64_000)),
    ("*claude-sonnet-4*", K200, Some(64_000)),
    ("*claude-haiku-4*", K200, Some(64_000)),
    ("*claude-opus-4*", K200, Some(32_000)),
    ("*claude-opus-4-5*", K200, Some(64_000)),
    ("*claude-opus-4.5*", K200, Some(64_000)),
    // Google
    ("*gemini*", M1, Some(8_192)),
    ("*gemini-1.0*", 32_760, Some(8_192)),
    ("*gemini-pro", 32_760, Some(8_192)),
    ("*gemini-1.5-pro*", 2_097_152, Some(8_192)),
    ("*gemini-1.5-flash*", M1, Some(8_192)),
    ("*gemini-2.0*", M1, Some(8_192)),
    ("*gemini-2.5*", M1, Some(65_536)),
    ("*gemini-3*", M1, Some(65_536)),
    ("*gemma2*", 8_192, None),
    ("*gemma-2*", 8_192, None),
    ("*gemma3*", K131, None),
    ("*gemma-3*", K131, None),
    // Meta
    ("*llama3*", 8_192, None),
    ("*llama-3*", 8_192, None),
    ("*llama3.1*", K131, None),
    ("*llama-3.1*", K131, None),
    ("*llama3.2*", K131, None),
    ("*llama-3.2*", K131, None),
    ("*llama3.3*", K131, None),
    ("*llama-3.3*", K131, None),
    // Llama 4 advertises up to 10M, but providers commonly serve far less.
    ("*llama4*", K131, None),
    ("*llama-4*", K131, None),
    // Qwen: open weights ship 32k (128k only with YaRN enabled).
    ("*qwen*", 32_768, None),
    ("*qwen2.5*", 32_768, Some(8_192)),
    ("*qwen-2.5*", 32_768, Some(8_192)),
    ("*qwen2.5*128k*", K131, Some(8_192)),
    ("*qwen2.5-turbo*", 1_000_000, Some(8_192)),
    ("*qwen-turbo*", 1_000_000, Some(8_192)),
    ("*qwen-plus*", K131, Some(8_192)),
    ("*qwen-max*", 32_768, Some(8_192)),
    ("*qwen3*", 40_960, None),
    ("*qwen3*2507*", 262_144, None),
    ("*qwen3-coder*", 262_144, None),
    // Mistral
    ("*mistral*", 32_768, None),
    ("*mistral-large*", K131, None),
    ("*mistral-medium*", K131, None),
    ("*mistral-small*", 32_768, None),
    ("*mistral-nemo*", K128, None),
    ("*ministral*", K128, None),
    ("*pixtral*", K128, None),
    ("*codestral*", 256_000, None),
    ("*mixtral*", 32_768, None),
    ("*mixtral-8x22b*", 65_536, None),
    // DeepSeek: the first-party API ids served 64k for most of their life;
    // the open weights are 128k.
    ("deepseek-chat*", 65_536, Some(8_192)),
    ("deepseek-reasoner*", 65_536, Some(32_768)),
    ("*deepseek-v3*", K128, None),
    ("*deepseek-r1*", K128, None),
    // xAI: Grok 3 serves 131k, Grok 4 and the code models 256k.
    ("*grok*", K131, None),
    ("*grok-4*", 256_000, None),
    ("*grok-code*", 256_000, None),
    // Moonshot, Zhipu: the first releases' windows (later ones are larger).
    ("*kimi*", K131, None),
    ("*glm-4*", K128, None),
    ("*glm-4.6*", K200, None),
    ("*devstral*", K128, None),
    // Others
    ("*command-r*", K128, Some(4_096)),
    ("*phi-3*", 4_096, None),
    ("*phi3*", 4_096, None),
    ("*phi-4*", 16_384, None),
    ("*phi4*", 16_384, None),
];

/// The most specific built-in entry for `base` (lowercase, no namespace):
/// its context window and output limit.
///
/// "Most specific" here is the pattern with the most literal characters:
/// nearly every pattern is `*family*`, so counting wildcards first (as
/// [`glob::specificity`] does for config keys) would not tell
/// `*qwen2.5*128k*` from `*qwen2.5*` the right way round.
pub(crate) fn built_in(base: &str) -> Option<(u32, Option<u32>)> {
    BUILT_IN
        .iter()
        .filter(|e| glob::matches(e.0, base))
        .max_by_key(|e| {
            let wildcards = e.0.bytes().filter(|&c| c == b'*' || c == b'?').count();
            (e.0.len() - wildcards, std::cmp::Reverse(wildcards))
        })
        .map(|e| (e.1, e.2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::encoding::base_name;

    fn window(model: &str) -> Option<u32> {
        built_in(&base_name(model)).map(|e| e.0)
    }

    #[test]
    fn patterns_are_lowercase_and_unique() {
        let mut seen = std::collections::HashSet::new();
        for (p, w, _) in BUILT_IN {
            assert_eq!(*p, p.to_ascii_lowercase());
            assert!(seen.insert(*p), "duplicate {p}");
            assert!(*w >= 4_096);
        }
    }

    #[test]
    fn openai() {
        assert_eq!(built_in("gpt-4o"), Some((128_000, Some(16_384))));
        assert_eq!(window("gpt-4o-2024-08-06"), Some(128_000));
        assert_eq!(window("openai/gpt-4o-mini"), Some(128_000));
        assert_eq!(built_in("gpt-4.1-mini"), Some((1_047_576, Some(32_768))));
        assert_eq!(built_in("gpt-5-mini"), Some((400_000, Some(128_000))));
        assert_eq!(window("o3-mini"), Some(200_000));
        assert_eq!(window("o4-mini"), Some(200_000));
        assert_eq!(window("gpt-4-turbo-2024-04-09"), Some(128_000));
        assert_eq!(window("gpt-4-0125-preview"), Some(128_000));
        assert_eq!(window("gpt-4"), Some(8_192));
        assert_eq!(window("gpt-4-0613"), Some(8_192));
        assert_eq!(window("gpt-3.5-turbo"), Some(16_385));
    }

    #[test]
    fn other_vendors() {
        assert_eq!(window("claude-3-5-sonnet-20241022"), Some(200_000));
        assert_eq!(
            built_in("claude-3.7-sonnet").and_then(|e| e.1),
            Some(64_000)
        );
        assert_eq!(window("anthropic/claude-sonnet-4"), Some(200_000));
        assert_eq!(
            window("us.anthropic.claude-3-haiku-20240307-v1:0"),
            Some(200_000)
        );
        assert_eq!(window("gemini-1.5-pro-002"), Some(2_097_152));
        assert_eq!(window("google/gemini-2.5-flash"), Some(1_048_576));
        assert_eq!(window("llama3.1:8b"), Some(131_072));
        assert_eq!(
            window("meta-llama/Meta-Llama-3.1-70B-Instruct"),
            Some(131_072)
        );
        assert_eq!(window("llama3:8b"), Some(8_192));
        assert_eq!(window("meta-llama/Meta-Llama-3-8B-Instruct"), Some(8_192));
        assert_eq!(window("qwen2.5:7b"), Some(32_768));
        assert_eq!(window("Qwen/Qwen2.5-7B-Instruct-128K"), Some(131_072));
        assert_eq!(window("qwen3:8b"), Some(40_960));
        assert_eq!(window("mixtral:8x7b"), Some(32_768));
        assert_eq!(window("mistralai/mistral-large-2411"), Some(131_072));
        assert_eq!(window("deepseek-chat"), Some(65_536));
        assert_eq!(window("deepseek/deepseek-r1"), Some(128_000));
        assert_eq!(window("deepseek-r1:7b"), Some(128_000));
    }

    #[test]
    fn families_catch_new_names_and_specific_entries_win() {
        // New names in known families.
        assert_eq!(built_in("gpt-6.2-sol"), Some((400_000, Some(128_000))));
        assert_eq!(window("gpt-5.2-codex"), Some(400_000));
        assert_eq!(window("gpt-5.1-chat-latest"), Some(128_000));
        assert_eq!(window("o4-preview"), Some(200_000));
        assert_eq!(window("o3-pro-2026-01-01"), Some(200_000));
        assert_eq!(window("codex-mini-latest"), Some(200_000));
        assert_eq!(window("claude-zeta-9"), Some(200_000));
        assert_eq!(window("anthropic/claude-opus-5.1"), Some(200_000));
        assert_eq!(window("gemini-3-pro-preview"), Some(1_048_576));
        assert_eq!(window("google/gemini-9-ultra"), Some(1_048_576));
        assert_eq!(window("x-ai/grok-4-fast"), Some(256_000));
        assert_eq!(window("grok-3-mini"), Some(131_072));
        assert_eq!(window("moonshotai/kimi-k2-instruct"), Some(131_072));
        assert_eq!(window("z-ai/glm-4.6"), Some(200_000));
        assert_eq!(window("qwq-32b"), None);
        assert_eq!(window("Qwen/Qwen-7B-Chat"), Some(32_768));
        // Specific entries still beat their family.
        assert_eq!(window("o4-mini"), Some(200_000));
        assert_eq!(window("gpt-5-chat-latest"), Some(128_000));
        assert_eq!(window("qwen3-coder:30b"), Some(262_144));
        assert_eq!(window("gemini-1.5-pro"), Some(2_097_152));
        assert_eq!(window("gpt-4"), Some(8_192));
        assert_eq!(
            built_in("claude-3-opus-20240229").and_then(|e| e.1),
            Some(4_096)
        );
    }

    #[test]
    fn unknown() {
        assert_eq!(window("my-finetune"), None);
        assert_eq!(window("sol-large-2"), None);
    }
}
