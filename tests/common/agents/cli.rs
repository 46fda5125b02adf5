//! What the tests that drive real coding agents (Codex, Claude Code,
//! OpenCode from npm, pinned in `tests/agents`) through foldgate share: finding
//! the agent's binary, running it bounded in time, the 25 shell steps the
//! scripted mock model asks for, and the checks every agent's forwarded
//! requests must pass.
//!
//! Each step is a real command run by the agent's own shell tool; its
//! output (about 8 kB) carries the step's tag, `STEP-NN-OUT`, so the mock
//! can tell which step a request answers even when the earlier ones were
//! folded away.

use foldgate::fold::summary::HEADING_PREFIX;
use foldgate::summarize::prompt::SYSTEM_PROMPT;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Shell steps the mock model asks every agent to run.
pub const STEPS: u32 = 25;

/// The agent's executable: `$env` when set (scripts/agents-latest points
/// it at the newest release), else `name` on `PATH`; a clear failure when
/// neither exists (these tests never skip).
pub fn binary(name: &str, env: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(path.is_file(), "{env}={} is not a file", path.display());
        return path;
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "`{name}` is not installed: not on PATH and {env} is unset. .ci/run installs \
                 the version it pins (npm); scripts/agents-latest the newest"
            )
        })
}

/// What an agent printed.
pub struct Run {
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
    pub status: std::process::ExitStatus,
}

