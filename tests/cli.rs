//! The `foldgate` binary as a user runs it.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

fn foldgate() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_foldgate"));
    cmd.env_remove("FOLDGATE_LOG");
    cmd
}

/// `foldgate check-config` on a file named `name` holding `toml`.
fn check_config(name: &str, toml: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, toml).unwrap();
    check_config_file(&path, &[])
}

/// `foldgate check-config --config PATH` with `env` set (and the provider
/// key variables of the examples unset unless `env` sets them).
fn check_config_file(path: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = foldgate();
    cmd.args(["check-config", "--config"]).arg(path);
    for var in ["OPENAI_API_KEY", "OPENROUTER_API_KEY", "VLLM_API_KEY"] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied()).output().unwrap()
}

/// `foldgate check-config` without `--config`, run in `dir`, with `env`.
fn check_config_in(dir: &Path, env: &[(&str, &str)]) -> Output {
    foldgate()
        .arg("check-config")
        .current_dir(dir)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// Runs `cmd` with `stdin` written to its standard input.
fn run_with_stdin(mut cmd: Command, stdin: &str) -> Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn out_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn err_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn help_and_version() {
    let help = foldgate().arg("--help").output().unwrap();
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("serve") && text.contains("check-config"),
        "{text}"
    );
    let version = foldgate().arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn check_config_masks_secrets_and_applies_env() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[server]\napi_keys = [\"sk-top-secret\"]\n[providers.x]\nbase_url = \"http://127.0.0.1:9/v1\"\n").unwrap();
    let out = foldgate()
        .args(["check-config", "--config"])
        .arg(&path)
        .env("FOLDGATE_SERVER__LISTEN", "127.0.0.1:9999")
        .env("FOLDGATE_POLICY__TRIGGER_RATIO", "0.65")
        .output()
        .unwrap();
    let stdout = out_text(&out);
    assert!(out.status.success(), "{stdout}{}", err_text(&out));
    assert!(!stdout.contains("sk-top-secret"), "{stdout}");
    assert!(
        stdout.contains("127.0.0.1:9999") && stdout.contains("0.65"),
        "{stdout}"
    );
}

#[test]
fn check_config_rejects_unknown_keys_naming_key_and_file() {
    let out = check_config("typo.toml", "[policy]\npreserve_recnt = 4\n");
    assert!(!out.status.success());
    let err = err_text(&out);
    // The key as written, without figment's profile prefix (`default.`).
    assert!(
        err.contains("\"policy.preserve_recnt\"") && err.contains("typo.toml"),
        "{err}"
    );
    assert!(!err.contains("default."), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let env = check_config_in(dir.path(), &[("FOLDGATE_POLICY__TRIGGER_RATIO", "lots")]);
    let err = err_text(&env);
    assert!(!env.status.success());
    assert!(
        err.contains("\"policy.trigger_ratio\"") && !err.contains("default."),
        "{err}"
    );
}

/// The unknown-key message reads as plain text: the key, the file, and
/// the keys its section takes (figment's own nests backticks in
/// backticks).
#[test]
fn check_config_says_which_keys_a_section_takes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.toml");
    std::fs::write(&path, "[conversation]\nheadr = \"x-thread\"\n").unwrap();
    let out = check_config_file(&path, &[]);
    assert!(!out.status.success());
    assert_eq!(
        err_text(&out),
        format!(
            "foldgate: unknown key \"conversation.headr\" in TOML file {}; \
             expected one of: header, fallback\n",
            path.display()
        )
    );
    std::fs::write(&path, "[state]\nbackend = \"mysql\"\n").unwrap();
    let out = check_config_file(&path, &[]);
    assert_eq!(
        err_text(&out),
        format!(
            "foldgate: unknown value \"mysql\" for key \"state.backend\" in TOML file {}; \
             expected one of: sqlite, redis, memory\n",
            path.display()
        )
    );
}

