//! Integration tests of the token estimator's public API (no server).

use bytes::Bytes;
use foldgate::config::Config;
use foldgate::estimate::{EstimateError, Given, report};
use foldgate::tokens::{Encoding, LimitSource, TokenCounter, parse_models_listing};
use foldgate::usage::UsageScanner;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn fixture(name: &str) -> Map<String, Value> {
    let path = format!(
        "{}/tests/fixtures/tokens/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str::<Value>(&text)
        .unwrap()
        .as_object()
        .unwrap()
        .clone()
}

fn config(toml: &str) -> Config {
    Config::from_toml(toml).unwrap()
}

fn counter() -> TokenCounter {
    TokenCounter::new(&Config::default())
}

fn request(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

/// The cookbook's `num_tokens_from_messages`, written out independently with
/// tiktoken: 3 per message, every string value, +1 per name, +3 priming.
fn cookbook_count(bpe: &tiktoken_rs::CoreBPE, messages: &[Value]) -> u32 {
    let mut n = 0;
    for m in messages {
        n += 3;
        for (k, v) in m.as_object().unwrap() {
            n += bpe.encode_ordinary(v.as_str().unwrap()).len() as u32;
            if k == "name" {
                n += 1;
            }
        }
    }
    n + 3
}

#[test]
fn tokens_cookbook_cl100k_is_129() {
    let req = fixture("cookbook_messages.json");
    let messages = req["messages"].as_array().unwrap();
    let independent = cookbook_count(tiktoken_rs::cl100k_base_singleton(), messages);
    assert_eq!(
        independent, 129,
        "OpenAI's published count for gpt-4-0613 / gpt-3.5-turbo"
    );
    let c = counter();
    for model in ["gpt-4-0613", "gpt-4", "gpt-3.5-turbo"] {
        let e = c.estimate(model, &req);
        assert_eq!(e.raw_input_tokens, 129, "{model}");
        assert_eq!(e.input_tokens, 129, "{model}");
        assert_eq!(e.overhead, 3);
        assert_eq!(e.messages.len(), 6);
    }
}

#[test]
fn tokens_cookbook_o200k_is_124() {
    let req = fixture("cookbook_messages.json");
    let messages = req["messages"].as_array().unwrap();
    let independent = cookbook_count(tiktoken_rs::o200k_base_singleton(), messages);
    assert_eq!(
        independent, 124,
        "OpenAI's published count for gpt-4o / gpt-4o-mini"
    );
    let c = counter();
    for model in ["gpt-4o", "gpt-4o-mini", "openai/gpt-4o"] {
        assert_eq!(c.estimate(model, &req).input_tokens, 124, "{model}");
    }
}

#[test]
fn tokens_cookbook_tool_definitions() {
    // Published API counts for the cookbook's get_current_weather example.
    let req = fixture("cookbook_tools.json");
    let c = counter();
    assert_eq!(c.estimate("gpt-4", &req).input_tokens, 105);
    assert_eq!(c.estimate("gpt-3.5-turbo", &req).input_tokens, 105);
    assert_eq!(c.estimate("gpt-4o", &req).input_tokens, 101);
    assert_eq!(c.estimate("gpt-4o-mini", &req).input_tokens, 101);
    let without = request(json!({"messages": req["messages"].clone()}));
    let e = c.estimate("gpt-4o", &without);
    assert_eq!(e.overhead, 3);
    assert_eq!(
        c.estimate("gpt-4o", &req).overhead - e.overhead,
        101 - e.input_tokens
    );
}

#[test]
fn tokens_per_message_counts() {
    let c = counter();
    let n = |s: &str| Encoding::O200kBase.count(s);
    let named = json!({"role": "user", "name": "alice", "content": "Hi!"});
    assert_eq!(
        c.message_tokens("gpt-4o", &named),
        3 + n("user") + n("alice") + 1 + n("Hi!")
    );

    let args = r#"{"city":"Paris"}"#;
    let call = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": args}}
    ]});
    let call_overhead = foldgate::tokens::message::TOOL_CALL_OVERHEAD;
    assert_eq!(
        c.message_tokens("gpt-4o", &call),
        3 + n("assistant") + n("weather") + n(args) + call_overhead
    );
    let result = json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"});
    assert_eq!(
        c.message_tokens("gpt-4o", &result),
        3 + n("tool") + n("sunny")
    );
}

