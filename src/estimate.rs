//! `foldgate estimate`: one request body of any API foldgate folds, named
//! or judged by its shape — read and counted
//! as the proxy reads and counts it on that API's route, with the point
//! where a fold would trigger for its model under the configuration and
//! the headroom left before it.

use crate::api::codec::ReadBody;
use crate::api::{Api, by_shape};
use crate::config::Config;
use crate::fold::trigger::{emergency_at, prefold_at, token_at};
use crate::tokens::{Encoding, LimitSource, TokenCounter};
use http::Method;
use serde_json::Value;
use std::fmt::Write as _;

/// Why a request body could not be estimated.
#[derive(Debug, thiserror::Error)]
pub enum EstimateError {
    /// The body is not JSON.
    #[error("request is not valid JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    /// The body is JSON but not an object.
    #[error("request is not a JSON object")]
    NotObject,
    /// The body has no conversation for its API.
    #[error("request has no \"{0}\" ({1} API)")]
    NoMessages(&'static str, &'static str),
    /// No model was given and the body names none.
    #[error("no model given and the request has no \"model\": pass --model NAME")]
    NoModel,
    /// A Gemini body, whose model is in the URL path, without the path
    /// or a model.
    #[error(
        "no model given and a Gemini request names its model in the URL path: \
         pass --path /v1beta/models/MODEL:generateContent (or --model MODEL)"
    )]
    NoModelInPath,
    /// `--path` is not a route of an API foldgate folds.
    #[error(
        "--path {0}: no API foldgate folds serves this path (a POST to it is forwarded untouched)"
    )]
    NotARoute(String),
    /// The API's reader rejected the body, as the proxy would.
    #[error("{0}")]
    Invalid(String),
}

/// What `foldgate estimate` is told besides the body.
#[derive(Clone, Copy, Default)]
pub struct Given<'a> {
    /// `--api`: the body's API (`None`: the path's, else judged by the
    /// body's shape, [`by_shape`]).
    pub api: Option<Api>,
    /// `--model` (empty: the body's `model`, or the path's for an API that
    /// names it there).
    pub model: &'a str,
    /// `--path`: the URL path the client posts the body to (its query, if
    /// any, is ignored).
    pub path: Option<&'a str>,
    /// Context windows the proxy learned and kept in the state store,
    /// `(model, window)` ([`crate::state::learned::windows`]).
    pub learned: &'a [(String, u32)],
}

/// The request as the proxy reads it: its API (and how that was told),
/// the read body and the model.
fn read_request(
    given: &Given<'_>,
    body: &[u8],
) -> Result<(Api, &'static str, ReadBody, String), EstimateError> {
    let Value::Object(mut request) = serde_json::from_slice::<Value>(body)? else {
        return Err(EstimateError::NotObject);
    };
    let path = given.path.map(|p| p.split('?').next().unwrap_or(p));
    let by_path = match path {
        Some(p) => Some(
            crate::api::of(&Method::POST, p).ok_or_else(|| EstimateError::NotARoute(p.into()))?,
        ),
        None => None,
    };
    let (api, how) = match (given.api, by_path) {
        (Some(api), _) => (api, "given"),
        (None, Some(api)) => (api, "by path"),
        (None, None) => (by_shape(&request), "by shape"),
    };
    let field = api.conversation_field();
    if !request.contains_key(field) {
        return Err(EstimateError::NoMessages(field, api.name()));
    }
    let has_model = request.get("model").and_then(Value::as_str).is_some();
    let model_in_path = api.model_in_path();
    if given.model.is_empty() && !has_model {
        match (model_in_path, path) {
            (false, _) => return Err(EstimateError::NoModel),
            (true, None) => return Err(EstimateError::NoModelInPath),
            (true, Some(_)) => {}
        }
    }
    let read = match path {
        _ if !given.model.is_empty() => {
            request.insert("model".into(), Value::String(given.model.to_string()));
            ReadBody::read(api, &serde_json::to_vec(&request)?)
        }
        // The body's model, or the path's, as the proxy reads them.
        Some(p) => ReadBody::read_at(api, p, body),
        None => ReadBody::read(api, body),
    };
    let read = read.map_err(|e| EstimateError::Invalid(e.to_string()))?;
    let model = match read.fields.get("model").and_then(Value::as_str) {
        Some(model) if !model.is_empty() => model.to_string(),
        _ => return Err(EstimateError::NoModel),
    };
    Ok((api, how, read, model))
}

