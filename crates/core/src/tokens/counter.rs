//! [`TokenCounter`]: the shared estimator, with its count cache, the model
//! registry lookup and calibration.

use super::cache::{CountCache, Key};
use super::calibration::Calibrator;
use super::encoding::{Encoding, base_name};
use super::estimate::{CacheStats, Estimate, apply, saturate};
use super::hash::{hash_value, hash_values};
use super::message::{REPLY_PRIMING, Rules};
use super::registry::{self, LimitSource, ModelLimits, UNKNOWN_WINDOW};
use super::tools::definitions_tokens;
use super::windows::{KnownWindow, MissingWindow, Windows};
use crate::config::default_reserve;
use crate::config::{Config, ModelConfig, TokensConfig};
use crate::glob;
use crate::message::{MessageId, Role, makes_calls};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};

/// Bytes charged per cache entry against `tokens.cache_bytes`: the key and
/// value (64 bytes, the identity 16-byte aligned) with the hash table's
/// control byte and spare capacity.
const CACHE_ENTRY_BYTES: u64 = 88;
/// Unknown model names remembered for the once-per-model warning; names come
/// from clients, so the set is bounded and later unknown names go unwarned.
const MAX_WARNED: usize = 1024;

/// A model's built-in table entry: its window and output limit (`None`:
/// not in the table).
type BuiltIn = Option<(u32, Option<u32>)>;

/// Most model names whose built-in table entry is remembered.
const MAX_BUILT_IN_NAMES: usize = 4096;

/// What a cache entry counts: one message (by its structure, or by the
/// JSON text the client sent), or a request's tool definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Message,
    Definitions,
    RawMessage,
}

impl Kind {
    /// The cache key of a count in `encoding` of what `hash` identifies.
    fn key(self, encoding: Encoding, hash: u128) -> Key {
        let encoding = match encoding {
            Encoding::O200kBase => 0,
            Encoding::Cl100kBase => 1,
        };
        Key {
            hash,
            tag: (encoding << 2) | self as u8,
        }
    }
}

/// The token estimator: counts messages in each model's encoding, knows
/// model windows, and learns a per-model correction from upstream usage.
/// `Send + Sync`; share one behind an `Arc`.
pub struct TokenCounter {
    settings: TokensConfig,
    /// `[models."glob"]` entries, for windows, output limits and token scales.
    models: BTreeMap<String, ModelConfig>,
    /// Raw counts (and, for messages read as JSON text, their roles,
    /// whether they make tool calls, and identities) by encoding, kind and
    /// hash; `None` when `cache_bytes` is 0.
    cache: Option<CountCache<(u32, Role, bool, MessageId)>>,
    /// Built-in table lookups by model name (the table is scanned once per
    /// name), for the first [`MAX_BUILT_IN_NAMES`] names (later ones, which
    /// only a client inventing names reaches, are scanned each time); a
    /// plain map, since a cache's bookkeeping costs more than the scan it
    /// saves.
    built_ins: RwLock<HashMap<String, BuiltIn>>,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Windows read from providers or learned from their errors.
    windows: Windows,
    calibration: Calibrator,
    warned: Mutex<HashSet<String>>,
}

/// One engine message's count, role and identity, from [`RawUnits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawCount {
    /// Tokens, scaled by the model's `token_scale`, not calibrated.
    pub tokens: u32,
    /// Its role.
    pub role: Role,
    /// Whether it makes tool calls ([`crate::message::makes_calls`]).
    pub calls: bool,
    /// Its identity, as the codec that decodes it gives it
    /// ([`crate::message::unit_id`] of its items as values).
    pub id: MessageId,
}

/// Counts engine messages from the JSON text of their wire items, for
/// one model ([`TokenCounter::raw_units`]): a text already seen costs a
/// cache lookup; only a new one is parsed.
pub struct RawUnits<'c> {
    counter: &'c TokenCounter,
    model: &'c str,
    profile: Profile,
}

