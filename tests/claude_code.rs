//! Claude Code (the npm package `@anthropic-ai/claude-code`, pinned in
//! `.ci/run`) on its documented set-up for a custom endpoint —
//! `ANTHROPIC_BASE_URL` and `ANTHROPIC_API_KEY`, `-p` to run without a
//! terminal — through foldgate, against a scripted mock Messages model:
//! the model has Claude Code run [`STEPS`] real shell commands with its
//! own `Bash` tool, then answers. The window is small, so the loop folds
//! at least twice.
//!
//! What Claude Code 2.1.332 sends (seen with a logging mock): `POST
//! /v1/messages?beta=true`, streamed, `max_tokens` 128000, adaptive
//! `thinking`, `context_management`, its tools at the top level (`Bash`,
//! `Read`, `Edit`, `Write`, `Agent`, …), `system` as three text blocks
//! (a billing line, its identity, its instructions), and `messages`
//! starting with one user message of three text blocks (a
//! `<system-reminder>` with "Contents of …/CLAUDE.md", another reminder,
//! the task), then a message with role `system` (its environment), then
//! `tool_use` / `tool_result` pairs. With
//! `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC` it makes no other call.
//!
//! Checked: Claude Code exits 0 with the final answer; at least two folds;
//! every forwarded request after a fold still holds every tool Claude Code
//! sent; the CLAUDE.md marker is in every forwarded request; every
//! `tool_use` has its `tool_result` right after it; no summarizer prompt
//! shows a placeholder where the client sent text.

use crate::common;

use common::agents::anthropic_violation;
use common::agents::cli::{
    self, Failures, STEPS, Steps, final_text, is_summarizer, step_command, summary_in,
};
use common::bedrock::{self, BedrockMock};
use common::mock::{self, Mock, Recorded};
use http::{Method, Response, StatusCode};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The model's window foldgate is told. Claude Code asks for up to
/// 128,000 output tokens (`max_tokens`), which foldgate keeps free, so
/// this leaves 32k for the prompt: Claude Code's system prompt and tools
/// are about 12k tokens of it, each step adds about 2k.
const WINDOW: u32 = 160_000;
/// The marker of the CLAUDE.md in the working directory.
const MARKER: &str = "MARKER-CLAUDE-MD-5c1e";
/// The key Claude Code is given.
const KEY: &str = "sk-ant-claude-code-test";
/// The model the mock names in its answers when the body names none
/// (Bedrock's bodies name it in the path).
const MODEL: &str = "claude-opus-5-5";
/// The longest Claude Code may run.
const DEADLINE: Duration = Duration::from_secs(150);

#[derive(Default)]
struct Seen {
    steps: Steps,
    /// Agent-loop requests (they offer `Bash`), as received.
    turns: Mutex<Vec<Value>>,
    /// Other Messages calls of Claude Code's own.
    helpers: Mutex<Vec<Value>>,
    summarizer: Mutex<Vec<Value>>,
    violations: Mutex<Vec<String>>,
    others: Mutex<Vec<String>>,
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response<foldgate::body::Body> {
    mock::json(
        status,
        &json!({"type": "error", "error": {"type": kind, "message": message}}),
    )
}

fn answer(seen: &Seen, r: &Recorded) -> Response<foldgate::body::Body> {
    let path = r.uri.split('?').next().unwrap_or_default();
    let body = serde_json::from_slice::<Value>(&r.body).ok();
    match (r.method.clone(), body) {
        (Method::POST, Some(_)) if path.ends_with("/messages/count_tokens") => {
            let tokens = r.body.len() / 4;
            mock::json(StatusCode::OK, &json!({"input_tokens": tokens}))
        }
        (Method::POST, Some(body)) if path.ends_with("/messages") && is_summarizer(&body) => {
            seen.summarizer.lock().unwrap().push(body.clone());
            mock::json(StatusCode::OK, &cli::messages_summary(&body))
        }
        (Method::POST, Some(body)) if path.ends_with("/messages") => turn(seen, body, r.body.len()),
        (method, _) => {
            seen.others
                .lock()
                .unwrap()
                .push(format!("{method} {}", r.uri));
            error(
                StatusCode::NOT_FOUND,
                "not_found_error",
                &format!("no route: {}", r.uri),
            )
        }
    }
}

/// Whether a body offers Claude Code's `Bash` tool.
fn offers_bash(body: &Value) -> bool {
    tool_names(body).iter().any(|n| n == "Bash")
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .map(str::to_string)
        .collect()
}

/// The text of the request's trailing `tool_result`s, if it ends with any.
fn trailing_result(body: &Value) -> Option<String> {
    let last = body["messages"].as_array()?.last()?;
    let results: Vec<String> = last["content"]
        .as_array()?
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["content"].to_string())
        .collect();
    (!results.is_empty()).then(|| results.join("\n"))
}

