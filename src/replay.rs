//! `foldgate replay`: a recorded conversation through the fold engine,
//! offline. Each line of the recording is one chat request body as the
//! client sent it (the whole history every turn); each is estimated and
//! planned ([`fold::plan`]) against the fold chain the earlier turns built,
//! exactly as the proxy plans an inline fold. A fold's summary comes from a
//! mock summarizer (no network, no tokens spent): a placeholder narrative
//! of half the summary budget (a summarizer may write up to two thirds of
//! it, the ledger takes the rest) plus the real ledger of the folded
//! messages. Older-turn compression applies as the proxy applies it to a
//! keyed conversation (`stubs`: messages shown compressed). So the figures
//! show where folds happen and what is forwarded, for tuning ratios before
//! spending tokens.

use crate::config::{Config, Mode, Policy};
use crate::fold::compress::{Room, stub};
use crate::fold::ledger::Ledger;
use crate::fold::{self, Budget, Compression, Decision, FoldChain, FoldState, Messages, Summary};
use crate::message::ids_of;
use crate::tokens::TokenCounter;
use serde_json::{Map, Value, json};
use std::fmt;

/// Why a recording could not be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A line is not a chat request body.
    #[error("line {line}: {message}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// No request in the file.
    #[error("no request in the recording (one JSON body per line)")]
    Empty,
}

/// One replayed request.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// 1-based line of the recording.
    pub line: usize,
    /// Messages in the request.
    pub messages: usize,
    /// Estimated prompt tokens of the client's messages.
    pub tokens_in: u32,
    /// Estimated prompt tokens of the view that would be forwarded.
    pub tokens_out: u32,
    /// The model's context window.
    pub window: u32,
    /// `x-foldgate-fold` as the proxy would answer: `none`, `reused`,
    /// `new`, or `cannot-fit` (the proxy refuses the request); `restub`
    /// where only the stub mark moved (the proxy answers `reused`).
    pub fold: &'static str,
    /// The trigger of a new fold (or of a request that cannot fit).
    pub reason: Option<&'static str>,
    /// Messages the new fold summarized.
    pub folded: usize,
    /// Messages after the pinned head the view's summary stands for.
    pub covered: usize,
    /// Messages the view shows compressed to stubs.
    pub stubs: usize,
}

/// The whole replay: the settings it ran with and one row per request.
#[derive(Debug, Clone)]
pub struct Report {
    /// The first request's model.
    pub model: String,
    /// Its provider (`-` when none lists it).
    pub provider: String,
    /// Its resolved policy.
    pub policy: Policy,
    /// Its budget (window, output reserve, summary budget).
    pub budget: Budget,
    /// One per request, in order.
    pub rows: Vec<Row>,
}

/// Replays `recording` (JSONL) for `model`, or each body's own `model`
/// when `model` is empty.
pub fn run(config: &Config, model: &str, recording: &str) -> Result<Report, ReplayError> {
    let counter = TokenCounter::new(config);
    let mut chain = FoldChain::new();
    let mut rows = Vec::new();
    let mut first: Option<Settings> = None;
    let lines = recording
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    for (index, text) in lines {
        let (row, settings) = replay_line(config, &counter, model, index + 1, text, &mut chain)?;
        first.get_or_insert(settings);
        rows.push(row);
    }
    let (model, provider, policy, budget) = first.ok_or(ReplayError::Empty)?;
    Ok(Report {
        model,
        provider,
        policy,
        budget,
        rows,
    })
}

/// A request's model, provider, policy and budget.
type Settings = (String, String, Policy, Budget);