impl RawUnits<'_> {
    /// The count, role and identity of the engine message whose items'
    /// text hashes to `key`; `make` builds the message and its identity
    /// only when `key` is not cached. `None` when `make` cannot, or the
    /// message has no string `role`. Inlined: called once per message.
    #[inline]
    pub fn count(
        &self,
        key: u128,
        make: impl FnOnce() -> Option<(Value, MessageId)>,
    ) -> Option<RawCount> {
        let counter = self.counter;
        let key = Kind::RawMessage.key(self.profile.rules.encoding, key);
        let cached = counter.cache.as_ref().and_then(|c| c.get(&key));
        let (tokens, role, calls, id) = match cached {
            Some(found) => found,
            None => {
                let (message, id) = make()?;
                let role = Role::of(message.get("role")?.as_str()?);
                let unscaled = Profile {
                    scale: 1.0,
                    ..self.profile
                };
                let tokens = counter.scaled_message(&unscaled, &message);
                let found = (tokens, role, makes_calls(&message), id);
                if let Some(c) = &counter.cache {
                    c.insert(key, found);
                }
                found
            }
        };
        Some(RawCount {
            tokens: apply(u64::from(tokens), self.profile.scale),
            role,
            calls,
            id,
        })
    }

    /// [`TokenCounter::estimate_with`] for this counter's model, its
    /// profile not looked up a second time.
    pub fn estimate(&self, request: &Map<String, Value>, messages: Vec<u32>) -> Estimate {
        self.counter
            .estimate_as(&self.profile, self.model, request, messages)
    }
}

/// How one model is counted.
#[derive(Debug, Clone, Copy)]
struct Profile {
    rules: Rules,
    scale: f64,
}