/// Estimates `body` as the proxy would on its route ([`Given`]) and
/// reports it, one `key: value` per line:
///
/// ```text
/// api: anthropic (by shape)
/// model: claude-sonnet-4-5
/// encoding: o200k_base
/// messages: 12
/// input_tokens: 6431
/// context_window: 200000 (built-in)
/// ratio: 3.22%
/// output_reserve: 1024
/// calibration: 1.000
/// trigger_at: 160000 (trigger_ratio 0.8 of the window)
/// prefold_at: 140000 (background mode: folded off the request path from here)
/// headroom: 153569
/// ```
///
/// `trigger_at` is the fewest prompt tokens at which the proxy folds this
/// request: the token trigger or, when the output reserve leaves less
/// room, the emergency one. For a model whose window is not known,
/// `context_window: unknown (…)` and `trigger_at: none (…)` say so, with
/// no ratio, `prefold_at` or `headroom`. A fresh counter is used (with the learned
/// windows), so calibration is always 1.000 here.
pub fn report(config: &Config, given: &Given<'_>, body: &[u8]) -> Result<String, EstimateError> {
    let (api, how, read, model) = read_request(given, body)?;
    let counter = TokenCounter::new(config);
    for (learned, window) in given.learned {
        counter.record_window(learned, *window, LimitSource::Learned, "");
    }
    let estimate = counter.estimate_messages(&model, &read.messages, &read.fields);
    let limits = counter.limits_quiet(&model);
    let window = estimate.context_window;
    let ratio = 100.0 * f64::from(estimate.input_tokens) / f64::from(window.max(1));
    let source = match limits.source {
        // A window the request sets for itself (Ollama's `options.num_ctx`).
        LimitSource::Unknown if estimate.window_known => "the request's",
        source => source.as_str(),
    };

    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(out, "api: {} ({how})", api.name());
    let _ = writeln!(out, "model: {model}");
    let _ = writeln!(out, "encoding: {}", Encoding::for_model(&model).name());
    let scale = counter.token_scale(&model);
    if scale != 1.0 {
        let _ = writeln!(out, "token_scale: {scale}");
    }
    let _ = writeln!(out, "messages: {}", read.messages.len());
    let _ = writeln!(out, "input_tokens: {}", estimate.input_tokens);
    if estimate.window_known {
        let _ = writeln!(out, "context_window: {window} ({source})");
        let _ = writeln!(out, "ratio: {ratio:.2}%");
    } else {
        let _ = writeln!(
            out,
            "context_window: unknown (no [models] entry, discovered or learned window, \
             built-in model or family names it, and tokens.default_context_window is unset)"
        );
    }
    let _ = writeln!(out, "output_reserve: {}", estimate.output_reserve);
    let _ = writeln!(out, "calibration: {:.3}", estimate.factor);
    if estimate.window_known {
        out.push_str(&trigger_lines(
            config,
            &model,
            estimate.input_tokens,
            (window, estimate.output_reserve),
        ));
    } else {
        let line = crate::tokens::MissingWindow::new("", &model).config;
        let _ = write!(
            out,
            "trigger_at: none (the window is not known: the proxy forwards this request \
             unfolded until the upstream's first context-length error names the window, \
             then folds within it; or set {line})"
        );
    }
    if let Some(why) = read.untouched {
        let _ = write!(
            out,
            "\nnote: the proxy forwards this request untouched ({why})"
        );
    }
    Ok(out)
}

/// The `trigger_at`, `prefold_at` (background mode) and `headroom` lines
/// for `tokens` of `model` under the configuration's policy for it.
fn trigger_lines(
    config: &Config,
    model: &str,
    tokens: u32,
    (window, reserve): (u32, u32),
) -> String {
    let provider = config
        .provider_for(Some(model))
        .map_or("", |(name, _)| name);
    let policy = config.policy_for(provider, model);
    let token = token_at(policy.trigger_ratio, window);
    let emergency = emergency_at(window, reserve);
    let trigger = token.min(emergency);
    let mut out = String::new();
    let _ = if token <= emergency {
        writeln!(
            out,
            "trigger_at: {trigger} (trigger_ratio {} of the window)",
            policy.trigger_ratio
        )
    } else {
        writeln!(
            out,
            "trigger_at: {trigger} (the window less the output reserve: an emergency fold)"
        )
    };
    if let Some(prefold) = prefold_at(&policy, window) {
        let prefold = prefold.min(trigger);
        let _ = writeln!(
            out,
            "prefold_at: {prefold} (background mode: folded off the request path from here)"
        );
    }
    let headroom = i64::try_from(trigger).unwrap_or(i64::MAX) - i64::from(tokens);
    let _ = if headroom > 0 {
        write!(out, "headroom: {headroom}")
    } else {
        write!(
            out,
            "headroom: {headroom} (at or past the trigger: the proxy folds this request)"
        )
    };
    out
}

