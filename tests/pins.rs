//! Pins and plans through the real server on every API: an agent loop
//! whose first user message carries an instruction file and a system
//! reminder and which calls a todo tool every few steps, in a 6k window.
//! After 5 folds every view still holds the instruction text and the
//! newest todo list verbatim, and no two consecutive requests fold.

use crate::common;

use common::llm::Llm;
use common::{Foldgate, post_json};
use foldgate::fold::plan_call::PLAN_HEADING;
use serde_json::{Value, json};

/// The instruction file Claude Code quotes in a system reminder.
const INSTRUCTIONS: &str = "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n\
# claudeMd\nContents of /repo/CLAUDE.md (project instructions, checked into the codebase):\n\n\
Always run `pnpm lint --fix` before committing; never touch vendor/ (rule R-7731).\n</system-reminder>";
const OUTPUT_LINE: &str =
    "compiling module with the parser tokenizer and cache layer then linking the result";

/// One step of the loop: a tool call and its output.
struct Step {
    id: String,
    tool: &'static str,
    args: Value,
    output: String,
}

/// The client's conversation, rendered into each API's shape.
#[derive(Default)]
struct Loop {
    /// `Ok(step)` or `Err(user text)`.
    turns: Vec<Result<Step, String>>,
    /// The newest todo call's arguments.
    todos: Option<Value>,
}

/// Whether the forwarded body `sent` holds the instruction text verbatim.
fn holds_instructions(sent: &str) -> bool {
    let needle = serde_json::to_string(INSTRUCTIONS).unwrap();
    sent.contains(&needle[1..needle.len() - 1])
}

/// Whether `sent` holds the newest todo call's arguments verbatim: as a
/// JSON text (a chat or Responses call, the summary's plan section) or as
/// an object (an Anthropic `tool_use`).
fn holds_plan(sent: &str, l: &Loop) -> bool {
    l.todos.as_ref().is_none_or(|args| {
        let text = serde_json::to_string(&args.to_string()).unwrap();
        sent.contains(&text[1..text.len() - 1]) || sent.contains(&args.to_string())
    })
}

impl Loop {
    fn advance(&mut self, k: usize) {
        let id = format!("call_{k}");
        let step = if k % 6 == 1 {
            let items = [
                format!("done: parser rewrite (rev {k})"),
                format!("pending: queue wiring (rev {k})"),
            ];
            let todos: Vec<Value> = items
                .iter()
                .map(|t| {
                    let status = if t.starts_with("done") {
                        "completed"
                    } else {
                        "pending"
                    };
                    json!({"content": t, "status": status})
                })
                .collect();
            self.todos = Some(json!({"todos": todos}));
            Step {
                id,
                tool: "TodoWrite",
                args: json!({"todos": todos}),
                output: "Todos updated".into(),
            }
        } else {
            let lines = 12 + (k * 7) % 25;
            let mut output = format!("$ make step{k}\n");
            for _ in 0..lines {
                output.push_str(OUTPUT_LINE);
                output.push('\n');
            }
            Step {
                id,
                tool: "bash",
                args: json!({"command": format!("make step{k}")}),
                output,
            }
        };
        self.turns.push(Ok(step));
        if k % 10 == 9 {
            self.turns
                .push(Err(format!("follow-up {k}: keep the old endpoint working")));
        }
    }

    fn chat(&self) -> Value {
        let mut messages = vec![
            json!({"role": "system", "content": "You are a coding agent."}),
            json!({"role": "user", "content": [
                {"type": "text", "text": INSTRUCTIONS},
                {"type": "text", "text": "task: port the billing service"}]}),
        ];
        for turn in &self.turns {
            match turn {
                Ok(s) => {
                    messages.push(
                        json!({"role": "assistant", "content": format!("running {}", s.id),
                        "tool_calls": [{"id": s.id, "type": "function",
                            "function": {"name": s.tool, "arguments": s.args.to_string()}}]}),
                    );
                    messages
                        .push(json!({"role": "tool", "tool_call_id": s.id, "content": s.output}));
                }
                Err(text) => messages.push(json!({"role": "user", "content": text})),
            }
        }
        json!({"model": "agent-model", "max_tokens": 200, "messages": messages})
    }