impl TokenCounter {
    /// A counter for `config`'s `[tokens]` settings and `[models]` entries.
    /// A `tokens.cache_bytes` of 0 disables the count cache.
    pub fn new(config: &Config) -> Self {
        let entries = config.tokens.cache_bytes / CACHE_ENTRY_BYTES;
        let cache = (entries > 0).then(|| {
            let capacity = usize::try_from(entries).unwrap_or(usize::MAX);
            CountCache::new(capacity, config.tokens.cache_idle)
        });
        Self {
            settings: config.tokens.clone(),
            models: config.models.clone(),
            cache,
            built_ins: RwLock::default(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            windows: Windows::default(),
            calibration: Calibrator::default(),
            warned: Mutex::new(HashSet::new()),
        }
    }

    /// Tokens of one chat message in `model`'s encoding, as OpenAI counts it
    /// (see [`super::message`]), times the model's `token_scale`; not calibrated.
    pub fn message_tokens(&self, model: &str, message: &Value) -> u32 {
        self.scaled_message(&self.profile(model), message)
    }

    /// The built-in table's entry for `model`, memoized.
    fn built_in(&self, model: &str) -> BuiltIn {
        let names = self
            .built_ins
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = names.get(model) {
            return *found;
        }
        let full = names.len() >= MAX_BUILT_IN_NAMES;
        drop(names);
        let found = registry::built_in(&base_name(model));
        if !full {
            let mut names = self
                .built_ins
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            names.insert(model.to_string(), found);
        }
        found
    }

    /// A counter of engine messages given as the JSON text of the wire
    /// items they stand for, in `model`'s encoding ([`RawUnits`]).
    pub fn raw_units<'c>(&'c self, model: &'c str) -> RawUnits<'c> {
        RawUnits {
            counter: self,
            model,
            profile: self.profile(model),
        }
    }

    /// The whole-request estimate for `request`, a parsed chat-completions body.
    pub fn estimate(&self, model: &str, request: &Map<String, Value>) -> Estimate {
        let messages = match request.get("messages") {
            Some(Value::Array(items)) => items.as_slice(),
            _ => &[],
        };
        self.estimate_messages(model, messages, request)
    }

    /// The estimate for `messages` (chat-completions messages) with the
    /// top-level fields of `request` (whose own `messages` are not read).
    pub fn estimate_messages(
        &self,
        model: &str,
        messages: &[Value],
        request: &Map<String, Value>,
    ) -> Estimate {
        let profile = self.profile(model);
        let counts = messages
            .iter()
            .map(|m| self.scaled_message(&profile, m))
            .collect();
        self.estimate_with(model, request, counts)
    }

    /// The estimate for `request` (whose `messages` are not read) with the
    /// messages already counted (scaled, not calibrated).
    pub fn estimate_with(
        &self,
        model: &str,
        request: &Map<String, Value>,
        messages: Vec<u32>,
    ) -> Estimate {
        self.estimate_as(&self.profile(model), model, request, messages)
    }

    /// [`TokenCounter::estimate_with`] with `model`'s profile at hand.
    fn estimate_as(
        &self,
        profile: &Profile,
        model: &str,
        request: &Map<String, Value>,
        messages: Vec<u32>,
    ) -> Estimate {
        let encoding = profile.rules.encoding;
        let definitions = self.cached(
            || Kind::Definitions.key(encoding, definitions_hash(request)),
            || definitions_tokens(encoding, request),
        );
        let overhead = apply(u64::from(REPLY_PRIMING) + definitions, profile.scale);
        let raw = messages.iter().map(|&n| u64::from(n)).sum::<u64>() + u64::from(overhead);
        let factor = self.calibration_factor(model);
        let mut limits = self.limits(model);
        let mut window_known = limits.known();
        if let Some(window) = request_window(request) {
            limits.context_window = window;
            window_known = true;
        }
        Estimate {
            raw_input_tokens: saturate(raw),
            input_tokens: apply(raw, factor),
            factor,
            messages,
            overhead,
            output_reserve: self.output_reserve(request, &limits),
            context_window: limits.context_window,
            window_known,
        }
    }

    /// `model`'s limits. The window comes from, in order: the most specific
    /// `[models."glob"]` entry that sets `context_window`, a window read
    /// from the provider or learned from its error ([`TokenCounter::record_window`]),
    /// the built-in table (a model or its family), and
    /// `tokens.default_context_window` when set (warned about once per
    /// model); else it is not known ([`LimitSource::Unknown`], the window
    /// [`UNKNOWN_WINDOW`]). The output limit comes from config, else the
    /// built-in table.
    pub fn limits(&self, model: &str) -> ModelLimits {
        let limits = self.limits_quiet(model);
        if limits.source == LimitSource::Default {
            self.warn_unknown(model);
        }
        limits
    }

    /// [`TokenCounter::limits`] without the unknown-model warning (for reports).
    pub fn limits_quiet(&self, model: &str) -> ModelLimits {
        let built_in = self.built_in(model);
        let max_output_tokens = self
            .configured(model, |m| m.max_output_tokens)
            .or(built_in.and_then(|b| b.1));
        let (context_window, source) = if let Some(w) = self.configured(model, |m| m.context_window)
        {
            (w, LimitSource::Config)
        } else if let Some(found) = self.windows.get(model) {
            found
        } else if let Some((w, _)) = built_in {
            (w, LimitSource::BuiltIn)
        } else if let Some(w) = self.settings.default_context_window {
            (w, LimitSource::Default)
        } else {
            (UNKNOWN_WINDOW, LimitSource::Unknown)
        };
        ModelLimits {
            context_window,
            max_output_tokens,
            source,
        }
    }

    /// Records the upstream's `usage.prompt_tokens` (`actual`) for a request
    /// whose *uncalibrated* estimate was `estimated`
    /// ([`Estimate::raw_input_tokens`], or the raw sum for a folded view).
    /// No effect when `tokens.calibrate` is off.
    pub fn observe_usage(&self, model: &str, estimated: u32, actual_prompt_tokens: u32) {
        if self.settings.calibrate {
            self.calibration
                .observe(model, estimated, actual_prompt_tokens);
        }
    }

    /// Every calibrated model's current factor (for metrics).
    pub fn calibration_factors(&self) -> Vec<(String, f64)> {
        self.calibration.all()
    }

    /// The factor applied to `model`'s estimates: 1.0 before any usage was
    /// observed or when calibration is off; always within [0.5, 2.0].
    pub fn calibration_factor(&self, model: &str) -> f64 {
        if self.settings.calibrate {
            self.calibration.factor(model)
        } else {
            1.0
        }
    }

    /// Records `model`'s window as listed by its provider (see
    /// [`super::parse_models_listing`]). Ids are matched case-insensitively
    /// and in full, router namespace included.
    pub fn record_discovered(&self, model: &str, context_window: u32) {
        self.record_window(model, context_window, LimitSource::Discovered, "");
    }

    /// Records `model`'s window, read from its provider
    /// ([`LimitSource::Discovered`], `via` naming how) or learned from a
    /// context-length error ([`LimitSource::Learned`]). The latest word
    /// wins; a configured window still beats it.
    pub fn record_window(&self, model: &str, context_window: u32, source: LimitSource, via: &str) {
        self.windows.record(KnownWindow {
            model: model.to_owned(),
            context_window,
            source,
            via: via.to_owned(),
        });
    }

    /// Every window read from a provider or learned, by model id.
    pub fn known_windows(&self) -> Vec<KnownWindow> {
        self.windows.all()
    }

    /// Replaces the list of models without a known window (start-up's
    /// report, which has warned about each: they are not warned about
    /// again).
    pub fn set_missing_windows(&self, missing: Vec<MissingWindow>) {
        {
            let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
            for m in &missing {
                if warned.len() < MAX_WARNED {
                    warned.insert(m.model.clone());
                }
            }
        }
        self.windows.set_missing(missing);
    }

    /// Models without a known window: local providers' at start-up, and
    /// every model a request named whose window nothing names
    /// ([`TokenCounter::window_unknown`]), until a window is found.
    pub fn missing_windows(&self) -> Vec<MissingWindow> {
        self.windows.missing()
    }

    /// A request for `model` (routed to `provider`) goes upstream unfolded
    /// because its window is not known: the first time (per model) a WARN
    /// says so and the model joins [`TokenCounter::missing_windows`] (the
    /// dashboard and `GET /foldgate/windows` show it) until its window is
    /// recorded. Later calls for the same model cost a lock and a lookup.
    pub fn window_unknown(&self, provider: &str, model: &str) {
        let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        if warned.len() >= MAX_WARNED || !warned.insert(model.to_owned()) {
            return;
        }
        drop(warned);
        let missing = MissingWindow::new(provider, model);
        tracing::warn!(
            model,
            provider,
            "no context window known for model \"{model}\": its requests go upstream unfolded until the upstream's first context-length error names the window; set it with {}",
            missing.config
        );
        self.windows.add_missing(missing);
    }

    /// Hits and misses of the count cache.
    pub fn cache_stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    /// Entries in the count cache.
    pub fn cache_entry_count(&self) -> u64 {
        self.cache.as_ref().map_or(0, |c| c.len() as u64)
    }

    /// Bytes the count cache charges against `tokens.cache_bytes`.
    pub fn cache_bytes(&self) -> u64 {
        self.cache_entry_count() * CACHE_ENTRY_BYTES
    }

    /// The encoding `model` is counted in.
    pub fn encoding(&self, model: &str) -> Encoding {
        Encoding::for_model(model)
    }

    /// `model`'s token scale: the most specific `[models]` entry setting
    /// `token_scale`, else 1.0. No built-in scales: other vendors' ratios
    /// to o200k vary by language and content, and calibration learns them.
    pub fn token_scale(&self, model: &str) -> f64 {
        self.configured(model, |m| m.token_scale)
            .filter(|s| s.is_finite() && *s > 0.0)
            .unwrap_or(1.0)
    }

    fn profile(&self, model: &str) -> Profile {
        let rules = Rules {
            encoding: Encoding::for_model(model),
            image_low: self.settings.image_tokens_low,
            image_high: self.settings.image_tokens_high,
        };
        Profile {
            rules,
            scale: self.token_scale(model),
        }
    }

    fn scaled_message(&self, profile: &Profile, message: &Value) -> u32 {
        let raw = self.cached(
            || Kind::Message.key(profile.rules.encoding, hash_value(message)),
            || profile.rules.message(message),
        );
        apply(raw, profile.scale)
    }

    /// A raw count from the cache, else from `count` (then cached). The key
    /// is only hashed when there is a cache.
    fn cached(&self, key: impl FnOnce() -> Key, count: impl FnOnce() -> u64) -> u64 {
        let Some(cache) = &self.cache else {
            return count();
        };
        let key = key();
        if let Some((n, ..)) = cache.get(&key) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return u64::from(n);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let n = count();
        cache.insert(key, (saturate(n), Role::Other, false, 0));
        n
    }

    fn output_reserve(&self, request: &Map<String, Value>, limits: &ModelLimits) -> u32 {
        let asked = ["max_completion_tokens", "max_tokens"]
            .iter()
            .find_map(|k| request.get(*k).and_then(Value::as_u64))
            .map_or_else(
                || default_reserve(self.settings.default_output_reserve, limits.context_window),
                saturate,
            );
        limits.max_output_tokens.map_or(asked, |cap| asked.min(cap))
    }

    /// A field of the most specific `[models]` entry that sets it, so a
    /// policy-only entry for `gpt-4o-mini` does not hide `gpt-4o*`'s window.
    fn configured<T>(&self, model: &str, field: impl Fn(&ModelConfig) -> Option<T>) -> Option<T> {
        let keys = self
            .models
            .iter()
            .filter(|(_, m)| field(m).is_some())
            .map(|(k, _)| k.as_str());
        glob::most_specific(keys, model)
            .and_then(|k| self.models.get(k))
            .and_then(field)
    }

    fn warn_unknown(&self, model: &str) {
        let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        if warned.len() < MAX_WARNED && warned.insert(model.to_owned()) {
            tracing::warn!(
                model,
                context_window = self.settings.default_context_window,
                "unknown model; assuming tokens.default_context_window (set its [models] context_window)"
            );
        }
    }
}

/// Hash of everything [`definitions_tokens`] reads.
fn definitions_hash(request: &Map<String, Value>) -> u128 {
    hash_values(
        ["tools", "functions", "response_format"].map(|k| request.get(k).unwrap_or(&Value::Null)),
    )
}

/// The window a request sets for itself ([`super::REQUEST_WINDOW`] among
/// its estimate fields, put there by its API's decoder), when it sets a
/// positive one.
fn request_window(request: &Map<String, Value>) -> Option<u32> {
    let window = request.get(super::REQUEST_WINDOW)?.as_u64()?;
    u32::try_from(window).ok().filter(|&w| w > 0)
}
