//! Gemini CLI (the npm package `@google/gemini-cli`, which `.ci/run`
//! installs) on its defaults through foldgate, against a mock Gemini that
//! scripts an agent loop: the model reads one note file after another with
//! Gemini CLI's own `read_file` tool, then answers. The window is small, so
//! the loop folds: every turn of the loop keeps Gemini's rules (roles,
//! function pairs), and every content the CLI sent is in the view or in
//! its summary.
//!
//! Besides the loop, Gemini CLI calls the API for itself: a router asks a
//! small model how complex the prompt is, and past 30 turns a loop
//! detector asks a flash model whether the agent is stuck (both JSON out,
//! on `:generateContent`). The mock answers those as Gemini would (the
//! loop detector's request breaks a function pair by itself, so it gets
//! Gemini's 400, which the CLI shrugs off), `:countTokens` with a count,
//! and anything else with a 404 the test reports.

use crate::common;

use common::gemini::{self, is_summarizer, pairing_violation, summary_of, violation};
use common::llm::tags;
use common::mock::{self, Mock, Recorded};
use common::{Foldgate, send};
use foldgate::body::Body;
use http::{Method, Response, StatusCode};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Notes the model reads, one per step, before it answers.
const STEPS: u32 = 32;
/// Tags (`[mN]`) of the prompt, the model's turns and the notes.
const TASK_TAG: u32 = 1;
const MODEL_TAG: u32 = 1000;
const NOTE_TAG: u32 = 2000;
/// The model's window: Gemini CLI's system instruction and first prompt
/// alone take about 7,800 of it (38 kB with the tool declarations).
const WINDOW: u32 = 20_000;
/// The key the user gives Gemini CLI (`GEMINI_API_KEY`).
const KEY: &str = "g-cli-key";
/// The longest the CLI may run.
const DEADLINE: Duration = Duration::from_secs(180);

fn final_text() -> String {
    format!("FINAL: all {STEPS} notes read, the build is fixed.")
}

fn note_name(step: u32) -> String {
    format!("note_{step:02}.txt")
}

/// A note file: its tag first, then lines with specifics worth keeping.
fn note(step: u32) -> String {
    let mut text = format!("[m{}] note {step} of the build log\n", NOTE_TAG + step);
    for line in 0..24 {
        text.push_str(&format!(
            "step {step} line {line}: service module_{step}_{line} listens on port {}, compared the parser and the cache again\n",
            9000 + step * 100 + line
        ));
    }
    text
}

/// The `gemini` executable on `PATH`; a clear failure when it is missing.
fn gemini_cli() -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("gemini"))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "Gemini CLI is not installed: no `gemini` on PATH. .ci/run installs it \
                 (tests/agents/package-lock.json) and scripts/test puts it on PATH; \
                 this test never skips"
            )
        })
}

/// The mock Gemini: the summarizer, Gemini CLI's JSON helpers, the agent
/// loop; a 404 for anything else.
fn answer(r: &Recorded) -> Response<Body> {
    if r.uri.contains(":countTokens") {
        return mock::json(StatusCode::OK, &json!({"totalTokens": r.body.len() / 4}));
    }
    if !is_generate(&r.uri) {
        return gemini::error(404, "NOT_FOUND", &format!("no such method: {}", r.uri));
    }
    let Ok(body) = serde_json::from_slice::<Value>(&r.body) else {
        return gemini::error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.");
    };
    if is_summarizer(&body) {
        return mock::json(StatusCode::OK, &gemini::summary(&body));
    }
    // Gemini accepts consecutive user contents (the CLI's helpers send
    // them), never a broken function pair.
    if let Some(v) = pairing_violation(&body) {
        return gemini::error(400, "INVALID_ARGUMENT", &v);
    }
    let parts = match json_schema(&body) {
        Some(schema) => vec![json!({"text": helper_answer(schema).to_string()})],
        None => {
            if let Some(v) = violation(&body) {
                return gemini::error(400, "INVALID_ARGUMENT", &v);
            }
            agent_step(&body)
        }
    };
    let prompt = u64::try_from(r.body.len() / 4).unwrap_or(0);
    let event = gemini::response(parts, prompt);
    if r.uri.contains("alt=sse") {
        return Response::builder()
            .header("content-type", "text/event-stream")
            .body(foldgate::body::full(format!("data: {event}\r\n\r\n")))
            .unwrap();
    }
    if r.uri.contains(":streamGenerateContent") {
        return mock::json(StatusCode::OK, &json!([event]));
    }
    mock::json(StatusCode::OK, &event)
}