#[test]
fn tokens_parts_and_images_use_config() {
    let c = TokenCounter::new(&config(
        "[tokens]\nimage_tokens_low = 100\nimage_tokens_high = 1000\n",
    ));
    let n = |s: &str| Encoding::O200kBase.count(s);
    let m = json!({"role": "user", "content": [
        {"type": "text", "text": "Compare"},
        {"type": "text", "text": " these two."},
        {"type": "image_url", "image_url": {"url": "https://a/1.png", "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "https://a/2.png", "detail": "auto"}},
    ]});
    let expect = 3 + n("user") + n("Compare") + n(" these two.") + 100 + 1000;
    assert_eq!(c.message_tokens("gpt-4o", &m), expect);
}

#[test]
fn tokens_cache_hits_are_identical() {
    let c = counter();
    let req = fixture("cookbook_messages.json");
    let first = c.estimate("gpt-4o", &req);
    let after_first = c.cache_stats();
    assert_eq!(after_first.hits, 0);
    // Six distinct messages plus the (empty) definitions.
    assert_eq!(after_first.misses, 6 + 1);
    let second = c.estimate("gpt-4o", &req);
    assert_eq!(first, second);
    let after_second = c.cache_stats();
    assert_eq!(
        after_second.misses, after_first.misses,
        "nothing re-tokenized"
    );
    assert_eq!(after_second.hits, after_first.hits + 7);
    assert_eq!(c.cache_entry_count(), 7);
    // Another encoding is a separate entry.
    c.estimate("gpt-4", &req);
    assert_eq!(c.cache_entry_count(), 14);
}

#[test]
fn tokens_cache_only_counts_the_new_message() {
    let c = counter();
    let mut messages: Vec<Value> = (0..50)
        .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("message number {i}")}))
        .collect();
    let first = c.estimate("gpt-4o", &request(json!({"messages": messages.clone()})));
    let misses = c.cache_stats().misses;
    messages.push(json!({"role": "user", "content": "a new one"}));
    let second = c.estimate("gpt-4o", &request(json!({"messages": messages})));
    assert_eq!(c.cache_stats().misses, misses + 1);
    assert_eq!(second.messages[..50], first.messages[..]);
}

#[test]
fn tokens_cache_disabled() {
    let c = TokenCounter::new(&config("[tokens]\ncache_bytes = 0\n"));
    let req = fixture("cookbook_messages.json");
    assert_eq!(c.estimate("gpt-4", &req).input_tokens, 129);
    assert_eq!(c.estimate("gpt-4", &req).input_tokens, 129);
    assert_eq!(c.cache_stats().hits, 0);
    assert_eq!(c.cache_entry_count(), 0);
}

#[test]
fn tokens_calibration_converges() {
    let c = counter();
    let req = fixture("cookbook_messages.json");
    let raw = c.estimate("gpt-4o", &req).raw_input_tokens;
    for _ in 0..10 {
        let actual = (f64::from(raw) * 1.2).round() as u32;
        c.observe_usage("gpt-4o", raw, actual);
    }
    let f = c.calibration_factor("gpt-4o");
    assert!((f - 1.2).abs() / 1.2 < 0.02, "factor {f}");
    let e = c.estimate("gpt-4o", &req);
    assert_eq!(e.raw_input_tokens, raw, "raw counts are not calibrated");
    assert_eq!(e.factor, f);
    assert_eq!(e.input_tokens, (f64::from(raw) * f).ceil() as u32);
    assert_eq!(e.calibrated(u64::from(raw)), e.input_tokens);
    assert_eq!(c.calibration_factor("gpt-4o-mini"), 1.0, "per model");
}

#[test]
fn tokens_calibration_off() {
    let c = TokenCounter::new(&config("[tokens]\ncalibrate = false\n"));
    c.observe_usage("gpt-4o", 100, 150);
    assert_eq!(c.calibration_factor("gpt-4o"), 1.0);
}

