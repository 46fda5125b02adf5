//! Which BPE encoding a model's prompt is counted in, and counting text with it.

use bpe_openai::Tokenizer;

/// A tiktoken encoding foldgate counts with.
///
/// Models outside OpenAI's families are counted in o200k_base and then
/// multiplied by their `token_scale` (see [`super::TokenCounter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// gpt-4o, gpt-4.1, gpt-4.5, gpt-5, the o-series, and the fallback for
    /// every model that is not OpenAI's.
    O200kBase,
    /// gpt-4 (not 4o/4.1/4.5), gpt-3.5, text-embedding-3 and ada-002.
    Cl100kBase,
}

impl Encoding {
    /// The encoding of `model`, ignoring case and any router namespace
    /// (`openai/gpt-4o`, `azure/gpt-35-turbo`).
    pub fn for_model(model: &str) -> Self {
        Self::for_base_name(&base_name(model))
    }

    /// Like [`Encoding::for_model`] for a name already passed through [`base_name`].
    pub(crate) fn for_base_name(name: &str) -> Self {
        // Order matters: "gpt-4o"/"gpt-4.1"/"gpt-4.5" are o200k although "gpt-4" is cl100k.
        const O200K: [&str; 8] = [
            "gpt-4o",
            "chatgpt-4o",
            "gpt-4.1",
            "gpt-4.5",
            "gpt-5",
            "gpt-oss",
            "codex-",
            "computer-use",
        ];
        const CL100K: [&str; 5] = [
            "gpt-4",
            "gpt-3.5",
            "gpt-35",
            "text-embedding-3",
            "text-embedding-ada-002",
        ];
        if O200K.iter().any(|p| name.starts_with(p)) || is_o_series(name) {
            Self::O200kBase
        } else if CL100K.iter().any(|p| name.starts_with(p)) {
            Self::Cl100kBase
        } else {
            Self::O200kBase
        }
    }

    /// tiktoken's name for the encoding.
    pub fn name(self) -> &'static str {
        match self {
            Self::O200kBase => "o200k_base",
            Self::Cl100kBase => "cl100k_base",
        }
    }

    /// Tokens of `text`, with special-token strings counted as plain text
    /// (the API does the same for message content).
    ///
    /// Counted with bpe-openai, which gives the same count as tiktoken's
    /// `encode_ordinary(text).len()` several times faster (`cargo bench
    /// --bench tokens` checks both on a varied corpus).
    pub fn count(self, text: &str) -> u32 {
        if text.is_empty() {
            return 0;
        }
        u32::try_from(self.tokenizer().count(text)).unwrap_or(u32::MAX)
    }

    /// Every encoding foldgate counts in.
    pub const ALL: [Encoding; 2] = [Self::O200kBase, Self::Cl100kBase];

    /// Loads every tokenizer's tables now, so the first request does not
    /// pay for it (hundreds of milliseconds on a busy machine). Blocking:
    /// call it off the async workers.
    pub fn warm_up() {
        for encoding in Self::ALL {
            encoding.count("warm up");
        }
    }

    /// The shared tokenizer. bpe-openai deserializes each one once, on first
    /// use, from tables compiled into the binary.
    pub(crate) fn tokenizer(self) -> &'static Tokenizer {
        match self {
            Self::O200kBase => bpe_openai::o200k_base(),
            Self::Cl100kBase => bpe_openai::cl100k_base(),
        }
    }
}

/// `o1`, `o3-mini`, `o4-mini-high`, and later `oN` models.
fn is_o_series(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() >= 2 && b[0] == b'o' && b[1].is_ascii_digit()
}

/// `model` lowercased, without a router namespace (the part up to the last
/// `/`): `OpenAI/GPT-4o` → `gpt-4o`, `meta-llama/Llama-3.1-8B` → `llama-3.1-8b`.
pub(crate) fn base_name(model: &str) -> String {
    let tail = model.rsplit('/').next().unwrap_or(model);
    tail.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families() {
        use Encoding::*;
        for m in [
            "gpt-4o",
            "gpt-4o-mini",
            "chatgpt-4o-latest",
            "gpt-4.1-nano",
            "gpt-4.5-preview",
            "gpt-5",
            "gpt-5-mini",
            "o1",
            "o3-mini",
            "o4-mini",
            "openai/gpt-4o",
            "OpenAI/GPT-4O",
        ] {
            assert_eq!(Encoding::for_model(m), O200kBase, "{m}");
        }
        for m in [
            "gpt-4",
            "gpt-4-0613",
            "gpt-4-turbo",
            "gpt-3.5-turbo",
            "azure/gpt-35-turbo",
            "text-embedding-3-small",
        ] {
            assert_eq!(Encoding::for_model(m), Cl100kBase, "{m}");
        }
        for m in [
            "claude-3-5-sonnet",
            "llama3.1:8b",
            "omni-moderation-latest",
            "mistral",
        ] {
            assert_eq!(Encoding::for_model(m), O200kBase, "{m}");
        }
    }

    #[test]
    fn counts_match_tiktoken() {
        let texts = [
            "Hello, world! <|endoftext|> is plain text here.",
            "fn main() {\n    println!(\"{}\", 42);\n}\n\n\n   trailing   ",
            "I'M sure you'll see: 1234567 東京 🙂👍🏽 مرحبا Привет e\u{301}",
        ];
        for text in texts {
            for (encoding, tiktoken) in [
                (Encoding::O200kBase, tiktoken_rs::o200k_base_singleton()),
                (Encoding::Cl100kBase, tiktoken_rs::cl100k_base_singleton()),
            ] {
                let expect = tiktoken.encode_ordinary(text).len() as u32;
                assert_eq!(encoding.count(text), expect, "{encoding:?} {text:?}");
            }
        }
        assert_eq!(Encoding::Cl100kBase.count(""), 0);
        assert_eq!(Encoding::Cl100kBase.count("hello world"), 2);
    }

    #[test]
    fn base_names() {
        assert_eq!(base_name("OpenAI/GPT-4o"), "gpt-4o");
        assert_eq!(
            base_name("openrouter/anthropic/claude-3.5-sonnet"),
            "claude-3.5-sonnet"
        );
        assert_eq!(base_name("llama3.1:8b"), "llama3.1:8b");
    }
}