/// Whether `uri` is a `generateContent` or `streamGenerateContent` call.
fn is_generate(uri: &str) -> bool {
    uri.contains(":generateContent") || uri.contains(":streamGenerateContent")
}

/// The JSON schema a helper call asks its answer to follow.
fn json_schema(body: &Value) -> Option<&Value> {
    let config = &body["generationConfig"];
    config
        .get("responseJsonSchema")
        .or_else(|| config.get("responseSchema"))
}

/// A helper's JSON answer: a simple prompt for the router, no loop for the
/// loop detector, the user to speak next.
fn helper_answer(schema: &Value) -> Value {
    let mut out = Map::new();
    for (name, property) in schema["properties"].as_object().into_iter().flatten() {
        let kind = property["type"].as_str().unwrap_or("").to_ascii_lowercase();
        let value = match (name.as_str(), kind.as_str()) {
            ("complexity_score", _) => json!(10),
            ("next_speaker", _) => json!("user"),
            (_, "integer" | "number") => json!(0),
            (_, "boolean") => json!(false),
            _ => json!("mock"),
        };
        out.insert(name.clone(), value);
    }
    Value::Object(out)
}

/// The newest note a request's last content answered with, if any.
fn last_note(body: &Value) -> Option<u32> {
    let last = body["contents"].as_array()?.last()?;
    tags(&last.to_string())
        .into_iter()
        .filter(|t| (NOTE_TAG..NOTE_TAG + STEPS).contains(t))
        .max()
        .map(|t| t - NOTE_TAG)
}

/// The agent loop: read the next note, or answer once all are read.
fn agent_step(body: &Value) -> Vec<Value> {
    let step = last_note(body).map_or(0, |n| n + 1);
    if step >= STEPS {
        return vec![json!({"text": final_text()})];
    }
    vec![
        json!({"text": format!("[m{}] Reading note {step}.", MODEL_TAG + step)}),
        json!({"functionCall": {"name": "read_file", "args": {"file_path": note_name(step)}}}),
    ]
}

/// What kind of call a request the mock received was.
#[derive(Debug, PartialEq)]
enum Kind {
    Summarizer,
    Helper,
    Loop,
    Other,
}

fn kind(r: &Recorded) -> Kind {
    match serde_json::from_slice::<Value>(&r.body) {
        Ok(body) if is_summarizer(&body) => Kind::Summarizer,
        Ok(body) if json_schema(&body).is_some() => Kind::Helper,
        Ok(_) if is_generate(&r.uri) => Kind::Loop,
        _ => Kind::Other,
    }
}

/// A temporary HOME whose settings choose API-key auth (without it the
/// CLI stops: "Invalid auth method selected") and turn usage statistics
/// off (they would go to Google, off this machine).
fn home() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join(".gemini");
    std::fs::create_dir_all(&dir).unwrap();
    let settings = json!({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": false},
    });
    std::fs::write(dir.join("settings.json"), settings.to_string()).unwrap();
    home
}