#[test]
fn tokens_registry_precedence() {
    let c = TokenCounter::new(&config(
        r#"
[models."gpt-4o*"]
context_window = 64000
[models."gpt-4o-mini"]
trigger_ratio = 0.5
[models."llama*"]
context_window = 4096
max_output_tokens = 512
[models."llama3.1:8b"]
context_window = 16000
"#,
    ));
    // Config beats built-in, the most specific entry that sets the window wins.
    let l = c.limits("gpt-4o-mini");
    assert_eq!((l.context_window, l.source), (64_000, LimitSource::Config));
    assert_eq!(
        l.max_output_tokens,
        Some(16_384),
        "output limit still built in"
    );
    let l = c.limits("llama3.1:8b");
    assert_eq!((l.context_window, l.max_output_tokens), (16_000, Some(512)));

    // Discovery beats built-in but not config.
    c.record_discovered("gpt-4o", 1_000);
    c.record_discovered("claude-3-5-sonnet-latest", 150_000);
    assert_eq!(c.limits("gpt-4o").source, LimitSource::Config);
    let l = c.limits("Claude-3-5-Sonnet-Latest");
    assert_eq!(
        (l.context_window, l.source),
        (150_000, LimitSource::Discovered)
    );

    let l = c.limits("claude-3-opus-20240229");
    assert_eq!(
        (l.context_window, l.source),
        (200_000, LimitSource::BuiltIn)
    );
}

#[test]
fn tokens_router_prefixes_and_tags() {
    let c = counter();
    for (model, window) in [
        ("openai/gpt-4o", 128_000),
        ("anthropic/claude-3.5-sonnet", 200_000),
        ("meta-llama/llama-3.3-70b-instruct", 131_072),
        ("llama3.1:8b", 131_072),
        ("google/gemini-2.5-pro", 1_048_576),
        ("deepseek/deepseek-chat", 65_536),
        ("GPT-4.1", 1_047_576),
    ] {
        let l = c.limits(model);
        assert_eq!(
            (l.context_window, l.source),
            (window, LimitSource::BuiltIn),
            "{model}"
        );
    }
}

#[test]
fn tokens_unknown_model_defaults() {
    let c = TokenCounter::new(&config("[tokens]\ndefault_context_window = 9000\n"));
    let l = c.limits("acme-brain-7");
    assert_eq!(
        (l.context_window, l.max_output_tokens, l.source),
        (9_000, None, LimitSource::Default)
    );
    // Counted in o200k, times the configured scale.
    let scaled = TokenCounter::new(&config("[models.\"acme-*\"]\ntoken_scale = 1.5\n"));
    let m = json!({"role": "user", "content": "The quick brown fox jumps over the lazy dog."});
    let raw = c.message_tokens("acme-brain-7", &m);
    let n = |s: &str| Encoding::O200kBase.count(s);
    assert_eq!(
        raw,
        3 + n("user") + n("The quick brown fox jumps over the lazy dog.")
    );
    assert_eq!(
        scaled.message_tokens("acme-brain-7", &m),
        (f64::from(raw) * 1.5).ceil() as u32
    );
}

#[test]
fn tokens_output_reserve_rules() {
    let c = TokenCounter::new(&config("[tokens]\ndefault_output_reserve = 2000\n"));
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let reserve = |model: &str, extra: Value| {
        let mut r = request(json!({"messages": msgs.clone()}));
        r.extend(request(extra));
        c.estimate(model, &r).output_reserve
    };
    assert_eq!(reserve("gpt-4o", json!({})), 2000);
    assert_eq!(reserve("gpt-4o", json!({"max_tokens": 300})), 300);
    assert_eq!(
        reserve(
            "gpt-4o",
            json!({"max_tokens": 300, "max_completion_tokens": 700})
        ),
        700
    );
    // Capped by the model's output limit (gpt-4-turbo: 4096).
    assert_eq!(reserve("gpt-4-turbo", json!({"max_tokens": 100_000})), 4096);
    // Unknown model: no cap.
    assert_eq!(reserve("acme", json!({"max_tokens": 100_000})), 100_000);
    let e = c.estimate("gpt-4o", &request(json!({"messages": msgs})));
    assert_eq!(e.context_window, 128_000);
}

#[test]
fn tokens_usage_scanner_json() {
    let body = br#"{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"}}],"usage":{"prompt_tokens":129,"completion_tokens":2,"total_tokens":131}}"#;
    let mut s = UsageScanner::with(false, foldgate::api::chat::USAGE);
    for chunk in body.chunks(7) {
        s.feed(&Bytes::copy_from_slice(chunk));
    }
    assert_eq!(s.finish().prompt, Some(129));
}

const SSE: &str = "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"usage\":null}\n\n\
data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"usage: {fake}\"}}],\"usage\":null}\n\n\
: keep-alive comment\n\n\
data: {\"id\":\"c\",\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\r\n\r\n\
data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":1234,\"completion_tokens\":5,\"total_tokens\":1239}}\n\n\
data: [DONE]\n\n";

