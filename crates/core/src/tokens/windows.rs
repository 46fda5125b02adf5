//! Windows foldgate found out about while running: read from a provider
//! (discovery, a probe) or learned from an upstream's context-length error,
//! each with where it came from, and the models of local providers whose
//! window nobody named (for the start-up WARN and the dashboard).

use super::registry::LimitSource;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

/// A window foldgate found out about, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KnownWindow {
    /// The model id as the provider or the request named it.
    pub model: String,
    /// Its context window, in tokens.
    pub context_window: u32,
    /// [`LimitSource::Discovered`] or [`LimitSource::Learned`].
    #[serde(serialize_with = "source_label")]
    pub source: LimitSource,
    /// What told foldgate: `GET /props`, `a one-token probe`, … (empty for
    /// a learned window).
    pub via: String,
}

fn source_label<S: serde::Serializer>(source: &LimitSource, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(source.as_str())
}

impl KnownWindow {
    /// "discovered via GET /props", "learned from a context-length error".
    pub fn origin(&self) -> String {
        match (self.source, self.via.as_str()) {
            (LimitSource::Learned, _) => "learned from a context-length error".into(),
            (source, "") => source.as_str().into(),
            (source, via) => format!("{} via {via}", source.as_str()),
        }
    }
}

/// A model whose window nothing names (a local provider's at start-up, any
/// model at its first request): its requests go upstream unfolded until an
/// upstream's context-length error names the window, or foldgate assumes
/// `tokens.default_context_window` when that is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MissingWindow {
    /// The provider's name in the config.
    pub provider: String,
    /// The model id the provider listed, else the provider's model glob.
    pub model: String,
    /// The config lines that name its window, with `N` to fill in.
    pub config: String,
}

impl MissingWindow {
    /// The entry for `model` of `provider`.
    pub fn new(provider: &str, model: &str) -> Self {
        let key = model.replace('\\', "\\\\").replace('"', "\\\"");
        Self {
            provider: provider.to_owned(),
            model: model.to_owned(),
            config: format!("[models.\"{key}\"] context_window = N"),
        }
    }
}

/// Found-out windows by lowercased model id, and the missing ones.
#[derive(Debug, Default)]
pub(super) struct Windows {
    known: RwLock<HashMap<String, KnownWindow>>,
    missing: RwLock<Vec<MissingWindow>>,
}

impl Windows {
    /// Records (or replaces: the latest word wins) a model's window.
    pub(super) fn record(&self, known: KnownWindow) {
        if known.context_window == 0 {
            return;
        }
        // Known first, then no longer missing: [`Windows::add_missing`]
        // checks the known ones under the missing list's lock.
        let model = known.model.clone();
        self.known
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(model.to_ascii_lowercase(), known);
        self.missing
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|m| !m.model.eq_ignore_ascii_case(&model));
    }

    /// The window recorded for `model` (matched case-insensitively).
    pub(super) fn get(&self, model: &str) -> Option<(u32, LimitSource)> {
        let map = self.known.read().unwrap_or_else(PoisonError::into_inner);
        if map.is_empty() {
            return None;
        }
        map.get(&model.to_ascii_lowercase())
            .map(|k| (k.context_window, k.source))
    }

    /// Every recorded window, by model id.
    pub(super) fn all(&self) -> Vec<KnownWindow> {
        let map = self.known.read().unwrap_or_else(PoisonError::into_inner);
        let mut all: Vec<_> = map.values().cloned().collect();
        all.sort_by(|a, b| a.model.cmp(&b.model));
        all
    }

    pub(super) fn set_missing(&self, missing: Vec<MissingWindow>) {
        *self.missing.write().unwrap_or_else(PoisonError::into_inner) = missing;
    }

    /// Adds `missing` unless its model is listed already (or a window for
    /// it was recorded meanwhile).
    pub(super) fn add_missing(&self, missing: MissingWindow) {
        let mut list = self.missing.write().unwrap_or_else(PoisonError::into_inner);
        if self.get(&missing.model).is_none()
            && !list
                .iter()
                .any(|m| m.model.eq_ignore_ascii_case(&missing.model))
        {
            list.push(missing);
        }
    }

    pub(super) fn missing(&self) -> Vec<MissingWindow> {
        self.missing
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_line_quotes_the_model() {
        let m = MissingWindow::new("local", "/models/smol \"q4\".gguf");
        assert_eq!(
            m.config,
            r#"[models."/models/smol \"q4\".gguf"] context_window = N"#
        );
        let w = KnownWindow {
            model: "m".into(),
            context_window: 2048,
            source: LimitSource::Discovered,
            via: "a one-token probe".into(),
        };
        assert_eq!(w.origin(), "discovered via a one-token probe");
    }
}