/// Runs `command` (its environment already set) with no stdin, killed
/// after `deadline` (a failure then); returns what it printed and whether
/// it exited 0, for the test to check with the rest.
pub async fn run(mut command: tokio::process::Command, what: &str, deadline: Duration) -> Run {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let started = Instant::now();
    let output = tokio::time::timeout(deadline, command.output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {deadline:?} (killed)"))
        .unwrap_or_else(|e| panic!("{what} could not run: {e}"));
    let run = Run {
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        took: started.elapsed(),
        status: output.status,
    };
    eprintln!("{what} ran {:?}, {}", run.took, run.status);
    run
}

impl Run {
    /// Checks the agent exited 0 and printed the final answer.
    pub fn check_finished(&self, failures: &mut Failures) {
        failures.check("exit 0", self.status.success(), || {
            format!(
                "{}; its log: {:?}",
                self.status,
                lines_with(&self.stderr, &["ERROR", "rror", "failed", "panic"])
            )
        });
        failures.check("final answer", self.stdout.contains(&final_text()), || {
            format!("not printed; stdout ends: {}", tail(&self.stdout, 1500))
        });
    }
}

/// When `FOLDGATE_AGENT_DUMP` names a folder, writes `requests` there as
/// `NAME.json` (what the mock received: to read an agent's shapes).
pub fn dump(name: &str, requests: &[Value]) {
    if let Some(dir) = std::env::var_os("FOLDGATE_AGENT_DUMP") {
        let path = PathBuf::from(dir).join(format!("{name}.json"));
        std::fs::write(&path, Value::from(requests.to_vec()).to_string()).unwrap();
        eprintln!("wrote {}", path.display());
    }
}

/// The last `n` bytes of `text` (on a char boundary).
pub fn tail(text: &str, n: usize) -> &str {
    let mut start = text.len().saturating_sub(n);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The tag a step's output carries.
pub fn step_tag(step: u32) -> String {
    format!("STEP-{step:02}-OUT")
}

/// The shell command of `step`: 80 lines of about 100 bytes, each with
/// the step's tag and specifics (paths, ports) a summary would keep.
pub fn step_command(step: u32) -> String {
    format!(
        "seq -f '{} line %g: module_{step} wrote /var/log/build/step_{step}.log, its service listens on port 9{step:02}0' 1 80",
        step_tag(step)
    )
}

/// The answer the mock model gives once every step ran.
pub fn final_text() -> String {
    format!("FINAL: all {STEPS} build steps ran, the build is fixed.")
}

/// The highest step tag in `text`.
pub fn step_in(text: &str) -> Option<u32> {
    let mut best = None;
    let mut rest = text;
    while let Some(i) = rest.find("STEP-") {
        rest = &rest[i + 5..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if rest[digits.len()..].starts_with("-OUT")
            && let Ok(n) = digits.parse::<u32>()
        {
            best = best.max(Some(n));
        }
    }
    best
}

/// Which step the agent is on: one past the step whose output the
/// request's last item carries; when it carries none (the first request,
/// or Codex's first request after its own compaction), one past the
/// newest output seen so far.
#[derive(Default)]
pub struct Steps {
    seen: Mutex<Option<u32>>,
}

impl Steps {
    /// The step to ask for next, given the text of the request's trailing
    /// tool result (if it ends with one).
    pub fn next(&self, trailing_result: Option<&str>) -> u32 {
        let mut seen = self.seen.lock().unwrap();
        match trailing_result.and_then(step_in) {
            Some(step) => {
                *seen = (*seen).max(Some(step));
                step + 1
            }
            None => seen.map_or(0, |s| s + 1),
        }
    }
}

/// foldgate's summary in a forwarded body ("" when it carries none):
/// every string holding the summary heading, wherever the API puts it.
pub fn summary_in(body: &Value) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) if s.contains(HEADING_PREFIX) => out.push_str(s),
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            Value::Object(o) => o.values().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = String::new();
    walk(body, &mut out);
    out
}

/// Whether `body` is foldgate's summarizer call on chat completions
/// (`messages[0]` its system prompt) or Messages (`system`).
pub fn is_summarizer(body: &Value) -> bool {
    body.pointer("/messages/0/content").and_then(Value::as_str) == Some(SYSTEM_PROMPT)
        || body["system"].as_str() == Some(SYSTEM_PROMPT)
        || body["system"].pointer("/0/text").and_then(Value::as_str) == Some(SYSTEM_PROMPT)
}

/// The transcript a summarizer call asks to summarize: every text of its
/// messages after the system prompt.
pub fn summarizer_prompt(body: &Value) -> String {
    let messages = body["messages"].as_array().into_iter().flatten();
    messages
        .filter(|m| m["content"].as_str() != Some(SYSTEM_PROMPT))
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The JSON summary the mock summarizer writes for `prompt`: it names
/// every step whose output it was shown.
pub fn summary_for(prompt: &str) -> String {
    let steps: Vec<String> = (0..STEPS)
        .filter(|s| prompt.contains(&step_tag(*s)))
        .map(step_tag)
        .collect();
    json!({
        "summary": "The agent ran numbered build steps with its shell tool.",
        "facts": [format!("steps run: {}", steps.join(" "))],
        "goals": ["run every build step"], "decisions": [], "open_items": [], "artifacts": [],
    })
    .to_string()
}

/// A chat-completions answer from the summarizer.
pub fn chat_summary(body: &Value) -> Value {
    let content = summary_for(&summarizer_prompt(body));
    json!({"id": "chatcmpl-sum", "object": "chat.completion", "created": 1, "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}})
}

/// A Messages answer from the summarizer.
pub fn messages_summary(body: &Value) -> Value {
    let content = summary_for(&summarizer_prompt(body));
    json!({"id": "msg_sum", "type": "message", "role": "assistant", "model": body["model"],
        "content": [{"type": "text", "text": content}], "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 100, "output_tokens": 50}})
}

/// Placeholders a summarizer prompt shows where the client sent text:
/// a text-carrying part's kind in brackets (`[input_text]`), which the
/// transcript renders only for a part whose text it failed to read.
pub fn placeholders(prompt: &str) -> Vec<String> {
    [
        "input_text",
        "output_text",
        "text",
        "summary_text",
        "reasoning_text",
        "tool_result",
        "function_call_output",
    ]
    .iter()
    .map(|k| format!("[{k}]"))
    .filter(|p| prompt.contains(p.as_str()))
    .collect()
}

/// Whether a chat-completions request breaks the API's pairing rules:
/// an assistant's `tool_calls` need a `tool` message each right after it,
/// a `tool` message its call before it.
pub fn chat_violation(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        if role == "tool" {
            let id = m["tool_call_id"].as_str().unwrap_or_default().to_string();
            let Some(at) = open.iter().position(|c| *c == id) else {
                return Some(format!(
                    "messages.[{i}].tool_call_id: {id} answers no tool call before it"
                ));
            };
            open.remove(at);
            continue;
        }
        if let Some(id) = open.first() {
            return Some(format!(
                "messages.[{i}]: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id' ({id} has none)"
            ));
        }
        for call in m["tool_calls"].as_array().into_iter().flatten() {
            open.push(call["id"].as_str().unwrap_or_default().to_string());
        }
    }
    open.first()
        .map(|id| format!("tool call {id} has no tool message after it"))
}

/// Whether a Responses request breaks the API's pairing rules: every
/// `*_call` with a `call_id` needs its output, every output its call
/// before it.
pub fn responses_pairing(body: &Value) -> Option<String> {
    let items = body["input"].as_array()?;
    let mut calls = Vec::new();
    let mut answered = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let kind = item["type"].as_str().unwrap_or("message");
        let Some(id) = item["call_id"].as_str() else {
            continue;
        };
        if kind.ends_with("_output") {
            if !calls.contains(&id) {
                return Some(format!(
                    "input[{i}]: No tool call found for function call output with call_id {id}."
                ));
            }
            answered.push(id);
        } else {
            calls.push(id);
        }
    }
    calls
        .iter()
        .find(|c| !answered.contains(c))
        .map(|id| format!("No tool output found for function call {id}."))
}

/// Folds the admin API shows for the conversations `headers` may read:
/// the highest `folds` of any.
pub async fn admin_folds(fg: &crate::common::Foldgate, headers: &[(&str, &str)]) -> u64 {
    let listed = crate::common::send(
        http::Method::GET,
        &format!("{}/foldgate/conversations", fg.url),
        headers,
        "",
    )
    .await;
    listed.assert_ok();
    let listed = listed.json();
    listed["conversations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["folds"].as_u64())
        .max()
        .unwrap_or(0)
}

/// The environment every agent runs with: `PATH` (so its shell tool finds
/// `seq`), a fresh `HOME` and `TMPDIR`, nothing of this machine's own
/// (keys, proxies, config).
pub fn clean_env(command: &mut tokio::process::Command, home: &std::path::Path) {
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("TMPDIR", home)
        .env("LANG", "C.UTF-8")
        .env("NO_COLOR", "1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost");
}

/// The checks of one agent run: each failed one is kept (its first
/// message per check), and [`Failures::assert_none`] fails the test with
/// every one of them, so one run tells all that broke.
#[derive(Default)]
pub struct Failures(Vec<(&'static str, String)>);

impl Failures {
    /// Records `message()` under `check` unless `ok` (once per check).
    pub fn check(&mut self, check: &'static str, ok: bool, message: impl FnOnce() -> String) {
        if !ok && !self.0.iter().any(|(c, _)| *c == check) {
            self.0.push((check, message()));
        }
    }

    /// Fails with every failed check.
    pub fn assert_none(&self, agent: &str) {
        let listed: Vec<String> = self
            .0
            .iter()
            .map(|(check, message)| format!("- {check}: {message}"))
            .collect();
        assert!(
            listed.is_empty(),
            "{agent} through foldgate: {} check(s) failed:\n{}",
            listed.len(),
            listed.join("\n")
        );
    }
}

/// The lines of an agent's log that name `needles` (its output is long).
pub fn lines_with<'a>(log: &'a str, needles: &[&str]) -> Vec<&'a str> {
    log.lines()
        .filter(|l| needles.iter().any(|n| l.contains(n)))
        .take(20)
        .collect()
}

/// A loopback TCP relay in front of foldgate that counts the WebSocket
/// upgrade requests an agent makes (each comes on a connection of its
/// own: the first bytes a connection carries are read for a `GET` with
/// `Upgrade: websocket`), then passes every byte both ways untouched.
pub struct Tap {
    pub url: String,
    upgrades: std::sync::Arc<std::sync::atomic::AtomicU32>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Tap {
    /// Starts a relay to `target` (`host:port`).
    pub async fn start(target: std::net::SocketAddr) -> Self {
        use std::sync::atomic::Ordering;
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let upgrades = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = upgrades.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    let mut head = vec![0u8; 16 * 1024];
                    let Ok(n) = client.peek(&mut head).await else {
                        return;
                    };
                    let head = String::from_utf8_lossy(&head[..n]).to_ascii_lowercase();
                    if head.starts_with("get ") && head.contains("upgrade: websocket") {
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    let _ = upstream.shutdown().await;
                });
            }
        });
        Self {
            url,
            upgrades,
            task,
        }
    }

    /// WebSocket upgrade requests seen so far.
    pub fn upgrades(&self) -> u32 {
        self.upgrades.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// foldgate for an agent test: `provider` (a `[providers.…]` section
/// without its models), the models `glob` at `window` tokens, and
/// older-turn compression off: it would stub the older steps' outputs (a
/// restub, no summarizer call) and keep the view under the trigger; these
/// tests are about folds.
pub async fn foldgate(provider: &str, glob: &str, window: u32) -> crate::common::Foldgate {
    crate::common::Foldgate::start(&format!(
        "{provider}models = [\"{glob}\"]\n\
         [models.\"{glob}\"]\ncontext_window = {window}\n\
         [compress]\nenabled = false\n"
    ))
    .await
}

/// The checks every agent test starts with: the agent finished, its loop
/// reached the model (else the other checks are moot, and the failures so
/// far are reported), the mock was asked nothing it does not know, and
/// no forwarded request broke the API's pairing rules. The loop's
/// requests, dumped under `name` when `FOLDGATE_AGENT_DUMP` is set.
pub fn first_checks(
    failures: &mut Failures,
    (run, agent, name): (&Run, &str, &str),
    turns: &[Value],
    others: &[String],
    violations: &[String],
) {
    run.check_finished(failures);
    dump(name, turns);
    failures.check(
        "agent loop reached the model",
        !turns.is_empty(),
        String::new,
    );
    if turns.is_empty() {
        failures.assert_none(agent);
    }
    failures.check("known calls only", others.is_empty(), || {
        format!("calls the mock does not know: {others:?}")
    });
    failures.check("tool pairing", violations.is_empty(), || {
        format!("forwarded requests broke pairing (each got the API's 400): {violations:?}")
    });
}
