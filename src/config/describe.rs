//! What a loaded configuration amounts to, in words: the start-up line
//! (which file, which providers, which summarizer) and the warnings about
//! provider keys, shared by `serve` and `check-config`.

use super::Config;

impl Config {
    /// The configuration's origin: the file read, or "embedded defaults".
    pub fn source_name(&self) -> String {
        self.source
            .as_ref()
            .map_or_else(|| "embedded defaults".into(), |p| p.display().to_string())
    }

    /// Each provider as `name → base_url [patterns] (whose key)`, `; `-separated.
    pub fn describe_providers(&self) -> String {
        let providers: Vec<String> = self
            .providers
            .iter()
            .map(|(name, p)| {
                let key = match &p.api_key_env {
                    Some(var) if key_is_set(var) => format!("key from ${var}"),
                    Some(var) => format!("client's key: ${var} is unset"),
                    None => "client's key".into(),
                };
                format!("{name} → {} [{}] ({key})", p.base_url, p.models.join(", "))
            })
            .collect();
        providers.join("; ")
    }

    /// Which model writes summaries, on which provider, then the fallbacks.
    pub fn describe_summarizer(&self) -> String {
        let s = &self.summarizer;
        let model = s.model.as_deref().map_or_else(
            || "the request's own model".to_string(),
            |m| format!("model {m}"),
        );
        let provider = s.provider.as_deref().map_or_else(
            || "the request's own provider".to_string(),
            |p| format!("provider {p}"),
        );
        let mut text = format!("{model} on {provider}");
        if !s.fallback_models.is_empty() {
            text.push_str(&format!(", then {}", s.fallback_models.join(", ")));
        }
        text
    }

    /// Providers whose `api_key_env` names an unset or empty variable:
    /// their requests carry the client's own credential.
    pub fn key_warnings(&self) -> Vec<String> {
        self.providers
            .iter()
            .filter_map(|(name, p)| {
                let var = p.api_key_env.as_ref()?;
                (!key_is_set(var)).then(|| {
                    format!(
                        "providers.{name}.api_key_env: environment variable {var} is not set; \
                         the client's credential is forwarded to {name}"
                    )
                })
            })
            .collect()
    }
}

/// The key an `api_key_env` variable holds; `None` when it is unset or
/// empty. One rule for the upstream client and these descriptions.
pub fn read_key(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.is_empty())
}

fn key_is_set(var: &str) -> bool {
    read_key(var).is_some()
}