#[test]
fn the_repository_config_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config.toml");
    let out = foldgate()
        .args(["check-config", "--config", path])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn estimate_reads_a_request_on_stdin() {
    let mut cmd = foldgate();
    cmd.args(["estimate", "--model", "gpt-4o"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    let body = r#"{"model":"x","max_tokens":500,"messages":[{"role":"user","content":"Hello there, how are you?"}]}"#;
    let out = run_with_stdin(cmd, body);
    let text = out_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("o200k_base") && text.contains("128000") && text.contains("500"),
        "{text}"
    );
    let bad = foldgate()
        .args(["estimate"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!bad.status.success());
}

#[test]
fn check_config_rejects_reset_above_trigger() {
    let out = check_config(
        "c.toml",
        "[providers.x]\nbase_url = \"http://127.0.0.1:9/v1\"\n[policy]\ntrigger_ratio = 0.6\nreset_ratio = 0.7\n",
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("policy.reset_ratio"), "{err}");
}

/// A provider's `api` is any name an API folder registers, and nothing else.
#[test]
fn check_config_checks_provider_apis_against_the_registry() {
    let toml =
        |api: &str| format!("[providers.x]\nbase_url = \"http://127.0.0.1:9\"\napi = \"{api}\"\n");
    for api in ["openai", "anthropic", "gemini"] {
        let out = check_config("ok.toml", &toml(api));
        assert!(out.status.success(), "{api}: {}", err_text(&out));
        assert!(out_text(&out).contains(&format!("api = \"{api}\"")));
    }
    let out = check_config("bad.toml", &toml("cohere"));
    assert!(!out.status.success());
    let err = err_text(&out);
    assert!(
        err.contains("providers.x.api = \"cohere\"") && err.contains("openai, anthropic, gemini"),
        "{err}"
    );
}

#[test]
fn check_config_into_a_closed_pipe_does_not_panic() {
    let mut child = foldgate()
        .arg("check-config")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before foldgate writes (`| head -0`).
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The TOML part of check-config's output, parsed.
fn effective(stdout: &str) -> toml::Table {
    stdout.parse().unwrap_or_else(|e| panic!("{e}:\n{stdout}"))
}

#[test]
fn the_recipes_in_examples_are_valid_and_leave_the_summarizer_to_the_request() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    for (file, base_url, key_var, discover) in [
        (
            "openai.toml",
            "https://api.openai.com/v1",
            Some("OPENAI_API_KEY"),
            false,
        ),
        (
            "openrouter.toml",
            "https://openrouter.ai/api/v1",
            Some("OPENROUTER_API_KEY"),
            true,
        ),
        ("ollama.toml", "http://127.0.0.1:11434/v1", None, true),
        ("vllm.toml", "http://127.0.0.1:8000/v1", None, true),
        ("llamacpp.toml", "http://127.0.0.1:8081/v1", None, true),
    ] {
        let path = Path::new(dir).join(file);
        let env: Vec<(&str, &str)> = key_var.map(|v| (v, "sk-test-recipe")).into_iter().collect();
        let out = check_config_file(&path, &env);
        assert!(out.status.success(), "{file}: {}", err_text(&out));
        let stdout = out_text(&out);
        assert!(
            stdout.contains(&format!("# read from: {}", path.display())),
            "{file}: {stdout}"
        );
        assert!(!stdout.contains("# warning"), "{file}: {stdout}");
        assert!(
            !stdout.contains("sk-test-recipe"),
            "{file}: the key is never printed"
        );
        let config = effective(&stdout);
        let providers = config["providers"].as_table().unwrap();
        // Ollama's recipe also serves its native clients (/api/chat).
        let is_native = |p: &toml::Value| p["api"].as_str() == Some("ollama");
        let native: Vec<_> = providers.values().filter(|p| is_native(p)).collect();
        assert_eq!(native.len(), usize::from(file == "ollama.toml"), "{file}");
        for p in &native {
            assert_eq!(p["base_url"].as_str(), Some("http://127.0.0.1:11434"));
        }
        assert_eq!(providers.len(), 1 + native.len(), "{file}");
        let provider = providers.values().find(|p| !is_native(p)).unwrap();
        assert_eq!(provider["base_url"].as_str(), Some(base_url), "{file}");
        assert_eq!(
            provider.get("api_key_env").and_then(|v| v.as_str()),
            key_var,
            "{file}"
        );
        assert!(
            config["summarizer"].get("model").is_none()
                && config["summarizer"].get("provider").is_none(),
            "{file}: the summarizer is the request's own model on its own provider"
        );
        assert_eq!(
            config["tokens"]["discover"].as_bool(),
            Some(discover),
            "{file}"
        );
    }
}

#[test]
fn the_shipped_config_reads_the_openai_key_and_leaves_the_summarizer_unset() {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/config.toml"));
    let with_key = out_text(&check_config_file(
        path,
        &[("OPENAI_API_KEY", "sk-quick-start")],
    ));
    assert!(!with_key.contains("# warning"), "{with_key}");
    let config = effective(&with_key);
    assert_eq!(
        config["providers"]["openai"]["api_key_env"].as_str(),
        Some("OPENAI_API_KEY")
    );
    assert!(config["summarizer"].get("model").is_none(), "{with_key}");
    // Without the key the configuration still loads: clients' own keys go upstream.
    let out = check_config_file(path, &[]);
    assert!(out.status.success(), "{}", err_text(&out));
    let stdout = out_text(&out);
    assert!(
        stdout.contains("# warning: providers.openai.api_key_env: environment variable OPENAI_API_KEY is not set"),
        "{stdout}"
    );
}

#[test]
fn check_config_names_the_file_it_read_or_the_embedded_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let out = check_config_in(dir.path(), &[]);
    let stdout = out_text(&out);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("# read from: embedded defaults"),
        "{stdout}"
    );
    std::fs::write(
        dir.path().join("config.toml"),
        "[policy]\npreserve_recent = 3\n",
    )
    .unwrap();
    let stdout = out_text(&check_config_in(dir.path(), &[]));
    assert!(stdout.contains("# read from: config.toml"), "{stdout}");
    assert_eq!(
        effective(&stdout)["policy"]["preserve_recent"].as_integer(),
        Some(3)
    );
}

