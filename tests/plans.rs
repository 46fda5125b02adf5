//! Plans by shape and Gemini CLI's pins through the real server, on
//! Gemini's API: a Gemini CLI agent loop — its session context and a
//! GEMINI.md context block in the first user turn, a `write_todos` call
//! every few steps (on no list of plan tools) — keeps both in every view
//! through 5 folds. With `plan_tools` naming other tools, the same loop
//! loses the todo list: the shape is what kept it.

use crate::common;

use common::gemini::GeminiMock;
use common::{Foldgate, post_json};
use foldgate::fold::plan_call::PLAN_HEADING;
use serde_json::{Value, json};

const PATH: &str = "/v1beta/models/agent-gemini:generateContent";

/// Gemini CLI's session context, and a GEMINI.md context block (each in a
/// turn of its own, so each marker is checked alone).
const SESSION: &str = "<session_context>\nThis is the Gemini CLI. We are setting up the context for our chat.\n\
Today's date is Thursday, November 26, 2026.\nMy operating system is: linux\n</session_context>";
const GEMINI_MD: &str = "--- Context from: GEMINI.md ---\n\
Run `npm run lint` before every commit; never edit generated/ (rule G-4410).\n\
--- End of Context from: GEMINI.md ---";
const OUTPUT_LINE: &str =
    "compiling module with the parser tokenizer and cache layer then linking the result";

/// The arguments of the `write_todos` call at step `k`.
fn todos(k: usize) -> Value {
    json!({"todos": [
        {"description": format!("Port the parser (rev {k})"), "status": "completed"},
        {"description": format!("Wire the queue (rev {k})"), "status": "in_progress"},
        {"description": "Drop the shim", "status": "cancelled"}]})
}

/// Gemini CLI's request after `steps` steps, and the newest todo list.
fn request(steps: usize) -> (Value, Option<Value>) {
    let mut contents = vec![
        json!({"role": "user", "parts": [{"text": SESSION}]}),
        json!({"role": "model", "parts": [{"text": "Got it. Thanks for the context!"}]}),
        json!({"role": "user", "parts": [{"text": GEMINI_MD}]}),
        json!({"role": "model", "parts": [{"text": "I will follow GEMINI.md."}]}),
        json!({"role": "user", "parts": [{"text": "task: port the billing service"}]}),
    ];
    let mut newest = None;
    for k in 0..steps {
        let (name, args, output) = if k % 6 == 1 {
            newest = Some(todos(k));
            ("write_todos", todos(k), "Todos updated".to_owned())
        } else {
            let lines = 12 + (k * 7) % 25;
            let output = format!(
                "$ make step{k}\n{}",
                format!("{OUTPUT_LINE}\n").repeat(lines)
            );
            let args = json!({"command": format!("make step{k}")});
            ("run_shell_command", args, output)
        };
        contents.push(json!({"role": "model", "parts": [
            {"text": format!("step {k}")}, {"functionCall": {"name": name, "args": args}}]}));
        contents.push(
            json!({"role": "user", "parts": [{"functionResponse": {"name": name,
            "response": {"output": output}}}]}),
        );
    }
    let body = json!({
        "systemInstruction": {"parts": [{"text": "You are an interactive CLI agent."}]},
        "contents": contents,
        "generationConfig": {"maxOutputTokens": 200},
    });
    (body, newest)
}

/// Whether the forwarded body `sent` holds `text` verbatim (as a JSON
/// string's contents).
fn holds_text(sent: &str, text: &str) -> bool {
    let escaped = serde_json::to_string(text).unwrap();
    sent.contains(&escaped[1..escaped.len() - 1])
}

/// Whether `sent` holds the todo list: as the call's `args` object, or as
/// the JSON text the summary's plan section quotes.
fn holds_todos(sent: &str, todos: Option<&Value>) -> bool {
    todos.is_none_or(|t| sent.contains(&t.to_string()) || holds_text(sent, &t.to_string()))
}

/// foldgate before a Gemini mock, a 6k window, inline folds, `policy`.
fn config(mock: &GeminiMock, policy: &str) -> String {
    format!(
        "[providers.google]\nbase_url = \"{}\"\napi = \"gemini\"\nmodels = [\"agent-*\"]\n\
         [models.\"agent-*\"]\ncontext_window = 6000\n[policy]\nmode = \"inline\"\n{policy}\
         [summarizer]\ntimeout = \"5s\"\n",
        mock.url()
    )
}

/// Sends step `k` of conversation `id`; the forwarded body, as text, and
/// whether the request folded.
async fn step(fg: &Foldgate, mock: &GeminiMock, id: &str, k: usize) -> (String, bool) {
    let (body, _) = request(k);
    let reply = post_json(
        &format!("{}{PATH}", fg.url),
        &[("x-goog-api-key", "g-client"), ("x-conversation-id", id)],
        &body,
    )
    .await;
    reply.assert_ok();
    let folded = reply.header("x-foldgate-fold") == "new";
    (mock.bodies().last().unwrap().to_string(), folded)
}

#[tokio::test]
async fn a_gemini_cli_loop_keeps_its_context_and_write_todos_through_folds() {
    let mock = GeminiMock::start().await;
    let fg = Foldgate::start(&config(&mock, "")).await;
    let (mut folds, mut plan_sections, mut k) = (0, 0, 0);
    while folds < 5 {
        assert!(k < 120, "only {folds} folds in {k} steps");
        k += 1;
        let (sent, folded) = step(&fg, &mock, "gemini-cli", k).await;
        folds += usize::from(folded);
        for text in [SESSION, GEMINI_MD] {
            assert!(
                holds_text(&sent, text),
                "left the view at step {k}: {text}\n{sent}"
            );
        }
        let newest = request(k).1;
        assert!(
            holds_todos(&sent, newest.as_ref()),
            "the newest write_todos left the view at step {k}: {sent}"
        );
        plan_sections += usize::from(sent.contains(PLAN_HEADING));
    }
    assert!(plan_sections > 0, "the plan never needed the summary");
    assert!(mock.state.violations.lock().unwrap().is_empty());
}

/// The control: plans named as other tools' calls, the same loop loses
/// the todo list from the view.
#[tokio::test]
async fn with_plan_tools_naming_others_write_todos_leaves_the_view() {
    let mock = GeminiMock::start().await;
    let fg = Foldgate::start(&config(&mock, "plan_tools = [\"TodoWrite\"]\n")).await;
    let mut lost = false;
    for k in 1..60 {
        let (sent, _) = step(&fg, &mock, "named", k).await;
        lost |= !holds_todos(&sent, request(k).1.as_ref());
        assert!(!sent.contains(PLAN_HEADING), "{sent}");
    }
    assert!(lost, "the todo list never left the view");
}
