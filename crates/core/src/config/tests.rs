use super::*;

#[test]
fn defaults_without_a_file() {
    let c = Config::from_toml("").unwrap();
    assert_eq!(c.server.listen.to_string(), "127.0.0.1:8080");
    let (name, p) = c.default_provider().unwrap();
    assert_eq!(
        (name, p.base_url.as_str()),
        ("openai", "https://api.openai.com/v1")
    );
    assert_eq!(c.summarizer.on_failure, OnFailure::Passthrough);
    assert_eq!(c.conversation.header, "x-conversation-id");
    assert_eq!(c.policy_for("openai", "gpt-4o"), Policy::default());
}

/// The conversation header's name is read at load: any case, the same
/// header; a name no request can carry is refused, naming the key.
#[test]
fn the_conversation_header_is_a_header_name() {
    let c = Config::from_toml("[conversation]\nheader = \"X-Thread-ID\"\n").unwrap();
    assert_eq!(c.conversation.header, "x-thread-id");
    let err = Config::from_toml("[conversation]\nheader = \"bad header\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("conversation.header"), "{err}");
}

#[test]
fn unknown_keys_are_named() {
    for (toml, key) in [
        ("[server]\nlsten = \"127.0.0.1:1\"\n", "lsten"),
        ("[policy]\ntriger_ratio = 0.5\n", "triger_ratio"),
        ("[models.\"gpt-4o*\"]\ncontext_windw = 5\n", "context_windw"),
        (
            "[providers.a]\nbase_url = \"http://x\"\nmodel = [\"*\"]\n",
            "model",
        ),
        ("[nonsense]\nx = 1\n", "nonsense"),
    ] {
        let err = Config::from_toml(toml).unwrap_err().to_string();
        assert!(err.contains(key), "{toml:?} gave {err}");
    }
}

#[test]
fn invalid_values_are_named() {
    for (toml, key) in [
        ("[policy]\ntrigger_ratio = 1.5\n", "policy.trigger_ratio"),
        (
            "[providers.a]\nbase_url = \"ftp://x\"\n",
            "providers.a.base_url",
        ),
        ("[server]\ntls_cert = \"a.pem\"\n", "server.tls_key"),
        ("[summarizer]\nprovider = \"nope\"\n", "summarizer.provider"),
        (
            "[models.\"x*\"]\ntrigger_ratio = 0\n",
            "models.\"x*\".trigger_ratio",
        ),
    ] {
        let err = Config::from_toml(toml).unwrap_err().to_string();
        assert!(err.contains(key), "{toml:?} gave {err}");
    }
}

#[test]
fn an_unset_provider_key_variable_forwards_the_clients_key_with_a_warning() {
    let config = Config::from_toml(
        "[providers.a]\nbase_url = \"http://x\"\napi_key_env = \"FOLDGATE_UNSET_VAR_FOR_TEST\"\n",
    )
    .unwrap();
    let warnings = config.key_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("providers.a.api_key_env")
            && warnings[0].contains("FOLDGATE_UNSET_VAR_FOR_TEST"),
        "{warnings:?}"
    );
    assert!(
        config.describe_providers().contains("is unset"),
        "{}",
        config.describe_providers()
    );
}

#[test]
fn file_errors_name_the_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[server]\nlisten = \"127.0.0.1:1\"\nmax_body = 5\n").unwrap();
    let err = Config::load(Some(&path)).unwrap_err().to_string();
    assert!(
        err.contains("max_body") && err.contains("bad.toml"),
        "{err}"
    );
    let missing = Config::load(Some(&dir.path().join("none.toml")))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("none.toml"), "{missing}");
}

