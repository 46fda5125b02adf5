//! `foldgate estimate`: one request body of any API foldgate folds, named
//! or judged by its shape — read and counted
//! as the proxy reads and counts it on that API's route, with the point
//! where a fold would trigger for its model under the configuration and
//! the headroom left before it.

use crate::api::codec::ReadBody;
use crate::api::{Api, anthropic::Anthropic, chat::Chat};
use crate::config::Config;
use crate::fold::trigger::{emergency_at, prefold_at, token_at};
use crate::tokens::{Encoding, TokenCounter};
use serde_json::{Map, Value};
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
    #[error("no model given and the request has no \"model\"")]
    NoModel,
    /// The API's reader rejected the body, as the proxy would.
    #[error("{0}")]
    Invalid(String),
}

/// Estimates `body` for `model` (empty: the body's own `model`) on `api`
/// (`None`: judged by the body's shape, [`by_shape`]) and reports it,
/// one `key: value` per line:
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
/// room, the emergency one. A fresh counter is used, so calibration is
/// always 1.000 here.
pub fn report(
    config: &Config,
    api: Option<Api>,
    model: &str,
    body: &[u8],
) -> Result<String, EstimateError> {
    let Value::Object(mut request) = serde_json::from_slice::<Value>(body)? else {
        return Err(EstimateError::NotObject);
    };
    let (api, how) = match api {
        Some(api) => (api, "given"),
        None => (by_shape(&request), "by shape"),
    };
    let field = api.conversation_field();
    if !request.contains_key(field) {
        return Err(EstimateError::NoMessages(field, api.name()));
    }
    let model = match (model, request.get("model").and_then(Value::as_str)) {
        ("", Some(own)) => own.to_string(),
        ("", None) => return Err(EstimateError::NoModel),
        (given, _) => given.to_string(),
    };
    request.insert("model".into(), Value::String(model.clone()));
    let bytes = serde_json::to_vec(&request)?;
    let read = ReadBody::read(api, &bytes).map_err(|e| EstimateError::Invalid(e.to_string()))?;
    let counter = TokenCounter::new(config);
    let estimate = counter.estimate_messages(&model, &read.messages, &read.fields);
    let limits = counter.limits(&model);
    let window = estimate.context_window;
    let ratio = 100.0 * f64::from(estimate.input_tokens) / f64::from(window.max(1));

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
    let _ = writeln!(out, "context_window: {window} ({})", limits.source.as_str());
    let _ = writeln!(out, "ratio: {ratio:.2}%");
    let _ = writeln!(out, "output_reserve: {}", estimate.output_reserve);
    let _ = writeln!(out, "calibration: {:.3}", estimate.factor);
    out.push_str(&trigger_lines(
        config,
        &model,
        estimate.input_tokens,
        (window, estimate.output_reserve),
    ));
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

/// The API a body is written for, judged by its shape when its route is
/// not known: the one API whose conversation field (`input`, `contents`)
/// the body has, when only one has it; between the two that share
/// `messages`, Anthropic when the body has a top-level `system`, content
/// blocks only Anthropic has (`tool_use`, `tool_result`, `thinking`, an
/// image with a `source`), or `max_tokens` with `text` blocks and only
/// user and assistant turns; chat completions otherwise.
pub fn by_shape(body: &Map<String, Value>) -> Api {
    let mut claim = crate::api::all()
        .iter()
        .filter(|api| body.contains_key(api.conversation_field()));
    if let (Some(&only), None) = (claim.next(), claim.next()) {
        return only;
    }
    let messages = match body.get("messages") {
        Some(Value::Array(messages)) => messages.as_slice(),
        _ => return &Chat,
    };
    if body.contains_key("system") {
        return &Anthropic;
    }
    let kind = |b: &Value| b.get("type").and_then(Value::as_str).map(str::to_owned);
    let blocks = || {
        messages
            .iter()
            .filter_map(|m| m.get("content").and_then(Value::as_array))
            .flatten()
    };
    let anthropic_only = blocks().any(|b| {
        matches!(
            kind(b).as_deref(),
            Some("tool_use" | "tool_result" | "thinking" | "redacted_thinking")
        ) || (kind(b).as_deref() == Some("image") && b.get("source").is_some())
    });
    let text_blocks = blocks().any(|b| kind(b).as_deref() == Some("text"));
    let two_roles = messages.iter().all(|m| {
        matches!(
            m.get("role").and_then(Value::as_str),
            Some("user" | "assistant")
        ) && m.get("tool_calls").is_none()
    });
    if anthropic_only || (body.contains_key("max_tokens") && text_blocks && two_roles) {
        &Anthropic
    } else {
        &Chat
    }
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
        let report = report(&Config::default(), None, "", body).unwrap();
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
        assert!(matches!(
            report(&c, None, "m", b"{"),
            Err(EstimateError::NotJson(_))
        ));
        assert!(matches!(
            report(&c, None, "m", b"[]"),
            Err(EstimateError::NotObject)
        ));
        assert!(matches!(
            report(&c, None, "m", b"{}"),
            Err(EstimateError::NoMessages("messages", "chat"))
        ));
        assert!(matches!(
            report(&c, Some(&Responses), "m", br#"{"messages":[]}"#),
            Err(EstimateError::NoMessages("input", "responses"))
        ));
        assert!(matches!(
            report(&c, None, "", br#"{"messages":[]}"#),
            Err(EstimateError::NoModel)
        ));
    }
}