/// The effective configuration has every section and every key, defaults
/// included, and names the keys left unset.
#[test]
fn check_config_prints_every_default() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.toml"),
        "[policy]\npreserve_recent = 3\n",
    )
    .unwrap();
    let stdout = out_text(&check_config_in(dir.path(), &[]));
    let config = effective(&stdout);
    let policy = config["policy"].as_table().unwrap();
    assert_eq!(policy["preserve_recent"].as_integer(), Some(3));
    assert_eq!(policy["trigger_ratio"].as_float(), Some(0.8), "{stdout}");
    assert_eq!(policy["prefold_ratio"].as_float(), Some(0.7), "{stdout}");
    assert_eq!(policy["mode"].as_str(), Some("background"));
    assert_eq!(policy["fold_deadline"].as_str(), Some("1m"));
    for key in [
        "reset_ratio",
        "overflow_buffer",
        "safety_user_turns",
        "cooldown_messages",
        "min_messages",
        "summary_ratio",
        "max_depth",
        "pin",
        "pin_ratio",
    ] {
        assert!(policy.contains_key(key), "policy.{key}: {stdout}");
    }
    let compress = config["compress"].as_table().unwrap();
    assert_eq!(compress["enabled"].as_bool(), Some(true), "{stdout}");
    assert_eq!(compress["min_tokens"].as_integer(), Some(500));
    for key in ["assistant", "after_turns", "batch", "with_fold"] {
        assert!(compress.contains_key(key), "compress.{key}: {stdout}");
    }
    for section in [
        "server",
        "providers",
        "summarizer",
        "summary",
        "conversation",
        "tokens",
        "state",
        "archive",
        "log",
    ] {
        assert!(config.contains_key(section), "[{section}]: {stdout}");
    }
    // Keys with no value and no default are named, as comments.
    assert!(
        stdout.contains("[summarizer]\n# provider = (unset)\n# model = (unset)\n"),
        "{stdout}"
    );
    assert!(stdout.contains("# idle_fold_after = (unset)\n"), "{stdout}");
    // Unset, plans are recognised by their shape.
    assert!(stdout.contains("# plan_tools = (unset)\n"), "{stdout}");
    assert!(stdout.contains("# spool_path = (unset)\n"), "{stdout}");
    // In the order config.toml documents them.
    let at = |header: &str| {
        stdout
            .find(header)
            .unwrap_or_else(|| panic!("{header}: {stdout}"))
    };
    assert!(at("[server]") < at("[policy]") && at("[policy]") < at("[summarizer]"));
}

