//! Codex (the npm package `@openai/codex`, pinned in `.ci/run`) on its
//! documented set-up for a custom endpoint — its built-in OpenAI provider
//! with `openai_base_url` in `CODEX_HOME/config.toml` — through foldgate,
//! against a scripted mock Responses model: the model has Codex run
//! [`STEPS`] real shell commands with its own `exec_command` tool, then
//! answers. The window is small, so the loop folds at least twice, and the
//! mock makes Codex compact its own history once (remote compaction: a
//! request ending in a `compaction_trigger` item, answered with one
//! `compaction` item that Codex sends back from then on).
//!
//! What Codex 0.171 sends on its default model (seen with a logging mock):
//! first `GET /v1/responses` with `Upgrade: websocket` (its WebSocket
//! transport; a 426 makes it fall back to HTTP at once, anything else is
//! retried five times), then `POST /v1/responses`, always streamed, with
//! no top-level `tools` and no `instructions`: `input` starts with an
//! `{"type":"additional_tools","role":"developer","tools":[{"type":
//! "namespace",…}]}` item (its tools, about 37 kB), four developer
//! messages (its instructions, skills, multi-agent role and mode), a user
//! message with `# AGENTS.md instructions for …` and
//! `<environment_context>`, the task, sometimes a `{"type":
//! "configuration_update",…}` item, then `function_call` /
//! `function_call_output` pairs (`exec_command`, `{"cmd": …}`). After its
//! compaction it sends the same leading items, then the `compaction` item,
//! then the newer pairs.
//!
//! Checked, per the "Done when": Codex exits 0 with the final
//! answer; at least two folds; every forwarded request after a fold still
//! holds Codex's tools (the `additional_tools` item, or top-level `tools`
//! if it sent them), its developer messages and `configuration_update`
//! item, and the AGENTS.md marker; every call has its output; the
//! `compaction` item is in every request after it; no summarizer prompt
//! shows `[input_text]`-like placeholders; exactly one WebSocket upgrade
//! request reaches foldgate (counted by a relay in front of it), no retry
//! loop.

use crate::common;

use common::agents::cli::{
    self, Failures, STEPS, Steps, final_text, is_summarizer, responses_pairing, step_command,
    step_in, summary_in,
};
use common::mock::{self, Mock, Recorded};
use http::{Method, Response, StatusCode};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The model's window foldgate is told: Codex's leading items alone are
/// about 19k tokens of it, each step adds about 2k.
const WINDOW: u32 = 48_000;
/// The step after whose output the mock reports a prompt over Codex's
/// auto-compaction limit, so Codex compacts once.
const COMPACT_AFTER: u32 = 4;
/// Codex's `model_auto_compact_token_limit`: far above what the mock
/// reports, except once.
const COMPACT_LIMIT: u64 = 150_000;
/// The marker of the AGENTS.md in the working directory.
const MARKER: &str = "MARKER-CODEX-AGENTS-7f3a";
/// The compaction item the mock hands Codex.
const COMPACTION: &str = "ENCRYPTED-COMPACTION-0001";
/// The longest Codex may run.
const DEADLINE: Duration = Duration::from_secs(150);

/// What the mock saw.
#[derive(Default)]
struct Seen {
    steps: Steps,
    /// Agent-loop requests (`POST …/responses`), as received.
    turns: Mutex<Vec<Value>>,
    /// Compaction requests (a trailing `compaction_trigger`, or
    /// `…/responses/compact`).
    compactions: Mutex<Vec<String>>,
    /// foldgate's summarizer calls.
    summarizer: Mutex<Vec<Value>>,
    /// `GET …/responses`: Codex's WebSocket attempts that reached the mock.
    websocket: AtomicU32,
    /// Those of them that came without their `Upgrade` header.
    stripped: AtomicU32,
    /// Pairing violations (each got the API's 400).
    violations: Mutex<Vec<String>>,
    /// Anything else: method and path.
    others: Mutex<Vec<String>>,
    /// The `authorization` the first agent request carried.
    auth: Mutex<Option<String>>,
}