/// Runs `gemini -p PROMPT` in `workspace` against `base`, bounded by
/// [`DEADLINE`]; returns its stdout, asserting it exited 0.
async fn run_cli(base: &str, home: &Path, workspace: &Path, prompt: &str) -> String {
    let cli = gemini_cli();
    let mut command = tokio::process::Command::new(&cli);
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("TMPDIR", home)
        .env("GOOGLE_GEMINI_BASE_URL", base)
        .env("GEMINI_API_KEY", KEY)
        // Headless runs need the folder trusted.
        .args(["--skip-trust", "-p", prompt])
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(DEADLINE, command.output())
        .await
        .unwrap_or_else(|_| panic!("{} did not finish within {DEADLINE:?}", cli.display()))
        .unwrap_or_else(|e| panic!("{} could not run: {e}", cli.display()));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "Gemini CLI failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// A body's contents in short: each one's role and the kinds of its parts.
fn shape(body: &Value) -> String {
    let contents = body["contents"].as_array().into_iter().flatten();
    let described: Vec<String> = contents
        .map(|c| {
            let parts: Vec<String> = c["parts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p.as_object()?.keys().next().cloned())
                .collect();
            format!("{}[{}]", c["role"].as_str().unwrap_or("?"), parts.join(","))
        })
        .collect();
    described.join(" ")
}

/// Tags the CLI's history holds when it sends its request for `step`:
/// the prompt, and each earlier step's model turn and note.
fn sent_by_then(step: u32) -> BTreeSet<u32> {
    let mut out = BTreeSet::from([TASK_TAG]);
    for s in 0..step {
        out.insert(MODEL_TAG + s);
        out.insert(NOTE_TAG + s);
    }
    out
}

#[tokio::test]
async fn gemini_cli_agent_loop_folds_through_foldgate() {
    let mock = Mock::start(|r: Recorded| async move { answer(&r) }).await;
    let fg = Foldgate::start(&format!(
        "[providers.google]\nbase_url = \"{}\"\napi = \"gemini\"\nmodels = [\"gemini-*\"]\n\
         [models.\"gemini-*\"]\ncontext_window = {WINDOW}\n",
        mock.url
    ))
    .await;
    let home = home();
    let workspace = tempfile::tempdir().unwrap();
    for step in 0..STEPS {
        std::fs::write(workspace.path().join(note_name(step)), note(step)).unwrap();
    }
    let prompt = format!(
        "[m{TASK_TAG}] Read the notes note_00.txt to {} one at a time, then say what they add up to.",
        note_name(STEPS - 1)
    );
    let started = Instant::now();
    let stdout = run_cli(&fg.url, home.path(), workspace.path(), &prompt).await;
    eprintln!("Gemini CLI ran {:?}", started.elapsed());
    assert!(stdout.contains(&final_text()), "{stdout}");

    let received = mock.received();
    let others: Vec<&str> = received
        .iter()
        .filter(|r| kind(r) == Kind::Other)
        .map(|r| r.uri.as_str())
        .collect();
    assert!(
        others.is_empty(),
        "calls the mock does not know: {others:?}"
    );
    for r in &received {
        assert_eq!(r.header("x-goog-api-key"), Some(KEY), "{}", r.uri);
    }
    // The helpers' calls are small: foldgate forwards them as the CLI sent
    // them. (The loop detector's breaks a function pair by itself: it
    // ends on a model turn with text and a call, which Gemini rejects.)
    let helpers: Vec<Value> = received
        .iter()
        .filter(|r| kind(r) == Kind::Helper)
        .map(Recorded::json)
        .collect();
    for body in &helpers {
        assert_eq!(
            summary_of(body),
            "",
            "a helper call was folded: {}",
            shape(body)
        );
    }
    for field in ["complexity_score", "unproductive_state_confidence"] {
        assert!(
            helpers
                .iter()
                .any(|b| json_schema(b).unwrap()["properties"].get(field).is_some()),
            "no helper call asked for {field}"
        );
    }

    // One request per step and one for the answer, in order: each keeps
    // Gemini's rules and covers everything the CLI sent by then.
    let turns: Vec<Value> = received
        .iter()
        .filter(|r| kind(r) == Kind::Loop)
        .map(Recorded::json)
        .collect();
    assert_eq!(turns.len(), STEPS as usize + 1);
    let mut folded = 0;
    for (step, body) in (0..).zip(&turns) {
        assert_eq!(violation(body), None, "request {step}");
        let summary = summary_of(body);
        folded += usize::from(!summary.is_empty());
        let mut seen = tags(&summary);
        seen.extend(tags(&body["contents"].to_string()));
        let missing: Vec<u32> = sent_by_then(step).difference(&seen).copied().collect();
        assert!(
            missing.is_empty(),
            "request {step}: tags {missing:?} are neither in the view nor in its summary"
        );
    }
    assert!(folded > 0, "no forwarded request carried a summary");
    let last = turns.last().unwrap()["contents"].as_array().unwrap().len();
    assert!(
        last < 2 * STEPS as usize + 1,
        "the last request was not shortened: {last} contents"
    );

    // The admin API shows the conversation's folds to its key.
    let listed = send(
        Method::GET,
        &format!("{}/foldgate/conversations", fg.url),
        &[("x-goog-api-key", KEY)],
        "",
    )
    .await;
    listed.assert_ok();
    let listed = listed.json();
    let conversation = listed["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["folds"].as_u64().unwrap_or(0) > 0)
        .unwrap_or_else(|| panic!("no conversation folded: {listed}"));
    let id = conversation["conversation"].as_str().unwrap();
    let detail = send(
        Method::GET,
        &format!("{}/foldgate/conversations/{id}", fg.url),
        &[("x-goog-api-key", KEY)],
        "",
    )
    .await;
    detail.assert_ok();
    let detail = detail.json();
    let labels: Vec<&str> = detail["states"][0]["turns"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["fold"].as_str())
        .collect();
    assert!(
        labels.iter().any(|l| *l == "new" || *l == "reused"),
        "{}",
        detail["states"][0]["turns"]
    );
}
