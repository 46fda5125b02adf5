//! OpenCode (the npm package `opencode-ai`, pinned in `.ci/run`) on its
//! documented set-up for a custom endpoint — a provider in `opencode.json`
//! with `"npm": "@ai-sdk/openai-compatible"` and `options.baseURL` (chat
//! completions) — through foldgate, against a scripted mock model: the
//! model has OpenCode write its plan with `todowrite`, run [`STEPS`] real
//! shell commands with its own `bash` tool, then answer. The window is
//! small, so the loop folds at least twice.
//!
//! What OpenCode 1.18.33 sends (seen with a logging mock): `POST
//! /v1/chat/completions`, streamed with `stream_options.include_usage`;
//! first a title request (its own system prompt, no tools), then the
//! loop: one `system` message holding its instructions and, after
//! "Instructions from: …/AGENTS.md", the file's text, the user's task,
//! then assistant `tool_calls` / `tool` message pairs; its tools at the
//! top level (`bash`, `edit`, `glob`, `grep`, `read`, `skill`, `task`,
//! `todowrite`, `webfetch`, `write`).
//!
//! Checked: OpenCode exits 0 with the final answer; at least two folds;
//! every forwarded request after a fold still holds every tool OpenCode
//! sent; the AGENTS.md marker and the plan (`todowrite`'s list) are in
//! every forwarded request after they were sent; every tool call has its
//! tool message; no summarizer prompt shows a placeholder where the
//! client sent text.

use crate::common;

use common::agents::cli::{
    self, Failures, STEPS, Steps, chat_violation, final_text, is_summarizer, step_command,
    summary_in,
};
use common::mock::{self, Mock, Recorded};
use http::{Method, Response, StatusCode};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The model's window foldgate is told: OpenCode's system prompt and tools
/// are about 8k tokens of it, each step adds about 2k.
const WINDOW: u32 = 32_000;
/// The marker of the AGENTS.md in the working directory.
const MARKER: &str = "MARKER-OPENCODE-AGENTS-9d2b";
/// The marker of the plan the model writes with `todowrite`.
const PLAN: &str = "PLAN-MARKER-4e8a";
/// The key OpenCode is given.
const KEY: &str = "sk-opencode-test";
/// The longest OpenCode may run.
const DEADLINE: Duration = Duration::from_secs(150);

#[derive(Default)]
struct Seen {
    steps: Steps,
    planned: AtomicBool,
    /// Agent-loop requests (they offer `bash`), as received.
    turns: Mutex<Vec<Value>>,
    /// OpenCode's own calls without tools (its title), as received.
    helpers: Mutex<Vec<Value>>,
    summarizer: Mutex<Vec<Value>>,
    violations: Mutex<Vec<String>>,
    others: Mutex<Vec<String>>,
}

fn error(status: StatusCode, message: &str) -> Response<foldgate::body::Body> {
    mock::json(
        status,
        &json!({"error": {"message": message, "type": "invalid_request_error", "param": "messages", "code": null}}),
    )
}