fn error(status: StatusCode, message: &str, code: &str) -> Response<foldgate::body::Body> {
    mock::json(
        status,
        &json!({"error": {"message": message, "type": "invalid_request_error", "param": "input", "code": code}}),
    )
}

fn answer(seen: &Seen, r: &Recorded) -> Response<foldgate::body::Body> {
    let path = r.uri.split('?').next().unwrap_or_default();
    if r.method == Method::GET && path.ends_with("/responses") {
        // Codex's WebSocket attempt. With its `Upgrade` intact the mock
        // declines it as a server without WebSocket support would (426:
        // Codex falls back to HTTP at once); a plain GET (the upgrade
        // stripped on the way) gets what the API answers a GET there.
        seen.websocket.fetch_add(1, Ordering::SeqCst);
        let upgrade = r
            .header("upgrade")
            .is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
        if upgrade {
            return error(
                StatusCode::UPGRADE_REQUIRED,
                "WebSocket is not supported here",
                "upgrade_required",
            );
        }
        seen.stripped.fetch_add(1, Ordering::SeqCst);
        return error(
            StatusCode::METHOD_NOT_ALLOWED,
            "Method GET not allowed on /v1/responses",
            "method_not_allowed",
        );
    }
    let body = serde_json::from_slice::<Value>(&r.body).ok();
    match (r.method.clone(), path, body) {
        (Method::POST, p, Some(body))
            if p.ends_with("/chat/completions") && is_summarizer(&body) =>
        {
            seen.summarizer.lock().unwrap().push(body.clone());
            mock::json(StatusCode::OK, &cli::chat_summary(&body))
        }
        (Method::POST, p, Some(_)) if p.ends_with("/responses/compact") => {
            seen.compactions
                .lock()
                .unwrap()
                .push("responses/compact".into());
            mock::json(
                StatusCode::OK,
                &json!({"output": [{"type": "compaction", "encrypted_content": COMPACTION}]}),
            )
        }
        (Method::POST, p, Some(body)) if p.ends_with("/responses") => {
            let mut auth = seen.auth.lock().unwrap();
            if auth.is_none() {
                *auth = Some(r.header("authorization").unwrap_or_default().to_string());
            }
            drop(auth);
            turn(seen, body)
        }
        (method, _, _) => {
            seen.others
                .lock()
                .unwrap()
                .push(format!("{method} {}", r.uri));
            error(
                StatusCode::NOT_FOUND,
                &format!("no route: {method} {}", r.uri),
                "not_found",
            )
        }
    }
}

/// The text of a request's last item when it is a call's output.
fn trailing_output(body: &Value) -> Option<String> {
    let last = body["input"].as_array()?.last()?;
    last["type"]
        .as_str()
        .is_some_and(|t| t.ends_with("_output"))
        .then(|| last["output"].to_string())
}