    fn anthropic(&self) -> Value {
        let mut messages = vec![json!({"role": "user", "content": [
            {"type": "text", "text": INSTRUCTIONS},
            {"type": "text", "text": "task: port the billing service"}]})];
        for turn in &self.turns {
            match turn {
                Ok(s) => {
                    messages.push(json!({"role": "assistant", "content": [
                        {"type": "text", "text": format!("running {}", s.id)},
                        {"type": "tool_use", "id": s.id, "name": s.tool, "input": s.args}]}));
                    messages.push(json!({"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": s.id, "content": s.output}]}));
                }
                Err(text) => messages.push(json!({"role": "user", "content": text})),
            }
        }
        json!({"model": "agent-model", "max_tokens": 200, "system": "You are a coding agent.", "messages": messages})
    }

    fn responses(&self) -> Value {
        let mut input = vec![json!({"role": "user", "content": [
            {"type": "input_text", "text": INSTRUCTIONS},
            {"type": "input_text", "text": "task: port the billing service"}]})];
        for turn in &self.turns {
            match turn {
                Ok(s) => {
                    let reasoning = s.id.replace("call_", "rs_");
                    input.push(json!({"type": "reasoning", "id": reasoning, "summary": []}));
                    input.push(
                        json!({"type": "function_call", "call_id": s.id, "name": s.tool,
                        "arguments": s.args.to_string()}),
                    );
                    input.push(json!({"type": "function_call_output", "call_id": s.id, "output": s.output}));
                }
                Err(text) => input.push(json!({"role": "user", "content": text})),
            }
        }
        json!({"model": "agent-model", "max_output_tokens": 200,
            "instructions": "You are a coding agent.", "input": input})
    }
}

/// foldgate before `llm` with a 6k window, inline folds and `policy`.
fn config(llm: &Llm, policy: &str) -> String {
    format!(
        "{}[models.\"agent-*\"]\ncontext_window = 6000\n\
         [policy]\nmode = \"inline\"\n{policy}[summarizer]\ntimeout = \"5s\"\n",
        crate::common::providers(llm.url())
    )
}

/// Runs the loop on `path` until 5 folds happened; checks every view.
async fn run(path: &str, body: fn(&Loop) -> Value) {
    let llm = Llm::start().await;
    let toml = config(&llm, "");
    let fg = Foldgate::start(&toml).await;
    let mut l = Loop::default();
    let (mut folds, mut previous_folded, mut k) = (0, false, 0);
    let mut plan_sections = 0;
    while folds < 5 {
        assert!(k < 120, "{path}: only {folds} folds in {k} steps");
        l.advance(k);
        k += 1;
        let reply = post_json(
            &format!("{}{path}", fg.url),
            &[
                ("x-conversation-id", "pins"),
                ("authorization", "Bearer sk-pins"),
            ],
            &body(&l),
        )
        .await;
        reply.assert_ok();
        let folded = reply.header("x-foldgate-fold") == "new";
        assert!(
            !(folded && previous_folded),
            "{path}: folds on consecutive requests at step {k}"
        );
        previous_folded = folded;
        folds += usize::from(folded);
        let sent = llm.chat_requests().last().unwrap().to_string();
        assert!(
            holds_instructions(&sent),
            "{path}: the instructions left the view at step {k}: {sent}"
        );
        assert!(
            holds_plan(&sent, &l),
            "{path}: the newest todo list left the view at step {k}: {sent}"
        );
        plan_sections += usize::from(sent.contains(PLAN_HEADING));
    }
    assert!(
        plan_sections > 0,
        "{path}: the plan never needed the summary"
    );
    let summaries = llm.summarizer_calls();
    assert!(
        summaries * 4 <= k + 4,
        "{path}: {summaries} summarizer calls in {k} steps"
    );
}

#[tokio::test]
async fn chat_keeps_instructions_and_the_plan_through_folds() {
    run("/v1/chat/completions", Loop::chat).await;
}

#[tokio::test]
async fn anthropic_keeps_instructions_and_the_plan_through_folds() {
    run("/v1/messages", Loop::anthropic).await;
}

#[tokio::test]
async fn responses_keeps_instructions_and_the_plan_through_folds() {
    run("/v1/responses", Loop::responses).await;
}