fn answer(seen: &Seen, r: &Recorded) -> Response<foldgate::body::Body> {
    let path = r.uri.split('?').next().unwrap_or_default();
    let body = serde_json::from_slice::<Value>(&r.body).ok();
    match (r.method.clone(), body) {
        (Method::POST, Some(body))
            if path.ends_with("/chat/completions") && is_summarizer(&body) =>
        {
            seen.summarizer.lock().unwrap().push(body.clone());
            mock::json(StatusCode::OK, &cli::chat_summary(&body))
        }
        (Method::POST, Some(body)) if path.ends_with("/chat/completions") => {
            turn(seen, body, r.body.len())
        }
        (method, _) => {
            seen.others
                .lock()
                .unwrap()
                .push(format!("{method} {}", r.uri));
            error(
                StatusCode::NOT_FOUND,
                &format!("no route: {method} {}", r.uri),
            )
        }
    }
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

/// The text of the request's trailing tool messages, if it ends with any.
fn trailing_result(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    let results: Vec<String> = messages
        .iter()
        .rev()
        .take_while(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect();
    (!results.is_empty()).then(|| results.join("\n"))
}

/// The plan: one todo per step, the first carrying [`PLAN`].
fn plan() -> Value {
    let todos: Vec<Value> = (0..STEPS)
        .map(|s| {
            let content = if s == 0 {
                format!("{PLAN}: run build step {s}")
            } else {
                format!("run build step {s}")
            };
            json!({"content": content, "status": if s == 0 { "in_progress" } else { "pending" }, "priority": "high"})
        })
        .collect();
    json!({"todos": todos})
}

fn turn(seen: &Seen, body: Value, len: usize) -> Response<foldgate::body::Body> {
    if let Some(v) = chat_violation(&body) {
        seen.violations.lock().unwrap().push(v.clone());
        return error(StatusCode::BAD_REQUEST, &v);
    }
    let (content, call) = if tool_names(&body).iter().any(|n| n == "bash") {
        seen.turns.lock().unwrap().push(body.clone());
        let trailing = trailing_result(&body);
        if !seen.planned.swap(true, Ordering::SeqCst) {
            (
                "Planning the build.".to_string(),
                Some(("call_plan".to_string(), "todowrite", plan())),
            )
        } else {
            let step = seen.steps.next(trailing.as_deref());
            if step < STEPS {
                (
                    format!("Running build step {step}."),
                    Some((
                        format!("call_{step:02}"),
                        "bash",
                        json!({"command": step_command(step)}),
                    )),
                )
            } else {
                (final_text(), None)
            }
        }
    } else {
        seen.helpers.lock().unwrap().push(body.clone());
        ("Build steps".to_string(), None)
    };
    let mut delta = json!({"role": "assistant", "content": content});
    let finish = match &call {
        Some((id, name, args)) => {
            delta["tool_calls"] = json!([{"index": 0, "id": id, "type": "function",
                "function": {"name": name, "arguments": args.to_string()}}]);
            "tool_calls"
        }
        None => "stop",
    };
    let usage =
        json!({"prompt_tokens": len / 4, "completion_tokens": 40, "total_tokens": len / 4 + 40});
    if body["stream"] != json!(true) {
        let mut message = delta.clone();
        if let Some(calls) = message.get_mut("tool_calls").and_then(Value::as_array_mut) {
            for c in calls {
                c.as_object_mut().unwrap().remove("index");
            }
        }
        return mock::json(
            StatusCode::OK,
            &json!({"id": "chatcmpl-mock", "object": "chat.completion", "created": 1, "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}),
        );
    }
    let chunk = |choices: Value, usage: Option<&Value>| {
        let mut c = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1,
            "model": body["model"], "choices": choices});
        if let Some(u) = usage {
            c["usage"] = u.clone();
        }
        format!("data: {c}\n\n")
    };
    let mut text = chunk(
        json!([{"index": 0, "delta": delta, "finish_reason": null}]),
        None,
    );
    text.push_str(&chunk(
        json!([{"index": 0, "delta": {}, "finish_reason": finish}]),
        None,
    ));
    text.push_str(&chunk(json!([]), Some(&usage)));
    text.push_str("data: [DONE]\n\n");
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(foldgate::body::full(text))
        .unwrap()
}

/// A body's messages in short: role (and tool calls) each.
fn shape(body: &Value) -> String {
    let messages = body["messages"].as_array().into_iter().flatten();
    let described: Vec<String> = messages
        .map(|m| {
            let calls = m["tool_calls"].as_array().map_or(0, Vec::len);
            match calls {
                0 => m["role"].as_str().unwrap_or("?").to_string(),
                n => format!("{}+{n}calls", m["role"].as_str().unwrap_or("?")),
            }
        })
        .collect();
    described.join(" ")
}

#[tokio::test]
async fn opencode_runs_25_shell_steps_folding_through_foldgate() {
    let seen = Arc::new(Seen::default());
    let state = seen.clone();
    let mock = Mock::start(move |r: Recorded| {
        let state = state.clone();
        async move { answer(&state, &r) }
    })
    .await;
    let fg = cli::foldgate(
        &format!("[providers.openai]\nbase_url = \"{}/v1\"\n", mock.url),
        "*",
        WINDOW,
    )
    .await;

    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(
        workspace.path().join("AGENTS.md"),
        format!("{MARKER}: run each build step with bash, one at a time.\n"),
    )
    .unwrap();
    // OpenCode's own window is left large: folding is foldgate's job here.
    let config = json!({
        "$schema": "https://opencode.ai/config.json",
        "model": "foldgate/mock-coder",
        "small_model": "foldgate/mock-coder",
        "autoupdate": false,
        "share": "disabled",
        "permission": {"bash": "allow", "edit": "allow"},
        "provider": {"foldgate": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "foldgate",
            "options": {"baseURL": format!("{}/v1", fg.url), "apiKey": KEY},
            "models": {"mock-coder": {"name": "Mock coder", "tool_call": true,
                "limit": {"context": 1_000_000, "output": 8000}}},
        }},
    });
    std::fs::write(workspace.path().join("opencode.json"), config.to_string()).unwrap();
    let opencode = cli::binary("opencode", "FOLDGATE_OPENCODE_BIN");
    let mut command = tokio::process::Command::new(&opencode);
    cli::clean_env(&mut command, home.path());
    command
        .env("XDG_CONFIG_HOME", home.path().join(".config"))
        .env("XDG_DATA_HOME", home.path().join(".local/share"))
        .env("XDG_CACHE_HOME", home.path().join(".cache"))
        .env("XDG_STATE_HOME", home.path().join(".local/state"))
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
        .env("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1")
        .env("OPENCODE_DISABLE_SHARE", "1")
        .args([
            "run",
            "Plan the build steps with todowrite, run them with bash one at a time, then say what they add up to.",
        ])
        .current_dir(workspace.path());
    let run = cli::run(command, "OpenCode", DEADLINE).await;
    let mut failures = Failures::default();
    let turns = seen.turns.lock().unwrap().clone();
    let others = seen.others.lock().unwrap().clone();
    let violations = seen.violations.lock().unwrap().clone();
    cli::first_checks(
        &mut failures,
        (&run, "OpenCode", "opencode"),
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
        "one request for the plan, one per step and one for the answer",
        turns.len() == STEPS as usize + 2,
        || format!("{} requests", turns.len()),
    );
    let tools = tool_names(&turns[0]);
    let mut summaries: Vec<String> = Vec::new();
    for (i, body) in turns.iter().enumerate() {
        let text = body.to_string();
        failures.check(
            "AGENTS.md marker in every request",
            text.contains(MARKER),
            || format!("request {i} lost it: {}", shape(body)),
        );
        failures.check(
            "todowrite plan in every request after it",
            i == 0 || text.contains(PLAN),
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
    let folds = cli::admin_folds(&fg, &[("authorization", &format!("Bearer {KEY}"))]).await;
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
        "OpenCode: {} requests, {} distinct summaries, {} summarizer calls, {folds} folds",
        turns.len(),
        summaries.len(),
        calls.len()
    );
    failures.assert_none("OpenCode");
}