#[test]
fn check_config_prints_only_keys_the_shipped_config_documents() {
    let documented =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config.toml")).unwrap();
    let is_documented = |key: &str| {
        documented.lines().any(|l| {
            let l = l.trim_start_matches(['#', ' ']);
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let stdout = out_text(&check_config_in(dir.path(), &[]));
    let config = effective(&stdout);
    let mut undocumented = Vec::new();
    for (section, table) in &config {
        // Providers are tables named by the user: check the keys inside.
        let tables: Vec<(String, &toml::Table)> = match section.as_str() {
            "providers" => table
                .as_table()
                .unwrap()
                .iter()
                .map(|(name, t)| (format!("providers.{name}"), t.as_table().unwrap()))
                .collect(),
            _ => vec![(section.clone(), table.as_table().unwrap())],
        };
        for (path, table) in tables {
            for (key, value) in table {
                if !value.is_table() && !is_documented(key) {
                    undocumented.push(format!("{path}.{key}"));
                }
            }
        }
    }
    assert!(
        undocumented.is_empty(),
        "printed but not in config.toml: {undocumented:?}\n{stdout}"
    );
}

/// Runs `foldgate estimate` on `body` with a config file holding `toml`.
fn estimate(toml: &str, body: &str) -> String {
    estimate_with(toml, &[], body)
}

/// Runs `foldgate estimate ARGS` on `body` with a config file holding `toml`.
fn estimate_with(toml: &str, args: &[&str], body: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, toml).unwrap();
    let mut cmd = foldgate();
    cmd.args(["estimate", "--config"]).arg(&path).args(args);
    let out = run_with_stdin(cmd, body);
    assert!(out.status.success(), "{}", err_text(&out));
    out_text(&out)
}

/// The value of a `key: value` line of `foldgate estimate`'s report.
fn report_value<'a>(report: &'a str, key: &str) -> &'a str {
    report
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(": "))
        .unwrap_or_else(|| panic!("no {key} in:\n{report}"))
}

/// Text of about `tokens` o200k tokens.
fn words(tokens: usize) -> String {
    "the parser reads the config file and the cache keeps each result. ".repeat(tokens / 13)
}

/// An Anthropic Messages body of about 6,400 tokens, most of them in
/// `system` and in tool results (which a chat-completions reading misses).
fn anthropic_body() -> serde_json::Value {
    serde_json::json!({
        "model": "claude-sonnet-4-5", "max_tokens": 1024,
        "system": [{"type": "text", "text": words(800)}],
        "messages": [
            {"role": "user", "content": "Read src/lib.rs and src/config.rs, then fix the cache."},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Reading both files."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "src/lib.rs"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {"path": "src/config.rs"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": words(2600)},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": words(2600)}]},
            ]},
            {"role": "assistant", "content": [{"type": "text", "text": words(300)}]},
            {"role": "user", "content": [{"type": "text", "text": "Go on."}]},
        ],
    })
}

