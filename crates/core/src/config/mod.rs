//! Configuration: figment merges built-in defaults < TOML file < environment
//! (`FOLDGATE_` prefix, `__` for nesting), then [`Config::validate`] checks
//! what types cannot.

mod archive;
mod compress;
mod describe;
mod pins;
mod policy;
mod redis_url;
mod secret;
mod sections;
mod telemetry;

pub use archive::{ArchiveConfig, Recall, RecallMode};
pub use compress::{Compress, CompressOverrides, resolve as resolve_compress};
pub use describe::read_key;
pub use pins::{DEFAULT_PINS, Patterns};
pub use policy::{Mode, Policy, PolicyOverrides, resolve as resolve_policy};
pub use redis_url::{CLUSTER_SCHEME, RedisTarget, SENTINEL_SCHEME};
pub use secret::{Secret, masked_url};
pub use sections::*;
pub use telemetry::{OtlpProtocol, TelemetryConfig};

use crate::glob;
use figment::Figment;
use figment::error::Kind;
use figment::providers::{Env, Format, Toml};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The whole configuration. Unknown keys anywhere are an error.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The listener.
    pub server: ServerConfig,
    /// Upstream APIs by name. Empty means one `openai` provider at
    /// `https://api.openai.com/v1` taking every model.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Policy defaults for every model.
    pub policy: PolicyOverrides,
    /// Per-model windows and policy overrides, by glob.
    pub models: BTreeMap<String, ModelConfig>,
    /// The summarizer call.
    pub summarizer: SummarizerConfig,
    /// How the summary is placed in the view.
    pub summary: SummaryConfig,
    /// Conversation keys.
    pub conversation: ConversationConfig,
    /// Token estimation.
    pub tokens: TokensConfig,
    /// Fold state storage.
    pub state: StateConfig,
    /// The archive of folded messages.
    pub archive: ArchiveConfig,
    /// Older-turn compression defaults for every model.
    pub compress: CompressOverrides,
    /// Log format.
    pub log: LogConfig,
    /// OpenTelemetry traces over OTLP; off unless an endpoint is set.
    pub telemetry: TelemetryConfig,
    /// The file this configuration was read from (`None`: built-in
    /// defaults and environment only). Not a key.
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// A configuration that could not be loaded or is invalid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Parsing or type errors; the message names the key and the file.
    #[error("{}", load_message(.0))]
    Load(Box<figment::Error>),
    /// A value that parses but makes no sense.
    #[error("invalid configuration{}: {message}", source_suffix(.file))]
    Invalid {
        message: String,
        file: Option<PathBuf>,
    },
}

/// figment's errors, one per line, each naming its key as the user writes
/// it (`policy.preserve_recnt`: figment's own message prefixes its
/// profile, `default.`) and the file or environment it came from.
fn load_message(error: &figment::Error) -> String {
    let lines: Vec<String> = (*error)
        .clone()
        .into_iter()
        .map(|e| {
            let key = e.path.join(".");
            let (mut line, expected) = match &e.kind {
                // figment quotes the list in backticks inside backticks.
                Kind::UnknownField(_, expected) => (format!("unknown key \"{key}\""), *expected),
                Kind::UnknownVariant(found, expected) => (
                    format!("unknown value \"{found}\" for key \"{key}\""),
                    *expected,
                ),
                kind if key.is_empty() => (kind.to_string(), &[][..]),
                kind => (format!("{kind} for key \"{key}\""), &[][..]),
            };
            match e.metadata.as_ref().map(|md| (&md.source, &md.name)) {
                // The path as given: figment's own display makes it relative
                // to the working directory when that is shorter.
                Some((Some(source), name)) => {
                    let shown = source
                        .file_path()
                        .map_or_else(|| source.to_string(), |p| p.display().to_string());
                    line.push_str(&format!(" in {name} {shown}"));
                }
                Some((None, name)) => line.push_str(&format!(" in {name}")),
                None => {}
            }
            match expected {
                [] => {}
                [one] => line.push_str(&format!("; expected {one}")),
                many => line.push_str(&format!("; expected one of: {}", many.join(", "))),
            }
            line
        })
        .collect();
    lines.join("\n")
}

fn source_suffix(source: &Option<PathBuf>) -> String {
    source
        .as_ref()
        .map(|p| format!(" in {}", p.display()))
        .unwrap_or_default()
}

/// The OpenTelemetry variables foldgate reads, and the keys they set
/// (a file's or `FOLDGATE_TELEMETRY__*` value wins).
const OTEL_VARS: [&str; 3] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_SERVICE_NAME",
];
const OTEL_KEYS: [&str; 3] = [
    "telemetry.endpoint",
    "telemetry.protocol",
    "telemetry.service_name",
];

/// The file used when no `--config` is given and `./config.toml` exists.
pub const DEFAULT_PATH: &str = "config.toml";

