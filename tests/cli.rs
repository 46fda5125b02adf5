//! The `foldgate` binary as a user runs it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly; the no-panic rule is for the request path"
)]

use std::process::Command;

fn foldgate() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_foldgate"));
    cmd.env_remove("FOLDGATE_LOG");
    cmd
}

/// `foldgate check-config` on a file named `name` holding `toml`.
fn check_config(name: &str, toml: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, toml).unwrap();
    foldgate()
        .args(["check-config", "--config"])
        .arg(&path)
        .output()
        .unwrap()
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
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("preserve_recnt") && err.contains("typo.toml"),
        "{err}"
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
    use std::io::Write;
    let mut child = foldgate()
        .args(["estimate", "--model", "gpt-4o"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let body = r#"{"model":"x","max_tokens":500,"messages":[{"role":"user","content":"Hello there, how are you?"}]}"#;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
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
