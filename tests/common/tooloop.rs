//! A scripted coding-agent loop for compression tests and the agent
//! benchmark: one user task, then steps of one tool call and its (large)
//! output, with an occasional user follow-up. Every message carries a
//! unique `[mN]` tag (see [`super::llm`]), every tool output a first line
//! naming its command and specifics (a path, a port) to find in a stub.

use serde_json::{Value, json};

/// A line of ordinary tool output: words, no specifics.
const OUTPUT_LINE: &str =
    "compiling module with the parser tokenizer and cache layer then linking the result";

/// The conversation so far.
pub struct ToolLoop {
    pub messages: Vec<Value>,
    tag: u32,
    step: u32,
}

impl ToolLoop {
    /// A system prompt and the user's task.
    pub fn new(task: &str) -> Self {
        let mut l = Self {
            messages: vec![
                json!({"role": "system", "content": "You are a coding agent. Use the tools."}),
            ],
            tag: 0,
            step: 0,
        };
        l.user(task);
        l
    }

    fn tagged(&mut self, text: &str) -> String {
        self.tag += 1;
        format!("[m{}] {text}", self.tag)
    }

    /// A user message.
    pub fn user(&mut self, what: &str) -> &mut Self {
        let content = self.tagged(what);
        self.messages
            .push(json!({"role": "user", "content": content}));
        self
    }

    /// One step: an assistant call of `bash` (`call_K`) and its output of
    /// `lines` lines; the first line is `$ ls /srv/app/stepK` and the
    /// output mentions `port 5K` and `/srv/app/stepK/main.rs`.
    pub fn step(&mut self, lines: usize) -> &mut Self {
        self.step += 1;
        let k = self.step;
        let id = Self::call_id(k);
        let thought = self.tagged(&format!("step {k}: listing the next directory"));
        let args = json!({"command": format!("ls /srv/app/step{k}")}).to_string();
        self.messages.push(json!({"role": "assistant", "content": thought,
            "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": args}}]}));
        let out = self.listing(&format!("/srv/app/step{k}"), k, lines);
        self.messages
            .push(json!({"role": "tool", "tool_call_id": id, "content": out}));
        self
    }

    /// A call's output: the command, a tagged line naming step `k`'s port
    /// and `dir`'s entry, then `lines` lines of filler.
    fn listing(&mut self, dir: &str, k: u32, lines: usize) -> String {
        let mut out = format!("$ ls {dir}\n");
        out.push_str(&self.tagged(&format!(
            "service listens on port 5{k:03}, entry {dir}/main.rs"
        )));
        for _ in 0..lines {
            out.push('\n');
            out.push_str(OUTPUT_LINE);
        }
        out
    }

    /// Step `k` of the agent bench's parallel loops (`cargo bench --bench
    /// agent`): 2 or 3 calls (alternating), outputs of
    /// [`output_lines`]`(3k + j)` lines, 1–3 KB each.
    pub fn bench_parallel_step(&mut self, k: usize) -> &mut Self {
        let sizes: Vec<usize> = (0..2 + k % 2).map(|j| output_lines(3 * k + j)).collect();
        self.parallel_step(&sizes)
    }

    /// One step of parallel calls: an assistant message calling `bash`
    /// once per entry of `lines` (`call_K_J`), then each call's output of
    /// that many lines, shaped as [`ToolLoop::step`]'s.
    pub fn parallel_step(&mut self, lines: &[usize]) -> &mut Self {
        self.step += 1;
        let k = self.step;
        let thought = self.tagged(&format!("step {k}: listing {} directories", lines.len()));
        let ids: Vec<String> = (0..lines.len()).map(|j| format!("call_{k}_{j}")).collect();
        let calls: Vec<Value> = ids
            .iter()
            .enumerate()
            .map(|(j, id)| {
                let args = json!({"command": format!("ls /srv/app/step{k}/part{j}")}).to_string();
                json!({"id": id, "type": "function", "function": {"name": "bash", "arguments": args}})
            })
            .collect();
        self.messages
            .push(json!({"role": "assistant", "content": thought, "tool_calls": calls}));
        for (j, (id, &n)) in ids.iter().zip(lines).enumerate() {
            let out = self.listing(&format!("/srv/app/step{k}/part{j}"), k, n);
            self.messages
                .push(json!({"role": "tool", "tool_call_id": id, "content": out}));
        }
        self
    }

    /// The call id of step `k`.
    pub fn call_id(k: u32) -> String {
        format!("call_{k}")
    }

    /// The request body for `model`.
    pub fn body(&self, model: &str) -> Value {
        json!({"model": model, "messages": self.messages, "max_tokens": 200})
    }
}

/// Lines of the agent bench's output `n`: 12 to 36 lines of 85 bytes,
/// 1–3 KB.
pub fn output_lines(n: usize) -> usize {
    12 + (n * 7) % 25
}