proptest! {
    #[test]
    fn tokens_usage_scanner_sse_any_split(mut cuts in proptest::collection::vec(0..SSE.len(), 0..12)) {
        cuts.sort_unstable();
        let bytes = SSE.as_bytes();
        let mut s = UsageScanner::with(true, foldgate::api::chat::USAGE);
        let mut from = 0;
        for cut in cuts {
            s.feed(&Bytes::copy_from_slice(&bytes[from..cut]));
            from = cut;
        }
        s.feed(&Bytes::copy_from_slice(&bytes[from..]));
        prop_assert_eq!(s.finish().prompt, Some(1234));
    }
}

#[test]
fn tokens_usage_scanner_byte_by_byte() {
    let mut s = UsageScanner::with(true, foldgate::api::chat::USAGE);
    for b in SSE.as_bytes() {
        s.feed(&Bytes::copy_from_slice(std::slice::from_ref(b)));
    }
    assert_eq!(s.finish().prompt, Some(1234));
}

#[test]
fn tokens_models_listing_feeds_discovery() {
    let openrouter = br#"{"data":[{"id":"mistralai/mistral-7b-instruct","context_length":32768},
        {"id":"acme/secret-model","context_length":77777}]}"#;
    let vllm = br#"{"object":"list","data":[{"id":"my-local-llama","object":"model","max_model_len":24576}]}"#;
    let c = counter();
    for body in [&openrouter[..], &vllm[..]] {
        for (id, window) in parse_models_listing(body) {
            c.record_discovered(&id, window);
        }
    }
    assert_eq!(c.limits("acme/secret-model").context_window, 77_777);
    assert_eq!(c.limits("my-local-llama").source, LimitSource::Discovered);
    assert_eq!(c.limits("my-local-llama").context_window, 24_576);
}

#[test]
fn tokens_estimate_report() {
    let body = std::fs::read(format!(
        "{}/tests/fixtures/tokens/cookbook_messages.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let estimate = |model: &str, body: &[u8]| {
        let given = Given {
            model,
            ..Given::default()
        };
        report(&Config::default(), &given, body)
    };
    let text = estimate("", &body).unwrap();
    assert!(text.contains("api: chat (by shape)\n"), "{text}");
    assert!(text.contains("model: gpt-4-0613\n"), "{text}");
    assert!(text.contains("encoding: cl100k_base\n"));
    assert!(text.contains("input_tokens: 129\n"));
    assert!(text.contains("context_window: 8192 (built-in)\n"));
    assert!(text.contains("ratio: 1.57%\n"));
    // The default 4096, capped at a quarter of the 8192-token window, as the proxy plans.
    assert!(text.contains("output_reserve: 2048\n"));
    assert!(text.contains("calibration: 1.000\n"));
    // The 2048 reserved leave less room than 0.80 × 8192: 8192 − 2048 + 1.
    assert!(
        text.contains("trigger_at: 6145 (the window less the output reserve: an emergency fold)\n"),
        "{text}"
    );
    assert!(text.ends_with("headroom: 6016"), "{text}");
    let text = estimate("gpt-4o", &body).unwrap();
    assert!(text.contains("input_tokens: 124\n"));
    assert!(matches!(
        estimate("gpt-4o", b"{\"model\":\"x\"}"),
        Err(EstimateError::NoMessages("messages", "chat"))
    ));
}

#[test]
fn tokens_counter_is_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<TokenCounter>();
    check::<UsageScanner>();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn tokens_cache_never_changes_counts(
        texts in proptest::collection::vec("[a-zA-Z0-9 .,!?é東🙂\n]{0,60}", 1..12),
    ) {
        let messages: Vec<Value> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": t}))
            .collect();
        let req = request(json!({"messages": messages}));
        let cached = counter();
        let uncached = TokenCounter::new(&config("[tokens]\ncache_bytes = 0\n"));
        let cold = cached.estimate("gpt-4o", &req);
        let warm = cached.estimate("gpt-4o", &req);
        prop_assert_eq!(&cold, &warm);
        prop_assert_eq!(&cold, &uncached.estimate("gpt-4o", &req));
        let sum: u32 = req["messages"].as_array().unwrap().iter().map(|m| cached.message_tokens("gpt-4o", m)).sum();
        prop_assert_eq!(cold.raw_input_tokens, sum + cold.overhead);
    }
}