/// A Responses body: instructions, a function call and its output.
fn responses_body() -> serde_json::Value {
    serde_json::json!({
        "model": "gpt-4o", "max_output_tokens": 500,
        "instructions": words(300),
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "List the files."}]},
            {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"cmd\":\"ls\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": words(1500)},
            {"role": "user", "content": "Now read them."},
        ],
    })
}

/// `estimate` reads each API's body as the proxy reads it on that API's
/// route, by flag or by shape: its `input_tokens` is the proxy's
/// `x-foldgate-tokens-in`.
#[tokio::test]
async fn estimate_counts_each_api_as_the_proxy_does() {
    let upstream = common::mock::Mock::echo().await;
    let toml = common::providers(&upstream.url);
    let chat = serde_json::json!({"model": "gpt-4o", "max_tokens": 200, "messages": [
        {"role": "system", "content": words(400)},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "shell", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": words(900)},
    ]});
    let cases = [
        ("chat", "/v1/chat/completions", chat),
        ("anthropic", "/v1/messages", anthropic_body()),
        ("responses", "/v1/responses", responses_body()),
    ];
    // Reports first: the commands block, the proxy runs on this thread.
    let reports: Vec<(String, String)> = cases
        .iter()
        .map(|(api, _, body)| {
            let text = body.to_string();
            let by_shape = estimate(&toml, &text);
            assert_eq!(
                report_value(&by_shape, "api"),
                format!("{api} (by shape)"),
                "{by_shape}"
            );
            let named = estimate_with(&toml, &["--api", api], &text);
            assert_eq!(report_value(&named, "api"), format!("{api} (given)"));
            assert_eq!(
                report_value(&named, "input_tokens"),
                report_value(&by_shape, "input_tokens")
            );
            (by_shape, named)
        })
        .collect();
    let fg = common::Foldgate::start(&toml).await;
    for ((api, route, body), (report, _)) in cases.iter().zip(&reports) {
        let reply = common::post_json(&format!("{}{route}", fg.url), &[], body).await;
        reply.assert_ok();
        assert_eq!(
            report_value(report, "input_tokens"),
            reply.header("x-foldgate-tokens-in"),
            "{api}: {report}"
        );
    }
    // The Anthropic body is about 6,400 tokens, not a few hundred.
    let anthropic: u32 = report_value(&reports[1].0, "input_tokens").parse().unwrap();
    assert!((5_500..7_500).contains(&anthropic), "{}", reports[1].0);
    let as_chat = estimate_with(&toml, &["--api", "chat"], &anthropic_body().to_string());
    let as_chat: u32 = report_value(&as_chat, "input_tokens").parse().unwrap();
    assert!(as_chat < anthropic / 2, "read as chat: {as_chat}");
}

/// `estimate` says where the proxy would fold the request, and how far
/// away that is.
#[test]
fn estimate_prints_the_trigger_point_and_the_headroom() {
    let toml = "[models.\"small-*\"]\ncontext_window = 8000\n[policy]\nmode = \"inline\"\n";
    let body = |max_tokens: u32| {
        let mut body = anthropic_body();
        body["model"] = "small-model".into();
        body["max_tokens"] = max_tokens.into();
        body.to_string()
    };
    let report = estimate(toml, &body(100));
    let tokens: i64 = report_value(&report, "input_tokens").parse().unwrap();
    assert_eq!(
        report_value(&report, "trigger_at"),
        "6400 (trigger_ratio 0.8 of the window)"
    );
    assert!(!report.contains("prefold_at"), "inline mode: {report}");
    let headroom: i64 = report_value(&report, "headroom")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(headroom, 6400 - tokens, "{report}");
    // A large output reserve moves the point down: the emergency trigger.
    let report = estimate(toml, &body(3000));
    assert_eq!(
        report_value(&report, "trigger_at"),
        "5001 (the window less the output reserve: an emergency fold)"
    );
    assert!(
        report_value(&report, "headroom")
            .ends_with("(at or past the trigger: the proxy folds this request)"),
        "{report}"
    );
    // Background mode (the default) also says where it starts folding ahead.
    let report = estimate("[models.\"small-*\"]\ncontext_window = 8000\n", &body(100));
    assert_eq!(
        report_value(&report, "prefold_at"),
        "5600 (background mode: folded off the request path from here)"
    );
}