/// Replays one line's request against the chain the earlier lines built.
fn replay_line(
    config: &Config,
    counter: &TokenCounter,
    model: &str,
    line: usize,
    text: &str,
    chain: &mut FoldChain,
) -> Result<(Row, Settings), ReplayError> {
    let bad = |message: &str| ReplayError::Line {
        line,
        message: message.to_string(),
    };
    let request: Map<String, Value> =
        serde_json::from_str(text).map_err(|e| bad(&format!("not a JSON object: {e}")))?;
    let Some(Value::Array(messages)) = request.get("messages") else {
        return Err(bad("no \"messages\" array"));
    };
    let model = match (model, request.get("model").and_then(Value::as_str)) {
        ("", Some(own)) => own,
        ("", None) => return Err(bad("no model given and the request has no \"model\"")),
        (given, _) => given,
    };
    let provider = config
        .provider_for(Some(model))
        .map_or("-", |(name, _)| name);
    let policy = config.policy_for(provider, model);
    let estimate = counter.estimate(model, &request);
    if !estimate.window_known {
        let line = crate::tokens::MissingWindow::new("", model).config;
        return Err(bad(&format!(
            "the window of model {model:?} is not known (the proxy forwards its requests \
             unfolded until the upstream's first context-length error names it): \
             set {line} in the --config file"
        )));
    }
    let budget = Budget::for_request(config, &policy, &estimate, now_unix());
    let compression = if config.archive.enabled {
        compression(
            config,
            counter,
            (provider, model),
            &policy,
            &estimate,
            messages,
        )
    } else {
        Compression::default()
    };
    let counts = compression.counts(&estimate.messages, |c| estimate.calibrated(u64::from(c)));
    let turn = ReplayTurn {
        config,
        counter,
        model,
        policy: &policy,
        budget: &budget,
        messages,
        ids: &ids_of(messages),
        stubbed: &compression.stubbed(&counts, |c| estimate.calibrated(u64::from(c))),
        counts: &counts,
    };
    let mut row = turn.row(line, estimate.input_tokens, chain);
    let applied = chain.best_match(messages).filter(|_| row.fold != "none");
    row.covered = applied.map_or(0, |s| s.covered);
    let mark = applied.map_or(0, |s| s.retained.stubs_before);
    let shown = fold::pinned_len(messages) + row.covered;
    row.stubs = compression
        .stubbable()
        .into_iter()
        .filter(|&i| i >= shown && compression.shown_stub(i, mark).is_some())
        .count();
    let settings = (model.to_string(), provider.to_string(), policy, budget);
    Ok((row, settings))
}

/// Older-turn compression as the proxy makes it for a keyed conversation.
fn compression(
    config: &Config,
    counter: &TokenCounter,
    (provider, model): (&str, &str),
    policy: &Policy,
    estimate: &crate::tokens::Estimate,
    messages: &[Value],
) -> Compression {
    let recall = config.recall_for(model) == crate::config::Recall::Tool;
    let raw = &estimate.messages;
    let room = Room::of(policy.trigger_ratio, estimate.context_window);
    let settings = config.compress_for(provider, model);
    Compression::within(
        messages,
        raw,
        (&settings, policy.preserve_recent),
        room,
        &mut |i| {
            let stub = stub(messages, i, *raw.get(i)?, recall)?;
            let tokens = counter.message_tokens(model, &stub);
            Some((stub, tokens))
        },
    )
}

/// One request's facts, as the proxy's request path has them.
struct ReplayTurn<'a> {
    config: &'a Config,
    counter: &'a TokenCounter,
    model: &'a str,
    policy: &'a Policy,
    budget: &'a Budget,
    messages: &'a [Value],
    ids: &'a [fold::MessageId],
    counts: &'a [u32],
    stubbed: &'a [u32],
}

impl ReplayTurn<'_> {
    /// The request's row as far as the plan tells it (its fold, if any,
    /// pushed on `chain`); what the view shows compressed comes after.
    fn row(&self, line: usize, tokens_in: u32, chain: &mut FoldChain) -> Row {
        let mut row = Row {
            line,
            messages: self.messages.len(),
            tokens_in,
            tokens_out: 0,
            window: self.budget.context_window,
            fold: "none",
            reason: None,
            folded: 0,
            covered: 0,
            stubs: 0,
        };
        let decision = self.plan(chain);
        if let Decision::Fold(plan) = &decision {
            let state = match FoldState::restubbed(plan, self.budget.now_unix) {
                Some(state) if plan.restub => state,
                _ => self.mock_fold(plan),
            };
            row.fold = if plan.restub { "restub" } else { "new" };
            row.reason = Some(plan.reason.as_str());
            row.folded = plan.fold.len();
            chain.push(state);
            // The forwarded view, measured by the engine with the new state.
            row.tokens_out = view_tokens(&self.plan(chain));
        } else {
            row.tokens_out = view_tokens(&decision);
            if let Decision::CannotFit(c) = &decision {
                row.fold = "cannot-fit";
                row.reason = Some(c.reason.as_str());
            } else if decision.base().is_some() {
                row.fold = "reused";
            }
        }
        row
    }

    fn plan(&self, chain: &FoldChain) -> Decision {
        let count = |m: &Value| self.counter.message_tokens(self.model, m);
        let roles = crate::message::roles_of(self.messages);
        let request = Messages {
            values: self.messages,
            roles: &roles,
            ids: self.ids,
            counts: self.counts,
            stubbed: self.stubbed,
        };
        let placement = self.config.summary.placement;
        fold::plan(
            request,
            Some(chain),
            self.policy,
            self.budget,
            &count,
            placement,
        )
    }

    /// The fold a summarizer would make: a placeholder narrative of half
    /// the summary budget, and the real ledger in the other half.
    fn mock_fold(&self, plan: &fold::FoldPlan) -> FoldState {
        let count = |text: &str| {
            self.counter
                .message_tokens(self.model, &json!({"role": "system", "content": text}))
        };
        let half = self.budget.summary_reserve / 2;
        let summary = Summary {
            summary: format!(
                "(replay: mock summary){}",
                " folded".repeat(half.saturating_sub(16) as usize)
            ),
            ..Summary::default()
        };
        let folded = plan.covered - usize::from(plan.kept_user.is_some());
        let text = summary.render(folded);
        let base = plan.base.as_ref();
        let previous = base.map(|b| b.ledger.clone()).unwrap_or_default();
        let previous_summary = base.map(|b| b.summary.render(b.folded()));
        let update = Ledger::after_fold(
            &previous,
            previous_summary.as_deref(),
            &plan.to_fold(self.messages),
            &text,
            self.budget.summary_reserve.saturating_sub(count(&text)),
            &count,
        );
        FoldState::after(plan, summary, update.ledger, self.budget.now_unix)
    }
}