fn turn(seen: &Seen, body: Value, len: usize) -> Response<foldgate::body::Body> {
    let stream = body["stream"] == json!(true);
    let message = match reply(seen, body, len) {
        Ok(message) => message,
        Err(response) => return *response,
    };
    if !stream {
        return mock::json(StatusCode::OK, &message);
    }
    let text: String = bedrock::events_of(&message)
        .iter()
        .map(|e| {
            format!(
                "event: {}\ndata: {e}\n\n",
                e["type"].as_str().unwrap_or_default()
            )
        })
        .collect();
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(foldgate::body::full(text))
        .unwrap()
}

/// The model's whole answer to an agent-loop or helper request (a 400
/// for a body that breaks the pairing rules): the next step's `Bash`
/// call, or the final answer.
fn reply(
    seen: &Seen,
    body: Value,
    len: usize,
) -> Result<Value, Box<Response<foldgate::body::Body>>> {
    if let Some(v) = anthropic_violation(&body) {
        seen.violations.lock().unwrap().push(v.clone());
        return Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            &v,
        )));
    }
    let blocks = if offers_bash(&body) {
        seen.turns.lock().unwrap().push(body.clone());
        let step = seen.steps.next(trailing_result(&body).as_deref());
        if step < STEPS {
            vec![
                json!({"type": "text", "text": format!("Running build step {step}.")}),
                json!({"type": "tool_use", "id": format!("toolu_{step:02}"), "name": "Bash",
                    "input": {"command": step_command(step), "description": format!("Run build step {step}")}}),
            ]
        } else {
            vec![json!({"type": "text", "text": final_text()})]
        }
    } else {
        seen.helpers.lock().unwrap().push(body.clone());
        vec![json!({"type": "text", "text": "Build steps"})]
    };
    let n = seen.turns.lock().unwrap().len() + seen.helpers.lock().unwrap().len();
    let stop = if blocks.iter().any(|b| b["type"] == "tool_use") {
        "tool_use"
    } else {
        "end_turn"
    };
    let model = body.get("model").cloned().unwrap_or(json!(MODEL));
    let usage = json!({"input_tokens": len / 4, "output_tokens": 40});
    Ok(
        json!({"id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": model,
        "content": blocks, "stop_reason": stop, "stop_sequence": null, "usage": usage}),
    )
}

/// A body's messages in short: role and block types each.
fn shape(body: &Value) -> String {
    let messages = body["messages"].as_array().into_iter().flatten();
    let described: Vec<String> = messages
        .map(|m| {
            let blocks: Vec<&str> = match m["content"].as_array() {
                Some(blocks) => blocks.iter().filter_map(|b| b["type"].as_str()).collect(),
                None => vec!["str"],
            };
            format!(
                "{}[{}]",
                m["role"].as_str().unwrap_or("?"),
                blocks.join(",")
            )
        })
        .collect();
    described.join(" ")
}

