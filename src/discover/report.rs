//! The start-up report: one line per configured, discovered or learned
//! model window, saying where it came from, and a WARN for each model of a
//! local provider whose window nothing names (with the config line to add;
//! the dashboard shows the same list, `GET /foldgate/windows`).

use crate::app::App;
use crate::tokens::{LimitSource, MissingWindow};
use std::collections::BTreeMap;

/// Logs every known window and the missing ones; `listed` holds the model
/// ids each provider listed (empty without discovery).
pub(super) fn log(app: &App, listed: &BTreeMap<String, Vec<String>>) {
    for (glob, model) in &app.config.models {
        if let Some(window) = model.context_window {
            tracing::info!("model window: {glob} = {window} tokens (config)");
        }
    }
    for known in app.tokens.known_windows() {
        tracing::info!(
            "model window: {} = {} tokens ({})",
            known.model,
            known.context_window,
            known.origin()
        );
    }
    let missing = missing(app, listed);
    let assumed = match app.config.tokens.default_context_window {
        Some(default) => format!("foldgate assumes tokens.default_context_window = {default}"),
        None => "its requests go upstream unfolded".into(),
    };
    for m in &missing {
        tracing::warn!(
            "no context window known for model \"{}\" of local provider {}: {assumed} until the upstream's first context-length error names the window. Add to the config: {} (N: the context the server gives each request, e.g. llama_cpp.server --n_ctx, llama-server --ctx-size / --parallel, Ollama num_ctx)",
            m.model,
            m.provider,
            m.config
        );
    }
    app.tokens.set_missing_windows(missing);
}

/// The models of local providers (this machine, a private network) whose
/// window would be the default or is not known: the ids each listed, else
/// its model globs
/// (the catch-all `*` only while no `[models."…"]` window is configured).
fn missing(app: &App, listed: &BTreeMap<String, Vec<String>>) -> Vec<MissingWindow> {
    let mut missing = Vec::new();
    for (name, provider_config) in &app.config.providers {
        if !app.upstreams.by_name(name).is_local() {
            continue;
        }
        let models = match listed.get(name) {
            Some(ids) if !ids.is_empty() => ids,
            _ => &provider_config.models,
        };
        for model in models {
            // The catch-all pattern names no model: when the config gives
            // windows for the models it uses, it is not a missing one.
            if model == "*" && !app.config.models.is_empty() {
                continue;
            }
            let source = app.tokens.limits_quiet(model).source;
            if matches!(source, LimitSource::Default | LimitSource::Unknown) {
                missing.push(MissingWindow::new(name, model));
            }
        }
    }
    missing
}