/// One agent-loop request: a compaction, a shell step, or the answer.
fn turn(seen: &Seen, body: Value) -> Response<foldgate::body::Body> {
    seen.turns.lock().unwrap().push(body.clone());
    if let Some(v) = responses_pairing(&body) {
        seen.violations.lock().unwrap().push(v.clone());
        return error(StatusCode::BAD_REQUEST, &v, "invalid_request");
    }
    let items = body["input"].as_array().cloned().unwrap_or_default();
    let tokens = u64::try_from(body.to_string().len() / 4).unwrap_or(0);
    let compacting = items
        .last()
        .is_some_and(|i| i["type"] == "compaction_trigger");
    let (output, input_tokens) = if compacting {
        seen.compactions
            .lock()
            .unwrap()
            .push("compaction_trigger".into());
        (
            vec![json!({"type": "compaction", "id": "cmp_1", "encrypted_content": COMPACTION})],
            tokens,
        )
    } else {
        let trailing = trailing_output(&body);
        let step = seen.steps.next(trailing.as_deref());
        // Once, right after step COMPACT_AFTER ran: a prompt over Codex's
        // limit, so it compacts.
        let over = trailing.as_deref().and_then(step_in) == Some(COMPACT_AFTER)
            && seen.compactions.lock().unwrap().is_empty();
        let reported = if over { COMPACT_LIMIT + 10_000 } else { tokens };
        let item = if step < STEPS {
            json!({"type": "function_call", "id": format!("fc_{step}"), "call_id": format!("call_{step}"),
                "name": "exec_command", "arguments": json!({"cmd": step_command(step)}).to_string(),
                "status": "completed"})
        } else {
            json!({"type": "message", "id": format!("msg_{step}"), "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": final_text(), "annotations": []}]})
        };
        (vec![item], reported)
    };
    let n = seen.turns.lock().unwrap().len();
    let response = json!({"id": format!("resp_{n}"), "object": "response", "created_at": 1_700_000_000,
        "status": "completed", "model": body["model"], "output": output,
        "usage": {"input_tokens": input_tokens, "output_tokens": 20, "total_tokens": input_tokens + 20,
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}});
    let mut created = response.clone();
    created["status"] = json!("in_progress");
    created["output"] = json!([]);
    let mut events = vec![json!({"type": "response.created", "response": created})];
    for (i, item) in output.iter().enumerate() {
        events.push(json!({"type": "response.output_item.added", "output_index": i, "item": item}));
        events.push(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
    }
    events.push(json!({"type": "response.completed", "response": response}));
    let text: String = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let mut e = e.clone();
            e["sequence_number"] = json!(i);
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

/// The leading context Codex sends before the conversation proper: its
/// `additional_tools` item, developer messages and `configuration_update`
/// items, each without its `id` (Codex renews ids after its compaction).
fn context_items(body: &Value) -> Vec<Value> {
    body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| {
            matches!(
                i["type"].as_str(),
                Some("additional_tools" | "configuration_update")
            ) || i["role"] == "developer"
        })
        .map(|i| {
            let mut i = i.clone();
            if let Some(o) = i.as_object_mut() {
                o.remove("id");
                o.remove("internal_chat_message_metadata_passthrough");
            }
            i
        })
        .collect()
}

/// The names of a body's top-level tools.
fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().or_else(|| t["type"].as_str()))
        .map(str::to_string)
        .collect()
}

/// A body's items in short: type (and role) each.
fn shape(body: &Value) -> String {
    let items = body["input"].as_array().into_iter().flatten();
    let described: Vec<String> = items
        .map(|i| match i["role"].as_str() {
            Some(role) => format!("{}:{role}", i["type"].as_str().unwrap_or("message")),
            None => i["type"].as_str().unwrap_or("?").to_string(),
        })
        .collect();
    described.join(" ")
}