/// The API named by `--api`, for clap.
pub fn parse_api(name: &str) -> Result<Api, String> {
    crate::api::named(name).ok_or_else(|| {
        let names: Vec<&str> = crate::api::names().collect();
        format!("{name:?}: expected one of {}", names.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::responses::Responses;
    use serde_json::Map;

    fn body(text: &str) -> Map<String, Value> {
        match serde_json::from_str(text).unwrap() {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn shapes() {
        let chat = r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}]}"#;
        assert_eq!(by_shape(&body(chat)).name(), "chat");
        let parts = r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#;
        assert_eq!(by_shape(&body(parts)).name(), "anthropic");
        let system = r#"{"model":"m","system":"s","messages":[{"role":"user","content":"hi"}]}"#;
        assert_eq!(by_shape(&body(system)).name(), "anthropic");
        let tools = r#"{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}]}"#;
        assert_eq!(by_shape(&body(tools)).name(), "anthropic");
        let responses = r#"{"model":"m","input":"hi"}"#;
        assert_eq!(by_shape(&body(responses)).name(), "responses");
        let gemini = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
        assert_eq!(by_shape(&body(gemini)).name(), "gemini");
        assert_eq!(by_shape(&body(r#"{"model":"m"}"#)).name(), "chat");
    }

    #[test]
    fn report_lines() {
        let body = br#"{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"hello world"}]}"#;
        let report = report(&Config::default(), &Given::default(), body).unwrap();
        // 3 per message + "user" + "hello world" (2) + 3 priming.
        let expect = "api: chat (by shape)\nmodel: gpt-4o\nencoding: o200k_base\nmessages: 1\ninput_tokens: 9\n\
context_window: 128000 (built-in)\nratio: 0.01%\noutput_reserve: 100\ncalibration: 1.000\n\
trigger_at: 102400 (trigger_ratio 0.8 of the window)\n\
prefold_at: 89600 (background mode: folded off the request path from here)\nheadroom: 102391";
        assert_eq!(report, expect);
    }

    #[test]
    fn errors() {
        let c = Config::default();
        let with = |api: Option<Api>, model: &'static str| Given {
            api,
            model,
            ..Given::default()
        };
        assert!(matches!(
            report(&c, &with(None, "m"), b"{"),
            Err(EstimateError::NotJson(_))
        ));
        assert!(matches!(
            report(&c, &with(None, "m"), b"[]"),
            Err(EstimateError::NotObject)
        ));
        assert!(matches!(
            report(&c, &with(None, "m"), b"{}"),
            Err(EstimateError::NoMessages("messages", "chat"))
        ));
        assert!(matches!(
            report(&c, &with(Some(&Responses), "m"), br#"{"messages":[]}"#),
            Err(EstimateError::NoMessages("input", "responses"))
        ));
        assert!(matches!(
            report(&c, &with(None, ""), br#"{"messages":[]}"#),
            Err(EstimateError::NoModel)
        ));
        let gemini = br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
        assert!(matches!(
            report(&c, &with(None, ""), gemini),
            Err(EstimateError::NoModelInPath)
        ));
        let elsewhere = Given {
            path: Some("/v1/models"),
            ..Given::default()
        };
        assert!(matches!(
            report(&c, &elsewhere, gemini),
            Err(EstimateError::NotARoute(p)) if p == "/v1/models"
        ));
    }

    #[test]
    fn the_path_names_the_api_and_a_gemini_model_and_learned_windows_count() {
        let gemini = br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
        let learned = [("gemini-2.5-flash".to_string(), 32_000)];
        let given = Given {
            path: Some("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"),
            learned: &learned,
            ..Given::default()
        };
        let text = report(&Config::default(), &given, gemini).unwrap();
        assert!(
            text.starts_with("api: gemini (by path)\nmodel: gemini-2.5-flash\n"),
            "{text}"
        );
        assert!(
            text.contains("\ncontext_window: 32000 (learned)\n"),
            "{text}"
        );
        // A configured window still wins over a learned one, as in the proxy.
        let config = Config::from_toml("[models.\"gemini-*\"]\ncontext_window = 50000\n").unwrap();
        let text = report(&config, &given, gemini).unwrap();
        assert!(
            text.contains("\ncontext_window: 50000 (config)\n"),
            "{text}"
        );
    }

    #[test]
    fn an_unknown_window_is_said_to_be_unknown_not_a_default() {
        let body = br#"{"model":"sol-large-2","messages":[{"role":"user","content":"hi"}]}"#;
        let text = report(&Config::default(), &Given::default(), body).unwrap();
        assert!(text.contains("\ncontext_window: unknown ("), "{text}");
        assert!(
            text.contains("\ntrigger_at: none (the window is not known"),
            "{text}"
        );
        assert!(
            !text.contains("ratio:") && !text.contains("headroom:"),
            "{text}"
        );
        assert!(!text.contains("8192"), "{text}");
        // A family names a new model's window.
        let body = br#"{"model":"gpt-6.2-sol","messages":[{"role":"user","content":"hi"}]}"#;
        let text = report(&Config::default(), &Given::default(), body).unwrap();
        assert!(
            text.contains("\ncontext_window: 400000 (built-in)\n"),
            "{text}"
        );
        // The opt-in default behaves as the default did.
        let config = Config::from_toml("[tokens]\ndefault_context_window = 8192\n").unwrap();
        let body = br#"{"model":"sol-large-2","messages":[{"role":"user","content":"hi"}]}"#;
        let text = report(&config, &Given::default(), body).unwrap();
        assert!(
            text.contains("\ncontext_window: 8192 (default)\n"),
            "{text}"
        );
        assert!(text.contains("\nheadroom: "), "{text}");
    }
}