#[test]
fn model_sections_mix_window_and_policy() {
    let c = Config::from_toml(
        "[policy]\npreserve_recent = 8\n\
         [providers.local]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodels = [\"llama*\"]\n\
         [providers.local.policy]\ntrigger_ratio = 0.6\n\
         [providers.openai]\nbase_url = \"https://api.openai.com/v1\"\n\
         [models.\"llama*\"]\ncontext_window = 8192\ntoken_scale = 1.1\n\
         [models.\"llama3.1*\"]\ncontext_window = 131072\npreserve_recent = 4\n",
    )
    .unwrap();
    assert_eq!(
        c.model_config("llama3.1:8b").unwrap().context_window,
        Some(131072)
    );
    assert_eq!(c.model_config("llama2").unwrap().token_scale, Some(1.1));
    let p = c.policy_for("local", "llama3.1:8b");
    assert_eq!((p.trigger_ratio, p.preserve_recent), (0.6, 4));
    let p = c.policy_for("openai", "gpt-4o");
    assert_eq!((p.trigger_ratio, p.preserve_recent), (0.8, 8));
    assert_eq!(c.provider_for(Some("llama3")).unwrap().0, "local");
    assert_eq!(c.provider_for(Some("gpt-4o")).unwrap().0, "openai");
}

#[test]
fn without_a_catch_all_an_unlisted_model_has_no_provider() {
    let c = Config::from_toml(
        "[providers.b]\nbase_url = \"http://b\"\nmodels = [\"b*\"]\n\
         [providers.a]\nbase_url = \"http://a\"\nmodels = [\"a*\"]\n",
    )
    .unwrap();
    assert_eq!(c.provider_for(Some("bee")).unwrap().0, "b");
    assert!(c.provider_for(Some("zzz")).is_none());
    assert_eq!(c.provider_for(None).unwrap().0, "a");
}

#[test]
fn durations_are_human() {
    let c = Config::from_toml("[server]\nupstream_timeout = \"1m 30s\"\n").unwrap();
    assert_eq!(
        c.server.upstream_timeout,
        std::time::Duration::from_secs(90)
    );
}

#[test]
fn secrets_are_masked_when_printed() {
    let c = Config::from_toml(
        "[server]\napi_keys = [\"sk-very-secret\"]\nadmin_token = \"adm-secret\"\n",
    )
    .unwrap();
    let shown = toml::to_string_pretty(&c).unwrap();
    assert!(
        !shown.contains("sk-very-secret") && !shown.contains("adm-secret"),
        "{shown}"
    );
    assert!(shown.contains("****"));
    assert!(!format!("{c:?}").contains("sk-very-secret"));
}

#[test]
fn new_policy_knobs_load_at_every_level() {
    let c = Config::from_toml(
        "[policy]\nsummary_ratio = 0.2\nmax_depth = 3\nidle_fold_after = \"30m\"\n\
         [models.\"tiny*\"]\ncontext_window = 2048\nsummary_ratio = 0.1\nidle_fold_after = \"5m\"\n",
    )
    .unwrap();
    let p = c.policy_for("openai", "gpt-4o");
    assert_eq!((p.summary_ratio, p.max_depth), (0.2, 3));
    assert_eq!(
        p.idle_fold_after,
        Some(std::time::Duration::from_secs(1800))
    );
    let p = c.policy_for("openai", "tiny-1");
    assert_eq!(p.summary_ratio, 0.1);
    assert_eq!(p.idle_fold_after, Some(std::time::Duration::from_secs(300)));
    let err = Config::from_toml("[policy]\nsummary_ratio = 0\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("policy.summary_ratio"), "{err}");
}

#[test]
fn the_fold_deadline_defaults_to_a_minute_and_is_overridable() {
    use std::time::Duration;
    let c = Config::from_toml(
        "[policy]\nfold_deadline = \"90s\"\n[models.\"local*\"]\nfold_deadline = \"5m\"\n",
    )
    .unwrap();
    assert_eq!(Policy::default().fold_deadline, Duration::from_secs(60));
    assert_eq!(
        c.policy_for("openai", "gpt-4o").fold_deadline,
        Duration::from_secs(90)
    );
    assert_eq!(
        c.policy_for("openai", "local-llama").fold_deadline,
        Duration::from_secs(300)
    );
    let err = Config::from_toml("[policy]\nfold_deadline = \"0s\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("policy.fold_deadline must be above 0"),
        "{err}"
    );
}

#[test]
fn windows_too_small_for_a_fold_are_warned_about() {
    let fine = Config::from_toml("[models.\"smol*\"]\ncontext_window = 2048\n").unwrap();
    assert!(fine.small_window_warnings().is_empty());
    let tiny = Config::from_toml("[models.\"smol*\"]\ncontext_window = 700\n").unwrap();
    let warnings = tiny.small_window_warnings();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("models.\"smol*\""), "{warnings:?}");
    let fewer =
        Config::from_toml("[models.\"smol*\"]\ncontext_window = 700\npreserve_recent = 2\n")
            .unwrap();
    assert!(fewer.small_window_warnings().is_empty());
}