#[tokio::test]
async fn codex_runs_25_shell_steps_folding_through_foldgate() {
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

    // Codex talks to foldgate through a relay that counts its WebSocket
    // upgrade requests.
    let tap = cli::Tap::start(fg.addr).await;
    let home = tempfile::tempdir().unwrap();
    let codex_home = home.path().join("codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "openai_base_url = \"{}/v1\"\n\
             approval_policy = \"never\"\n\
             sandbox_mode = \"danger-full-access\"\n\
             model_auto_compact_token_limit = {COMPACT_LIMIT}\n\
             check_for_update_on_startup = false\n\
             [analytics]\nenabled = false\n",
            tap.url
        ),
    )
    .unwrap();
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(
        workspace.path().join("AGENTS.md"),
        format!("{MARKER}: run each build step with the shell, one at a time.\n"),
    )
    .unwrap();

    let codex = cli::binary("codex", "FOLDGATE_CODEX_BIN");
    let mut command = tokio::process::Command::new(&codex);
    cli::clean_env(&mut command, home.path());
    command
        .env("CODEX_HOME", &codex_home)
        .env("OPENAI_API_KEY", "sk-codex-test")
        .env("CODEX_API_KEY", "sk-codex-test")
        .args([
            "exec",
            "--skip-git-repo-check",
            "Run the build steps with the shell, one at a time, then say what they add up to.",
        ])
        .current_dir(workspace.path());
    let run = cli::run(command, "Codex", DEADLINE).await;
    let mut failures = Failures::default();
    let turns = seen.turns.lock().unwrap().clone();
    let others = seen.others.lock().unwrap().clone();
    let violations = seen.violations.lock().unwrap().clone();
    cli::first_checks(
        &mut failures,
        (&run, "Codex", "codex"),
        &turns,
        &others,
        &violations,
    );

    // The WebSocket transport: exactly one upgrade request at foldgate,
    // no retry loop (any attempt the upstream saw is one foldgate passed
    // on, stripped or not).
    let ws_at_foldgate = tap.upgrades();
    let ws_at_mock = seen.websocket.load(Ordering::SeqCst);
    let ws_failed = run
        .stderr
        .matches("failed to connect to Responses WebSocket")
        .count();
    let reconnects = run.stderr.matches("Reconnecting...").count();
    failures.check(
        "one WebSocket attempt, no retry",
        ws_at_foldgate == 1 && ws_failed <= 1 && reconnects == 0,
        || {
            format!(
                "{ws_at_foldgate} upgrade requests reached foldgate, {ws_at_mock} GETs reached \
                 the upstream ({} without their Upgrade header), {ws_failed} failed connections \
                 and {reconnects} reconnects in Codex's log: {:?}",
                seen.stripped.load(Ordering::SeqCst),
                cli::lines_with(&run.stderr, &["WebSocket", "Reconnecting", "ERROR"])
            )
        },
    );

    let compactions = seen.compactions.lock().unwrap().clone();
    failures.check("Codex compacts once", compactions.len() == 1, || {
        format!("compaction requests: {compactions:?}")
    });
    let first = &turns[0];
    failures.check(
        "first request unfolded",
        summary_in(first).is_empty(),
        || shape(first),
    );
    let context = context_items(first);
    let tools = tool_names(first);
    failures.check(
        "Codex sent tools",
        !tools.is_empty() || context.iter().any(|i| i["type"] == "additional_tools"),
        || shape(first),
    );

    let mut summaries = Vec::new();
    let mut compacted = false;
    let mut fold_after_compaction = false;
    for (i, body) in turns.iter().enumerate() {
        failures.check(
            "AGENTS.md marker in every request",
            body.to_string().contains(MARKER),
            || format!("request {i} lost it: {}", shape(body)),
        );
        let summary = summary_in(body);
        if !summary.is_empty() && summaries.last() != Some(&summary) {
            summaries.push(summary.clone());
        }
        if !summaries.is_empty() {
            let held = context_items(body);
            let lost: Vec<String> = context
                .iter()
                .filter(|c| !held.contains(c))
                .map(|c| format!("{}:{}", c["type"].as_str().unwrap_or("message"), c["role"]))
                .collect();
            failures.check(
                "tools, developer messages and configuration_update kept after a fold",
                lost.is_empty(),
                || format!("request {i} lost {lost:?}: {}", shape(body)),
            );
            let names = tool_names(body);
            let missing: Vec<&String> = tools.iter().filter(|t| !names.contains(t)).collect();
            failures.check(
                "top-level tools kept after a fold",
                missing.is_empty(),
                || format!("request {i} lost {missing:?}"),
            );
        }
        let items = body["input"].as_array().cloned().unwrap_or_default();
        let holds = items
            .iter()
            .any(|it| it["type"] == "compaction" && it["encrypted_content"] == COMPACTION);
        if compacted {
            failures.check("compaction item kept", holds, || {
                format!(
                    "request {i}, after Codex's compaction, lost it: {}",
                    shape(body)
                )
            });
            fold_after_compaction |= !summary.is_empty();
        }
        compacted |= holds;
    }
    failures.check(
        "Codex sent its compaction item back",
        compacted,
        String::new,
    );
    failures.check(
        "a fold after Codex's compaction",
        fold_after_compaction,
        || "no request after the compaction item carried a summary".into(),
    );
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
    let auth = seen.auth.lock().unwrap().clone().unwrap_or_default();
    let key: Vec<(&str, &str)> = if auth.is_empty() {
        Vec::new()
    } else {
        vec![("authorization", auth.as_str())]
    };
    let folds = cli::admin_folds(&fg, &key).await;
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
        "Codex: {} requests, {} distinct summaries, {} summarizer calls, {folds} folds, \
         compactions {compactions:?}, {ws_at_foldgate} WebSocket attempts at foldgate",
        turns.len(),
        summaries.len(),
        calls.len()
    );
    failures.assert_none("Codex");
}