#[tokio::test]
async fn claude_code_runs_25_shell_steps_folding_through_foldgate() {
    let seen = Arc::new(Seen::default());
    let state = seen.clone();
    let mock = Mock::start(move |r: Recorded| {
        let state = state.clone();
        async move { answer(&state, &r) }
    })
    .await;
    let fg = cli::foldgate(
        &format!(
            "[providers.anthropic]\nbase_url = \"{}/v1\"\napi = \"anthropic\"\n",
            mock.url
        ),
        "claude-*",
        WINDOW,
    )
    .await;

    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let mut command = claude(home.path(), workspace.path());
    command
        .env("ANTHROPIC_BASE_URL", &fg.url)
        .env("ANTHROPIC_API_KEY", KEY);
    let run = cli::run(command, "Claude Code", DEADLINE).await;
    let others = seen.others.lock().unwrap().clone();
    check_run(&seen, &run, &fg, &[("x-api-key", KEY)], others).await;
}

/// The checks of one Claude Code run against what the mock saw; `others`
/// are the calls the mock did not know.
async fn check_run(
    seen: &Seen,
    run: &cli::Run,
    fg: &common::Foldgate,
    admin: &[(&str, &str)],
    others: Vec<String>,
) {
    let mut failures = Failures::default();
    let turns = seen.turns.lock().unwrap().clone();
    let violations = seen.violations.lock().unwrap().clone();
    cli::first_checks(
        &mut failures,
        (run, "Claude Code", "claude"),
        &turns,
        &others,
        &violations,
    );

    for body in seen.helpers.lock().unwrap().iter() {
        failures.check("helper calls unfolded", summary_in(body).is_empty(), || {
            shape(body)
        });
    }
    failures.check(
        "one request per step and one for the answer",
        turns.len() == STEPS as usize + 1,
        || format!("{} requests", turns.len()),
    );
    let tools = tool_names(&turns[0]);
    let mut summaries: Vec<String> = Vec::new();
    for (i, body) in turns.iter().enumerate() {
        failures.check(
            "CLAUDE.md marker in every request",
            body.to_string().contains(MARKER),
            || format!("request {i} lost it: {}", shape(body)),
        );
        let summary = summary_in(body);
        if !summary.is_empty() && summaries.last() != Some(&summary) {
            summaries.push(summary);
        }
        if !summaries.is_empty() {
            let names = tool_names(body);
            let missing: Vec<&String> = tools.iter().filter(|t| !names.contains(t)).collect();
            failures.check("tools kept after a fold", missing.is_empty(), || {
                format!("request {i} lost {missing:?}")
            });
        }
    }
    let last = turns.last().unwrap();
    failures.check("last request folded", !summary_in(last).is_empty(), || {
        shape(last)
    });
    let calls = seen.summarizer.lock().unwrap().clone();
    let placeholders: Vec<(usize, Vec<String>)> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| (i, cli::placeholders(&cli::summarizer_prompt(c))))
        .filter(|(_, p)| !p.is_empty())
        .collect();
    failures.check(
        "no placeholders in summarizer prompts",
        placeholders.is_empty(),
        || format!("(call, placeholders): {placeholders:?}"),
    );
    let folds = cli::admin_folds(fg, admin).await;
    failures.check(
        "at least two folds",
        summaries.len() >= 2 && calls.len() >= 2 && folds >= 2,
        || {
            format!(
                "{} distinct summaries forwarded, {} summarizer calls, {folds} folds on the admin API",
                summaries.len(),
                calls.len()
            )
        },
    );
    eprintln!(
        "Claude Code: {} requests, {} distinct summaries, {} summarizer calls, {folds} folds",
        turns.len(),
        summaries.len(),
        calls.len()
    );
    failures.assert_none("Claude Code");
}