#[test]
fn compress_loads_at_every_level_and_rejects_unknown_keys() {
    let c = Config::from_toml(
        "[compress]\nmin_tokens = 300\nbatch = 2\n\
         [providers.local]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodels = [\"llama*\"]\n\
         [providers.local.compress]\nafter_turns = 5\n\
         [models.\"llama-big*\"]\ncontext_window = 4096\n\
         [models.\"llama-big*\".compress]\nenabled = false\nassistant = true\n",
    )
    .unwrap();
    let d = c.compress_for("openai", "gpt-4o");
    assert_eq!(
        (d.enabled, d.assistant, d.min_tokens, d.batch, d.after_turns),
        (true, false, 300, 2, 3)
    );
    let p = c.compress_for("local", "llama-3");
    assert_eq!((p.after_turns, p.batch), (5, 2));
    let m = c.compress_for("local", "llama-big-1");
    assert_eq!((m.enabled, m.assistant, m.after_turns), (false, true, 5));
    for (toml, key) in [
        ("[compress]\nbatc = 2\n", "batc"),
        ("[models.\"x*\".compress]\nmin_token = 2\n", "min_token"),
        ("[compress]\nbatch = 0\n", "compress.batch"),
        (
            "[models.\"x*\".compress]\nafter_turns = 0\n",
            "models.\"x*\".compress.after_turns",
        ),
    ] {
        let err = Config::from_toml(toml).unwrap_err().to_string();
        assert!(err.contains(key), "{toml:?} gave {err}");
    }
}

#[test]
fn recall_modes_and_their_keys() {
    let c = Config::from_toml("").unwrap();
    assert_eq!(c.archive.recall, RecallMode::Auto);
    assert_eq!(c.archive.inject_tokens, 600);
    assert_eq!(c.recall_for("gpt-4o"), Recall::Tool);
    let c = Config::from_toml("[models.\"local-*\"]\ntools = false\n").unwrap();
    assert_eq!(
        c.recall_for("local-7b"),
        Recall::Inject,
        "auto injects for tools = false"
    );
    assert_eq!(c.recall_for("gpt-4o"), Recall::Tool);
    for (mode, local, other) in [
        ("tool", Recall::Tool, Recall::Tool),
        ("inject", Recall::Inject, Recall::Inject),
        ("off", Recall::Off, Recall::Off),
    ] {
        let toml = format!("[archive]\nrecall = \"{mode}\"\n[models.\"local-*\"]\ntools = false\n");
        let c = Config::from_toml(&toml).unwrap();
        assert_eq!(
            (c.recall_for("local-7b"), c.recall_for("gpt-4o")),
            (local, other),
            "{mode}"
        );
    }
    let off = Config::from_toml("[archive]\nenabled = false\nrecall = \"inject\"\n").unwrap();
    assert_eq!(
        off.recall_for("x"),
        Recall::Off,
        "no archive, nothing to recall"
    );
    for (toml, key) in [
        ("[archive]\nrecall = \"sometimes\"\n", "recall"),
        ("[archive]\ninject_tokns = 100\n", "inject_tokns"),
        ("[archive]\ninject_tokens = 10\n", "archive.inject_tokens"),
        ("[models.\"x*\"]\ntools = \"no\"\n", "tools"),
        ("[models.\"x*\"]\ntool = false\n", "tool"),
    ] {
        let err = Config::from_toml(toml).unwrap_err().to_string();
        assert!(err.contains(key), "{toml:?} gave {err}");
    }
}