/// The control: without pins and plan tools the same loop loses the
/// instructions and the todo list from the view, so the tests above
/// measure what pins and plans keep.
#[tokio::test]
async fn without_pins_and_plan_tools_both_leave_the_view() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "pin = []\nplan_tools = []\n")).await;
    let mut l = Loop::default();
    let (mut lost_instructions, mut lost_todos) = (false, false);
    for k in 0..60 {
        l.advance(k);
        let reply = post_json(
            &format!("{}/v1/chat/completions", fg.url),
            &[
                ("x-conversation-id", "control"),
                ("authorization", "Bearer sk-pins"),
            ],
            &l.chat(),
        )
        .await;
        reply.assert_ok();
        let sent = llm.chat_requests().last().unwrap().to_string();
        lost_instructions |= !holds_instructions(&sent);
        lost_todos |= !holds_plan(&sent, &l);
    }
    let last = llm.chat_requests().last().unwrap().to_string();
    assert!(
        lost_instructions && lost_todos,
        "{lost_instructions} {lost_todos} {last}"
    );
}

/// Over their budget the oldest pins fold: the fold that folds one says
/// so in `x-foldgate-warning`, and the admin JSON (the dashboard's
/// source) counts it.
#[tokio::test]
async fn over_the_pin_budget_the_oldest_pins_fold_with_a_warning() {
    let llm = Llm::start().await;
    // 0.01 of 6,000 tokens: no room for the ~100-token instructions.
    let fg = Foldgate::start(&config(&llm, "pin_ratio = 0.01\n")).await;
    let mut l = Loop::default();
    let mut warned = None;
    for k in 0..60 {
        l.advance(k);
        let reply = post_json(
            &format!("{}/v1/chat/completions", fg.url),
            &[
                ("x-conversation-id", "budget"),
                ("authorization", "Bearer sk-pins"),
            ],
            &l.chat(),
        )
        .await;
        reply.assert_ok();
        let warning = reply.header("x-foldgate-warning");
        if warning.contains("pin_ratio") {
            assert_eq!(reply.header("x-foldgate-fold"), "new");
            warned = Some(k);
            break;
        }
    }
    assert!(warned.is_some(), "no fold warned about the pin budget");
    let sent = llm.chat_requests().last().unwrap().to_string();
    assert!(!holds_instructions(&sent), "the pin over budget was folded");
    let state = common::send(
        http::Method::GET,
        &format!("{}/foldgate/conversations/budget", fg.url),
        &[("authorization", "Bearer sk-pins")],
        bytes::Bytes::new(),
    )
    .await
    .json();
    assert_eq!(state["states"][0]["pins_folded"], 1, "{state}");
}

/// The ledger keeps what the plan marks completed apart from open work: a
/// summarizer that keeps no identifier, a ticket and a host planted early,
/// a TodoWrite call that completes the ticket's item only.
#[tokio::test]
async fn the_ledger_keeps_completed_items_apart_from_open_ones() {
    use foldgate::fold::ledger::{DONE_HEADING, LEDGER_HEADING};
    let llm = Llm::start().await;
    llm.answer_always(common::llm::Sum::Lossy);
    let fg = Foldgate::start(&format!(
        "{}[models.\"agent-*\"]\ncontext_window = 4000\n\
         [policy]\nmode = \"inline\"\n",
        crate::common::providers(llm.url())
    ))
    .await;
    let todos = json!({"todos": [
        {"content": "Fix invoice INV-QP20931", "status": "completed"},
        {"content": "Move the queue to falcon.corp", "status": "in_progress"}]});
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Invoice INV-QP20931 is wrong, and the queue must move to falcon.corp."}),
        json!({"role": "assistant", "content": "Planning.", "tool_calls": [{"id": "t1", "type": "function",
            "function": {"name": "TodoWrite", "arguments": todos.to_string()}}]}),
        json!({"role": "tool", "tool_call_id": "t1", "content": "Todos updated"}),
    ];
    for k in 0..40 {
        messages.push(json!({"role": "user", "content": format!("step {k}: {}", "keep going with the work ".repeat(16))}));
        messages.push(json!({"role": "assistant", "content": "ok"}));
    }
    let reply = post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[("x-conversation-id", "done-apart")],
        &json!({"model": "agent-model", "max_tokens": 100, "messages": messages}),
    )
    .await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    let sent = llm.chat_requests().last().cloned().unwrap();
    let summary = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .find(|t| t.contains(LEDGER_HEADING))
        .unwrap()
        .to_owned();
    let (open, done) = summary
        .split_once(LEDGER_HEADING)
        .unwrap()
        .1
        .split_once(DONE_HEADING)
        .expect("a completed section");
    assert!(open.contains("falcon.corp"), "{summary}");
    assert!(!open.contains("INV-QP20931"), "{summary}");
    assert!(done.contains("INV-QP20931"), "{summary}");
    assert!(!done.contains("falcon.corp"), "{summary}");
}
