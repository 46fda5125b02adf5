//! The results of estimation: [`Estimate`] and cache statistics.

/// The estimate field (in chat-completions names, never forwarded) in
/// which an API's decoder puts a window the request sets for itself
/// (Ollama's `options.num_ctx`): the request is planned against it
/// instead of the model's.
pub const REQUEST_WINDOW: &str = "foldgate_request_window";

/// A whole request's token estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Tokens of each message, in order, scaled by the model's `token_scale`
    /// but *not* calibrated: sum a subset and pass it to
    /// [`Estimate::calibrated`] to estimate a view of the conversation.
    pub messages: Vec<u32>,
    /// Reply priming plus tool/function definitions and a JSON-schema
    /// `response_format`, scaled, not calibrated.
    pub overhead: u32,
    /// `messages` summed plus `overhead`: the figure to pass to
    /// [`super::TokenCounter::observe_usage`] when this request went upstream as is.
    pub raw_input_tokens: u32,
    /// The calibration factor applied to `input_tokens`.
    pub factor: f64,
    /// The prompt's estimated tokens: `raw_input_tokens × factor`, rounded up.
    pub input_tokens: u32,
    /// Tokens kept free for the completion: `max_completion_tokens`, else
    /// `max_tokens`, else [`crate::config::default_reserve`], capped by the model's
    /// `max_output_tokens` when known. The proxy plans with exactly this.
    pub output_reserve: u32,
    /// The model's context window (the request's own when it sets one);
    /// [`super::UNKNOWN_WINDOW`] when not known.
    pub context_window: u32,
    /// Whether `context_window` is known: from config, the provider, a
    /// context-length error, the built-in table, the request itself or
    /// `tokens.default_context_window`. A request whose window is not
    /// known is forwarded unfolded (no trigger can be judged).
    pub window_known: bool,
}

impl Estimate {
    /// `raw` uncalibrated tokens (a sum of `messages` plus `overhead`) with
    /// this estimate's calibration applied.
    pub fn calibrated(&self, raw: u64) -> u32 {
        apply(raw, self.factor)
    }
}

/// Hit and miss counts of the per-message cache, since start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that tokenized.
    pub misses: u64,
}

/// `raw × factor`, rounded up so that scaling never hides a token.
pub(crate) fn apply(raw: u64, factor: f64) -> u32 {
    if factor == 1.0 {
        return saturate(raw);
    }
    let scaled = (raw as f64 * factor).ceil();
    if scaled >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        scaled as u32
    }
}

pub(crate) fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