/// Claude Code in its Bedrock mode, as Anthropic documents it for an LLM
/// gateway (`CLAUDE_CODE_USE_BEDROCK`, `ANTHROPIC_BEDROCK_BASE_URL` at
/// foldgate, `CLAUDE_CODE_SKIP_BEDROCK_AUTH`: it signs nothing), through
/// foldgate to the mock Bedrock of `common::bedrock`, which refuses any
/// request whose SigV4 signature (foldgate's, with the provider's keys)
/// does not match what it received and streams AWS event-stream frames.
/// The same 25 steps and checks as on the Messages route; besides, every
/// request reached the mock signed and well-formed, and the summarizer
/// asked `invoke` on the conversation's model.
///
/// What Claude Code 2.1.332 sends in this mode (seen with a logging
/// server): `GET /inference-profiles?type=SYSTEM_DEFINED` first (the
/// control plane's list, to the same base URL), then `POST
/// /model/us.anthropic.claude-opus-5-5/invoke-with-response-stream`
/// (the id unencoded), its beta flags in an `anthropic-beta` header, the
/// body without `model` and `stream`, with `anthropic_version`.
#[tokio::test]
async fn claude_code_in_bedrock_mode_runs_25_shell_steps_folding_through_foldgate() {
    let seen = Arc::new(Seen::default());
    let state = seen.clone();
    let mock = BedrockMock::start(Arc::new(move |_path: &str, body: &Value| {
        if is_summarizer(body) {
            state.summarizer.lock().unwrap().push(body.clone());
            return Ok(cli::messages_summary(body));
        }
        let len = body.to_string().len();
        reply(&state, body.clone(), len)
    }))
    .await;
    bedrock::credentials_env();
    let fg = cli::foldgate(&bedrock::provider(mock.url()), "*claude*", WINDOW).await;

    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let mut command = claude(home.path(), workspace.path());
    command
        .env("CLAUDE_CODE_USE_BEDROCK", "1")
        .env("ANTHROPIC_BEDROCK_BASE_URL", &fg.url)
        .env("CLAUDE_CODE_SKIP_BEDROCK_AUTH", "1")
        .env("AWS_REGION", bedrock::REGION);
    let run = cli::run(command, "Claude Code (Bedrock)", DEADLINE).await;
    let others = mock.seen.refused.lock().unwrap().clone();
    let paths: Vec<String> = mock
        .seen
        .bodies
        .lock()
        .unwrap()
        .iter()
        .map(|(p, _)| p.clone())
        .collect();
    let signed = mock
        .mock
        .requests
        .lock()
        .unwrap()
        .iter()
        .all(|r| bedrock::verify(r).is_ok());
    let summarizer_calls = seen.summarizer.lock().unwrap().len();
    let on_invoke = paths.iter().filter(|p| p.ends_with("/invoke")).count();
    eprintln!(
        "Bedrock paths: {:?}",
        paths.iter().collect::<std::collections::BTreeSet<_>>()
    );
    assert!(
        signed,
        "a request reached the mock without foldgate's signature"
    );
    assert!(
        summarizer_calls > 0 && on_invoke >= summarizer_calls,
        "{summarizer_calls} summarizer calls, {on_invoke} on invoke: {paths:?}"
    );
    check_run(&seen, &run, &fg, &[], others).await;
}

/// Claude Code in print mode on its defaults, asked to run the build
/// steps, in `workspace` (its `CLAUDE.md` written) with `home` as its
/// home; each test adds where it sends its requests.
fn claude(home: &std::path::Path, workspace: &std::path::Path) -> tokio::process::Command {
    std::fs::write(
        workspace.join("CLAUDE.md"),
        format!("{MARKER}: run each build step with Bash, one at a time.\n"),
    )
    .unwrap();
    let mut command = tokio::process::Command::new(cli::binary("claude", "FOLDGATE_CLAUDE_BIN"));
    cli::clean_env(&mut command, home);
    command
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .args([
            "-p",
            "Run the build steps with Bash, one at a time, then say what they add up to.",
            "--allowedTools",
            "Bash",
        ])
        .current_dir(workspace);
    command
}
