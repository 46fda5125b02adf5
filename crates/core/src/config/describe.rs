//! What a loaded configuration amounts to, in words: the start-up line
//! (which file, which providers, which summarizer), the warnings about
//! provider keys, shared by `serve` and `check-config`, and the effective
//! configuration `check-config` prints.

use super::{Config, resolve_compress, resolve_policy};
use serde_json::Value;

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

impl Config {
    /// The effective configuration as TOML: every section and every key,
    /// defaults included; `[policy]` and `[compress]` resolved as every
    /// model gets them before provider and model overrides (which are
    /// printed as set). A key with no value and no default is a comment
    /// (`# tls_cert = (unset)`) at the top of its section.
    pub fn effective_toml(&self) -> Result<String, String> {
        let mut table = toml::Table::try_from(self).map_err(|e| e.to_string())?;
        let policy = resolve_policy(&[&self.policy]);
        let compress = resolve_compress(&[&self.compress]);
        for (section, value) in [
            ("policy", toml::Value::try_from(&policy)),
            ("compress", toml::Value::try_from(compress)),
        ] {
            table.insert(section.into(), value.map_err(|e| e.to_string())?);
        }
        let mut text = toml::to_string_pretty(&table).map_err(|e| e.to_string())?;
        // TOML has no null: find the unset keys in the JSON form.
        let mut json = serde_json::to_value(self).map_err(|e| e.to_string())?;
        if let Some(map) = json.as_object_mut() {
            map.insert(
                "policy".into(),
                serde_json::to_value(&policy).unwrap_or_default(),
            );
        }
        let mut unset = Vec::new();
        unset_keys(&json, &mut Vec::new(), &mut unset);
        for (section, key) in unset.iter().rev() {
            let header = format!("[{section}]\n");
            if let Some(at) = text.find(&header).map(|i| i + header.len()) {
                text.insert_str(at, &format!("# {key} = (unset)\n"));
            }
        }
        Ok(text)
    }
}

/// The `(section, key)` of every `null` below `value`, in order.
fn unset_keys(value: &Value, path: &mut Vec<String>, out: &mut Vec<(String, String)>) {
    let Value::Object(map) = value else { return };
    for (key, child) in map {
        match child {
            Value::Null if !path.is_empty() => out.push((path.join("."), key.clone())),
            Value::Object(_) => {
                path.push(key.clone());
                unset_keys(child, path, out);
                path.pop();
            }
            _ => {}
        }
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