#[test]
fn estimate_reports_the_output_reserve_the_proxy_plans_with() {
    let toml = "[models.\"small-*\"]\ncontext_window = 6000\n[models.\"big-*\"]\ncontext_window = 100000\n";
    let body = |model: &str, extra: &str| {
        format!(r#"{{"model":"{model}",{extra}"messages":[{{"role":"user","content":"hi"}}]}}"#)
    };
    // The default reserve (4096) is capped at a quarter of a small window...
    let small = estimate(toml, &body("small-model", ""));
    assert!(small.contains("output_reserve: 1500\n"), "{small}");
    // ...not of a large one, and a request's own max_tokens is never capped.
    let big = estimate(toml, &body("big-model", ""));
    assert!(big.contains("output_reserve: 4096\n"), "{big}");
    let asked = estimate(toml, &body("small-model", r#""max_tokens":3000,"#));
    assert!(asked.contains("output_reserve: 3000\n"), "{asked}");
}

/// Runs `foldgate estimate ARGS` on `body` with a config file holding
/// `toml`; returns the whole output, failed or not.
fn estimate_output(toml: &str, args: &[&str], body: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, toml).unwrap();
    let mut cmd = foldgate();
    cmd.args(["estimate", "--config"]).arg(&path).args(args);
    run_with_stdin(cmd, body)
}

/// A Gemini body: the model is in the URL path, not in the body.
const GEMINI_BODY: &str = r#"{"contents":[{"role":"user","parts":[{"text":"Hello there, how are you?"}]}],"generationConfig":{"maxOutputTokens":300}}"#;

/// A Gemini body is read with the model its path names, and without a
/// path (or a model) the command says which flag to give.
#[test]
fn estimate_takes_a_gemini_model_from_the_path() {
    let out = estimate_output("", &[], GEMINI_BODY);
    assert!(!out.status.success());
    assert_eq!(
        err_text(&out),
        "foldgate: no model given and a Gemini request names its model in the URL path: \
         pass --path /v1beta/models/MODEL:generateContent (or --model MODEL)\n"
    );
    let path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse";
    let report = estimate_with("", &["--path", path], GEMINI_BODY);
    assert_eq!(report_value(&report, "api"), "gemini (by path)", "{report}");
    assert_eq!(report_value(&report, "model"), "gemini-2.5-flash");
    // Gemini's window is its input limit: `maxOutputTokens` takes no share.
    assert_eq!(report_value(&report, "output_reserve"), "0");
    // `--model` still wins, and a path no API serves is named.
    let named = estimate_with("", &["--path", path, "--model", "gemini-x"], GEMINI_BODY);
    assert_eq!(report_value(&named, "model"), "gemini-x");
    let out = estimate_output("", &["--path", "/v1/models"], GEMINI_BODY);
    assert!(!out.status.success());
    assert!(
        err_text(&out).contains("--path /v1/models: no API"),
        "{}",
        err_text(&out)
    );
}

/// A window the proxy learned from a context-length error and kept in the
/// state store is the window `estimate` counts against, as after a
/// restart of the proxy.
#[tokio::test]
async fn estimate_counts_against_windows_learned_into_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let toml = format!(
        "[state]\nbackend = \"sqlite\"\npath = {:?}\n",
        db.display().to_string()
    );
    let body = r#"{"model":"my-local-model","messages":[{"role":"user","content":"hi"}]}"#;
    let before = estimate(&toml, body);
    assert!(
        report_value(&before, "context_window").starts_with("unknown ("),
        "{before}"
    );
    assert!(
        report_value(&before, "trigger_at").starts_with("none (the window is not known"),
        "{before}"
    );
    assert!(!db.exists(), "estimate creates no state database");

    // What `App::learn_window` keeps, through the store the proxy opens.
    let config = foldgate::config::Config::from_toml(&toml).unwrap();
    let store = foldgate::state::SqliteStore::open(&config.state).unwrap();
    foldgate::state::Store::save_window(&store, "my-local-model", 32_768).await;
    drop(store);

    let after = estimate(&toml, body);
    assert_eq!(
        report_value(&after, "context_window"),
        "32768 (learned)",
        "{after}"
    );
    // The default reserve is capped at a quarter of the window it knows.
    assert_eq!(report_value(&after, "output_reserve"), "4096", "{after}");
}

/// A config for the replay fixture (`tiny-replay`, 2,400-token window,
/// inline folds) in front of `upstream`.
fn replay_config(upstream: &str) -> String {
    format!(
        "[providers.mock]\nbase_url = \"{upstream}/v1\"\n\
         [models.\"tiny-replay\"]\ncontext_window = 2400\n\
         [policy]\nmode = \"inline\"\n\
         [state]\nbackend = \"memory\"\n\
         [summarizer]\nretries = 0\ntimeout = \"5s\"\n"
    )
}

const REPLAY_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/replay/session.jsonl"
);