/// Prompt tokens of the view a decision forwards as it stands.
fn view_tokens(decision: &Decision) -> u32 {
    match decision {
        Decision::NoFold(info) => info.tokens,
        Decision::Fold(plan) => plan.tokens_before,
        Decision::CannotFit(c) => c.view.tokens,
    }
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl fmt::Display for Report {
    /// A header with the settings, a table with one row per request, and totals.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.settings(f)?;
        writeln!(
            f,
            "{:>5} {:>8} {:>10} {:>10} {:>6}  {:<10} {:<9} {:>6} {:>7} {:>5}",
            "line",
            "messages",
            "tokens_in",
            "tokens_out",
            "ratio",
            "fold",
            "reason",
            "folded",
            "covered",
            "stubs"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "{:>5} {:>8} {:>10} {:>10} {:>5.1}%  {:<10} {:<9} {:>6} {:>7} {:>5}",
                r.line,
                r.messages,
                r.tokens_in,
                r.tokens_out,
                100.0 * f64::from(r.tokens_out) / f64::from(r.window.max(1)),
                r.fold,
                r.reason.unwrap_or("-"),
                r.folded,
                r.covered,
                r.stubs
            )?;
        }
        let sum = |f: fn(&Row) -> u32| self.rows.iter().map(|r| u64::from(f(r))).sum::<u64>();
        let (tokens_in, tokens_out) = (sum(|r| r.tokens_in), sum(|r| r.tokens_out));
        let folds: Vec<String> = self
            .rows
            .iter()
            .filter(|r| r.fold == "new")
            .map(|r| r.line.to_string())
            .collect();
        write!(
            f,
            "# {} requests, {} folds (lines {}), {} tokens in, {} forwarded ({:.2}x)",
            self.rows.len(),
            folds.len(),
            if folds.is_empty() {
                "-".to_string()
            } else {
                folds.join(", ")
            },
            tokens_in,
            tokens_out,
            tokens_out as f64 / tokens_in.max(1) as f64
        )
    }
}

impl Report {
    /// The header: the model's window and budgets, the policy, the mode.
    fn settings(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (p, b) = (&self.policy, &self.budget);
        let window = f64::from(b.context_window);
        writeln!(
            f,
            "# model {} on provider {}: window {} tokens, output reserve {}, summary budget {}",
            self.model, self.provider, b.context_window, b.output_reserve, b.summary_reserve
        )?;
        writeln!(
            f,
            "# policy: trigger_ratio {} ({:.0} tokens), reset_ratio {} ({:.0}), preserve_recent {}, \
             overflow_buffer {}, safety_user_turns {}, cooldown_messages {}, min_messages {}",
            p.trigger_ratio,
            p.trigger_ratio * window,
            p.reset_ratio,
            p.reset_ratio * window,
            p.preserve_recent,
            p.overflow_buffer,
            p.safety_user_turns,
            p.cooldown_messages,
            p.min_messages
        )?;
        let mode = if p.mode == Mode::Background {
            "; in background mode (configured) the proxy prepares each fold from prefold_ratio on \
             and applies it at the first request past the trigger"
        } else {
            ""
        };
        writeln!(
            f,
            "# folds as inline mode makes them{mode}; mock summarizer: a placeholder of half the \
             summary budget plus the real ledger"
        )?;
        Ok(())
    }
}