impl Config {
    /// Loads defaults, then `path` (or `./config.toml` when present), then
    /// `FOLDGATE_*` environment variables, and validates the result.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let file = match path {
            Some(p) => Some(p.to_path_buf()),
            None => Some(PathBuf::from(DEFAULT_PATH)).filter(|p| p.exists()),
        };
        // The OpenTelemetry SDKs' standard variables, below the file.
        let mut figment = Figment::new().merge(Env::raw().only(&OTEL_VARS).map(|var| {
            let key = OTEL_VARS
                .iter()
                .zip(OTEL_KEYS)
                .find(|(name, _)| var.as_str().eq_ignore_ascii_case(name))
                .map_or("", |(_, key)| key);
            key.into()
        }));
        if let Some(file) = &file {
            // `Toml::file` silently skips a missing file; a named one must exist.
            if !file.exists() {
                return Err(ConfigError::Invalid {
                    message: "file not found".into(),
                    file: Some(file.clone()),
                });
            }
            figment = figment.merge(Toml::file(file));
        }
        figment = figment.merge(
            Env::prefixed("FOLDGATE_")
                .filter(|k| !k.as_str().eq_ignore_ascii_case("log"))
                .split("__"),
        );
        let mut config: Config = figment
            .extract()
            .map_err(|e| ConfigError::Load(Box::new(e)))?;
        config.finish().map_err(|message| ConfigError::Invalid {
            message,
            file: file.clone(),
        })?;
        config.source = file;
        Ok(config)
    }

    /// Parses a TOML string alone (no environment), for tests and examples.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let mut config: Config = Figment::from(Toml::string(text))
            .extract()
            .map_err(|e| ConfigError::Load(Box::new(e)))?;
        config.finish().map_err(|message| ConfigError::Invalid {
            message,
            file: None,
        })?;
        Ok(config)
    }

    /// Fills implied values, then validates.
    fn finish(&mut self) -> Result<(), String> {
        if self.providers.is_empty() {
            self.providers.insert(
                "openai".into(),
                ProviderConfig {
                    base_url: "https://api.openai.com/v1".into(),
                    models: vec!["*".into()],
                    api_key_env: None,
                    api: ProviderApi::default(),
                    ca_file: None,
                    aws: None,
                    policy: PolicyOverrides::default(),
                    compress: CompressOverrides::default(),
                },
            );
        }
        if let Some(var) = &self.server.api_keys_env {
            let keys = std::env::var(var).map_err(|_| {
                format!("server.api_keys_env: environment variable {var} is not set")
            })?;
            self.server.api_keys.extend(
                keys.split(',')
                    .map(str::trim)
                    .filter(|k| !k.is_empty())
                    .map(Secret::new),
            );
        }
        self.validate()
    }

    /// Checks what the types cannot; the message names the offending key.
    pub fn validate(&self) -> Result<(), String> {
        let s = &self.server;
        if s.tls_cert.is_some() != s.tls_key.is_some() {
            return Err("server.tls_cert and server.tls_key must be set together".into());
        }
        if s.max_body_bytes == 0 {
            return Err("server.max_body_bytes must be above 0".into());
        }
        for (name, p) in &self.providers {
            let uri: http::Uri = p
                .base_url
                .parse()
                .map_err(|e| format!("providers.{name}.base_url: {e}"))?;
            if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
                return Err(format!(
                    "providers.{name}.base_url must be an absolute http(s) URL, got {:?}",
                    p.base_url
                ));
            }
            if p.models.is_empty() {
                return Err(format!(
                    "providers.{name}.models must name at least one pattern"
                ));
            }
            p.policy.validate(&format!("providers.{name}.policy"))?;
            p.compress.validate(&format!("providers.{name}.compress"))?;
        }
        if let Some(name) = &self.summarizer.provider {
            if !self.providers.contains_key(name) {
                return Err(format!("summarizer.provider: no provider named {name:?}"));
            }
        }
        self.policy.validate("policy")?;
        self.compress.validate("compress")?;
        self.state.validate()?;
        self.telemetry.validate()?;
        self.archive.validate(self.state.ttl)?;
        self.archive.validate_url(&self.state)?;
        if self.tokens.default_context_window == Some(0) {
            return Err("tokens.default_context_window must be above 0 (or unset)".into());
        }
        for (pattern, m) in &self.models {
            m.policy.validate(&format!("models.\"{pattern}\""))?;
            m.compress
                .validate(&format!("models.\"{pattern}\".compress"))?;
            if m.context_window == Some(0) {
                return Err(format!(
                    "models.\"{pattern}\".context_window must be above 0"
                ));
            }
            if let Some(scale) = m.token_scale {
                if !(scale > 0.0 && scale < 10.0) {
                    return Err(format!(
                        "models.\"{pattern}\".token_scale must be in (0, 10)"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The provider a model routes to: the first provider (in name order)
    /// naming it by a pattern other than `*`, else the provider listing
    /// `*`; `None` when no provider lists the model (it is not forwarded to
    /// a provider that does not serve it). Without a model, the default
    /// provider.
    pub fn provider_for(&self, model: Option<&str>) -> Option<(&str, &ProviderConfig)> {
        match model {
            Some(model) => self.provider_among(|_| true, model),
            None => self.default_provider(),
        }
    }

    /// The provider a model routes to among those set to `api` (see
    /// [`Self::provider_for`]): a request is never sent to a provider of
    /// another API.
    /// Without a model (a request naming none), the first of them listing
    /// `*`, else the first by name.
    pub fn provider_for_api(&self, api: &str, model: &str) -> Option<(&str, &ProviderConfig)> {
        let speaks = |p: &ProviderConfig| p.api.0 == api;
        if !model.is_empty() {
            return self.provider_among(speaks, model);
        }
        let ours = || self.providers.iter().filter(|(_, p)| speaks(p));
        ours()
            .find(|(_, p)| p.models.iter().any(|m| m == "*"))
            .or_else(|| ours().next())
            .map(|(name, p)| (name.as_str(), p))
    }

    fn provider_among(
        &self,
        keep: impl Fn(&ProviderConfig) -> bool,
        model: &str,
    ) -> Option<(&str, &ProviderConfig)> {
        let listed = |wildcard: bool| {
            self.providers.iter().find(|(_, p)| {
                keep(p)
                    && p.models
                        .iter()
                        .any(|pat| (pat == "*") == wildcard && glob::matches(pat, model))
            })
        };
        listed(false)
            .or_else(|| listed(true))
            .map(|(name, p)| (name.as_str(), p))
    }

    /// The provider whose patterns include `*`, else the first by name.
    pub fn default_provider(&self) -> Option<(&str, &ProviderConfig)> {
        self.providers
            .iter()
            .find(|(_, p)| p.models.iter().any(|m| m == "*"))
            .or_else(|| self.providers.iter().next())
            .map(|(name, p)| (name.as_str(), p))
    }

    /// How `model`'s conversations recall archived messages:
    /// `archive.recall` with the model's `tools` key.
    pub fn recall_for(&self, model: &str) -> Recall {
        let calls_tools = self
            .model_config(model)
            .and_then(|m| m.tools)
            .unwrap_or(true);
        self.archive.recall_for(calls_tools)
    }

    /// The most specific `[models."glob"]` entry matching `model`.
    pub fn model_config(&self, model: &str) -> Option<&ModelConfig> {
        glob::most_specific(self.models.keys().map(String::as_str), model)
            .and_then(|pattern| self.models.get(pattern))
    }

    /// Configured models whose window cannot hold a small pinned prompt, a
    /// minimal summary, `preserve_recent` short messages and the default
    /// output reserve under the reset target: folding cannot keep them
    /// within their window. One message per model pattern.
    pub fn small_window_warnings(&self) -> Vec<String> {
        /// A modest system prompt, a summary of a few lines, a short message.
        const PINNED: u64 = 200;
        const MIN_SUMMARY: u64 = 64;
        const MESSAGE: u64 = 40;
        self.models
            .iter()
            .filter_map(|(pattern, model)| {
                let window = u64::from(model.context_window?);
                let provider = self.provider_for(Some(pattern)).map_or("", |(n, _)| n);
                let policy = self.policy_for(provider, pattern);
                let reserve = u64::from(default_reserve(
                    self.tokens.default_output_reserve,
                    model.context_window?,
                ));
                let need = PINNED + MIN_SUMMARY + policy.preserve_recent as u64 * MESSAGE;
                let room = ((policy.reset_ratio * window as f64) as u64).min(window - reserve);
                (need > room).then(|| {
                    format!(
                        "models.\"{pattern}\": a {window}-token window leaves {room} tokens for a folded \
                         prompt (reset_ratio, {reserve} kept for the output), less than a {PINNED}-token \
                         system prompt, a {MIN_SUMMARY}-token summary and {} short recent messages need \
                         ({need}); lower preserve_recent or raise reset_ratio",
                        policy.preserve_recent
                    )
                })
            })
            .collect()
    }

    /// The resolved policy for `model` on `provider`.
    pub fn policy_for(&self, provider: &str, model: &str) -> Policy {
        resolve_policy(&self.levels(provider, model, &self.policy, |p| &p.policy, |m| &m.policy))
    }

    /// The resolved compression settings for `model` on `provider`:
    /// `[compress]`, then `[providers.NAME.compress]`, then
    /// `[models."glob".compress]`.
    pub fn compress_for(&self, provider: &str, model: &str) -> Compress {
        let levels = self.levels(
            provider,
            model,
            &self.compress,
            |p| &p.compress,
            |m| &m.compress,
        );
        resolve_compress(&levels)
    }

    /// The levels that set a group of knobs for `model` on `provider`,
    /// least specific first: the global section, the provider's, the
    /// model's (its most specific glob).
    fn levels<'c, T>(
        &'c self,
        provider: &str,
        model: &str,
        global: &'c T,
        of_provider: fn(&ProviderConfig) -> &T,
        of_model: fn(&ModelConfig) -> &T,
    ) -> Vec<&'c T> {
        let provider = self.providers.get(provider).map(of_provider);
        let model = self.model_config(model).map(of_model);
        [Some(global), provider, model]
            .into_iter()
            .flatten()
            .collect()
    }
}

#[cfg(test)]
mod tests;