/// One row of `foldgate replay`'s table.
#[derive(Debug)]
struct ReplayRow {
    line: usize,
    tokens_in: u32,
    tokens_out: u32,
    fold: String,
}

fn replay_rows(stdout: &str) -> Vec<ReplayRow> {
    stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim_start().starts_with("line"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            ReplayRow {
                line: f[0].parse().unwrap(),
                tokens_in: f[2].parse().unwrap(),
                tokens_out: f[3].parse().unwrap(),
                fold: f[5].to_string(),
            }
        })
        .collect()
}

#[test]
fn replay_prints_tokens_and_folds_per_turn() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replay.toml");
    // No network: the provider points at a port nothing listens on.
    std::fs::write(&path, replay_config("http://127.0.0.1:9")).unwrap();
    let out = foldgate()
        .args(["replay", REPLAY_FIXTURE, "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = out_text(&out);
    assert!(out.status.success(), "{stdout}{}", err_text(&out));
    assert!(stdout.contains("window 2400 tokens"), "{stdout}");
    let rows = replay_rows(&stdout);
    let recorded = std::fs::read_to_string(REPLAY_FIXTURE).unwrap();
    assert_eq!(rows.len(), recorded.lines().count(), "{stdout}");
    let first = rows.iter().position(|r| r.fold == "new").expect("no fold");
    for r in &rows[..first] {
        assert_eq!(
            (r.fold.as_str(), r.tokens_out),
            ("none", r.tokens_in),
            "{stdout}"
        );
    }
    for r in &rows[first..] {
        assert!(matches!(r.fold.as_str(), "new" | "reused"), "{stdout}");
        assert!(
            r.tokens_out < r.tokens_in,
            "a folded view is smaller: {stdout}"
        );
        assert!(r.tokens_out < 2400, "{stdout}");
    }
    assert!(
        rows.last().unwrap().tokens_in > 2400,
        "the recording outgrows the window: {stdout}"
    );
    let folds: Vec<String> = rows
        .iter()
        .filter(|r| r.fold == "new")
        .map(|r| r.line.to_string())
        .collect();
    assert!(
        stdout.contains(&format!("folds (lines {})", folds.join(", "))),
        "{stdout}"
    );
    let bad = foldgate()
        .args(["replay", "/nonexistent/recording.jsonl"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
}

#[tokio::test]
async fn replay_counts_and_folds_where_the_proxy_does() {
    let llm = common::llm::Llm::start().await;
    let toml = replay_config(llm.url());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replay.toml");
    std::fs::write(&path, &toml).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_foldgate"))
        .args(["replay", REPLAY_FIXTURE, "--config"])
        .arg(&path)
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let rows = replay_rows(&String::from_utf8_lossy(&out.stdout));
    // The same recording through the real proxy, in front of a mock LLM.
    let fg = common::Foldgate::start(&toml).await;
    let url = format!("{}/v1/chat/completions", fg.url);
    let recorded = std::fs::read_to_string(REPLAY_FIXTURE).unwrap();
    let mut first_fold = None;
    for (row, line) in rows.iter().zip(recorded.lines()) {
        let body: serde_json::Value = serde_json::from_str(line).unwrap();
        let reply = common::post_json(&url, &[("x-conversation-id", "replayed")], &body).await;
        reply.assert_ok();
        let tokens_in: u32 = reply.header("x-foldgate-tokens-in").parse().unwrap();
        assert_eq!(tokens_in, row.tokens_in, "line {}", row.line);
        if first_fold.is_none() {
            assert_eq!(
                reply.header("x-foldgate-fold"),
                row.fold,
                "line {}",
                row.line
            );
            if row.fold == "new" {
                // From here the summaries differ (mock LLM against replay's placeholder).
                first_fold = Some(row.line);
            } else {
                assert_eq!(reply.tokens_out(), row.tokens_out, "line {}", row.line);
            }
        }
    }
    assert!(first_fold.is_some(), "neither folded");
}

#[tokio::test]
async fn the_quick_start_key_reaches_the_upstream() {
    // The README's quick start: `export OPENAI_API_KEY=…; foldgate serve` in
    // the repository (./config.toml), with OpenAI played by a mock.
    let upstream = common::mock::Mock::echo().await;
    let port = common::free_port();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_foldgate"))
        .arg("serve")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("FOLDGATE_LOG")
        .env("OPENAI_API_KEY", "sk-quick-start")
        .env(
            "FOLDGATE_PROVIDERS__OPENAI__BASE_URL",
            format!("{}/v1", upstream.url),
        )
        .env("FOLDGATE_SERVER__LISTEN", format!("127.0.0.1:{port}"))
        .env("FOLDGATE_STATE__BACKEND", "memory")
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    common::wait_listening(port).await;
    let url = format!("http://127.0.0.1:{port}/v1/models");
    for client_key in [None, Some("Bearer sk-some-client")] {
        let headers: Vec<(&str, &str)> = client_key
            .map(|k| ("authorization", k))
            .into_iter()
            .collect();
        common::send(http::Method::GET, &url, &headers, "").await;
    }
    child.start_kill().unwrap();
    let received = upstream.received();
    assert_eq!(received.len(), 2);
    for r in received {
        assert_eq!(r.uri, "/v1/models");
        assert_eq!(r.header("authorization"), Some("Bearer sk-quick-start"));
    }
}

/// `foldgate serve` with `toml`, waited for up to 20 s (killed past it).
fn serve_until_exit(dir: &Path, toml: &str) -> Option<Output> {
    let config = dir.join("serve.toml");
    std::fs::write(&config, toml).unwrap();
    let mut child = foldgate()
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Some(child.wait_with_output().unwrap())
}

#[test]
fn serve_stops_at_start_up_when_the_archive_cannot_be_opened() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain.txt");
    std::fs::write(&file, "not a database, and not a directory").unwrap();
    let cases = [
        (file.clone(), "file is not a database"),
        (file.join("archive.db"), "cannot create"),
    ];
    for (archive, cause) in cases {
        let toml = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[state]\npath = {:?}\n[archive]\npath = {:?}\n",
            dir.path().join("state.db").display().to_string(),
            archive.display().to_string(),
        );
        let out = serve_until_exit(dir.path(), &toml)
            .unwrap_or_else(|| panic!("serve kept running with archive.path {archive:?}"));
        assert_eq!(out.status.code(), Some(1), "{}", err_text(&out));
        let err = err_text(&out);
        let line = err.lines().last().unwrap_or_default();
        assert!(line.starts_with("foldgate: state: archive.path"), "{err}");
        assert!(line.contains(cause), "{err}");
    }
}
