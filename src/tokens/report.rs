//! `foldgate estimate`: a human-readable estimate of one request body.

use super::counter::TokenCounter;
use super::encoding::Encoding;
use crate::config::Config;
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
    /// The body has no `messages` array.
    #[error("request has no \"messages\" array")]
    NoMessages,
    /// No model was given and the body names none.
    #[error("no model given and the request has no \"model\"")]
    NoModel,
}

/// Estimates `request_json` (a chat-completions body) for `model`, or for
/// the body's own `"model"` when `model` is empty, and reports it, one
/// `key: value` per line:
///
/// ```text
/// model: gpt-4o
/// encoding: o200k_base
/// messages: 12
/// input_tokens: 1234
/// context_window: 128000 (built-in)
/// ratio: 0.96%
/// output_reserve: 4096
/// calibration: 1.000
/// ```
///
/// A fresh counter is used, so calibration is always 1.000 here.
pub fn estimate_report(
    config: &Config,
    model: &str,
    request_json: &[u8],
) -> Result<String, EstimateError> {
    let Value::Object(request) = serde_json::from_slice::<Value>(request_json)? else {
        return Err(EstimateError::NotObject);
    };
    let messages = match request.get("messages") {
        Some(Value::Array(m)) => m.len(),
        _ => return Err(EstimateError::NoMessages),
    };
    let model = match (model, request.get("model").and_then(Value::as_str)) {
        ("", Some(own)) => own,
        ("", None) => return Err(EstimateError::NoModel),
        (given, _) => given,
    };
    let counter = TokenCounter::new(config);
    let estimate = counter.estimate(model, &request);
    let limits = counter.limits(model);
    let ratio =
        100.0 * f64::from(estimate.input_tokens) / f64::from(estimate.context_window.max(1));

    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(out, "model: {model}");
    let _ = writeln!(out, "encoding: {}", Encoding::for_model(model).name());
    let scale = counter.token_scale(model);
    if scale != 1.0 {
        let _ = writeln!(out, "token_scale: {scale}");
    }
    let _ = writeln!(out, "messages: {messages}");
    let _ = writeln!(out, "input_tokens: {}", estimate.input_tokens);
    let _ = writeln!(
        out,
        "context_window: {} ({})",
        estimate.context_window,
        limits.source.as_str()
    );
    let _ = writeln!(out, "ratio: {ratio:.2}%");
    let _ = writeln!(out, "output_reserve: {}", estimate.output_reserve);
    let _ = write!(out, "calibration: {:.3}", estimate.factor);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines() {
        let body = br#"{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"hello world"}]}"#;
        let report = estimate_report(&Config::default(), "", body).unwrap();
        // 3 per message + "user" + "hello world" (2) + 3 priming.
        let expect = "model: gpt-4o\nencoding: o200k_base\nmessages: 1\ninput_tokens: 9\n\
context_window: 128000 (built-in)\nratio: 0.01%\noutput_reserve: 100\ncalibration: 1.000";
        assert_eq!(report, expect);
    }

    #[test]
    fn errors() {
        let c = Config::default();
        assert!(matches!(
            estimate_report(&c, "m", b"{"),
            Err(EstimateError::NotJson(_))
        ));
        assert!(matches!(
            estimate_report(&c, "m", b"[]"),
            Err(EstimateError::NotObject)
        ));
        assert!(matches!(
            estimate_report(&c, "m", b"{}"),
            Err(EstimateError::NoMessages)
        ));
        assert!(matches!(
            estimate_report(&c, "", br#"{"messages":[]}"#),
            Err(EstimateError::NoModel)
        ));
    }
}
