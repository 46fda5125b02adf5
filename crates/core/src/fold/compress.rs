//! Older-turn compression, the tier before summarizing: long tool results
//! (and, when asked, long assistant answers) of older turns become stubs
//! in the view — what the message was, its size, its first line, the
//! specifics found in it and how to recall it — while the message itself
//! goes to the archive. Pure functions, no IO, property-tested in
//! `tests/fold_props.rs`.
//!
//! # Rules
//!
//! - **Candidates** ([`select`]): a `tool` message (and, with
//!   `compress.assistant`, an `assistant` message) of at least
//!   `min_tokens`, outside the pinned head and the preserved tail (the last
//!   `policy.preserve_recent` messages, and always the last message),
//!   followed by at least `after_turns` turns. A turn starts at a user
//!   message or at the first of a run of tool results (Anthropic sends tool
//!   results as user turns; in an agent loop each round is one). User
//!   messages are never candidates, so the last user message never is.
//! - **Batches**: of the `C` candidates, the first `floor(C / batch) *
//!   batch` in conversation order are compressed. A conversation only
//!   grows, so the candidates only grow, and the view changes only when
//!   `batch` more have accumulated: between batches the prompt prefix is
//!   stable for the upstream's prompt cache. Stateless: the rule reads the
//!   request alone.
//! - **Frozen bytes** ([`stub`]): a stub is a pure function of the message,
//!   the tool call it answers and its token count, so it renders to the
//!   same bytes on every request.
//! - **Pairs stay whole**: a tool stub keeps its `role` and `tool_call_id`
//!   (every field but `content`); an assistant stub keeps its `tool_calls`.
//!
//! - **Only when it pays** ([`Room`]): every batch rewrites the prompt from
//!   its first stub on, a prompt-cache miss. A batch is shown on its own
//!   when the tokens it saves over the expected remaining requests (as
//!   many as there have been steps, but no more than the steps left until
//!   the raw history reaches the fold trigger, where the fold plan stubs
//!   it anyway) outweigh the miss under the strictest published cache
//!   prices ([`CACHE_WRITE`], [`CACHE_READ`]): `saved × requests × read >
//!   rewritten × (write − read)`. Whether a batch pays is
//!   judged on the request as it was when the batch formed (a prefix every
//!   later request repeats), so a batch once shown stays. When the window
//!   is at risk the fold trigger fires, and the fold plan stubs every
//!   batch not shown, in one rewrite that buys several steps of room (a
//!   restub, no summarizer call, or a fold: [`super::plan`]); a batch
//!   shown as soon as it formed would rewrite the prompt every step and a
//!   half of a loop with 2–3 parallel calls per step (docs/folding.md).
//!   Batches not shown are stubbed by the next fold or restub
//!   (`compress.with_fold`).
//!
//! Compression decides from the message counts alone, so it runs before
//! the fold triggers: [`Compression::counts`] is what [`super::plan`] sees,
//! while a fold still summarizes the original messages.

use super::FoldError;
use super::extract::{extract, message_text};
use super::state::FoldState;
use super::view::{Item, layout, materialize};
use crate::config::{Compress, Placement};
use crate::message::RECALL_TOOL;
use crate::message::{MessageId, Role, pinned_count, tool_call_id};
use serde_json::Value;
use std::sync::Arc;
use twox_hash::XxHash3_128;

/// Every stub's text starts with this.
pub const STUB_PREFIX: &str = "[foldgate: compressed ";
/// Specifics a stub lists at most (the archive keeps the rest).
pub const STUB_ITEMS: usize = 24;
/// The first line a stub shows, at most, in characters.
const FIRST_LINE_CHARS: usize = 160;
/// A specific longer than this is data, not a detail (as in the ledger).
const MAX_ITEM_CHARS: usize = 200;
/// Words of the first line a recall query suggests, without a call id.
const QUERY_WORDS: usize = 8;
/// The archive's `fold` field for compressed messages.
pub const ARCHIVE_FOLD: &str = "compress";

/// The indices to compress, ascending: the first `floor(C / batch) *
/// batch` of the `C` candidates (see the module docs). `roles` and
/// `tokens` are per message; `tokens` must depend on the message alone
/// (uncalibrated), so the choice is the same on every request.
pub fn select(
    roles: &[Option<Role>],
    tokens: &[u32],
    settings: &Compress,
    preserve_recent: usize,
) -> Vec<usize> {
    if !settings.active() {
        return Vec::new();
    }
    let n = roles.len().min(tokens.len());
    let pinned = pinned_count(roles.iter().copied());
    let tail = n.saturating_sub(preserve_recent.max(1));
    let mut later = 0;
    let mut out = Vec::new();
    for i in (0..n).rev() {
        let kind = match roles[i] {
            Some(Role::Tool) => settings.enabled,
            Some(Role::Assistant) => settings.assistant,
            _ => false,
        };
        if kind
            && i >= pinned
            && i < tail
            && later >= settings.after_turns
            && long_enough(roles, tokens, i, settings.min_tokens)
        {
            out.push(i);
        }
        if starts_turn(roles, i) {
            later += 1;
        }
    }
    out.reverse();
    out.truncate(out.len() / settings.batch.max(1) * settings.batch.max(1));
    out
}

/// Cache writes and reads as a share of the input price: Anthropic's (the
/// strictest published sheet: writes at 1.25×, reads at 0.1×; OpenAI's
/// cached input is 0.25–0.5× with writes at 1×), so a batch that pays
/// here pays under every sheet.
pub const CACHE_WRITE: f64 = 1.25;
/// See [`CACHE_WRITE`].
pub const CACHE_READ: f64 = 0.1;

/// When a batch of stubs is worth its cache miss (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Room {
    /// Prompt tokens (in the request's raw count) at which the token
    /// trigger folds; 0: every batch is shown (no economy, as without a
    /// window to judge by).
    pub trigger: u64,
}

impl Room {
    /// The room of a `context_window` under `trigger_ratio`.
    pub fn of(trigger_ratio: f64, context_window: u32) -> Self {
        Self {
            trigger: super::trigger::token_at(trigger_ratio, context_window),
        }
    }
}

/// Whether a batch pays on its own: see [`Room`]. `batch` holds the batch's
/// messages (ascending) and each one's saved tokens (raw minus stub).
fn shown(
    roles: &[Option<Role>],
    tokens: &[u32],
    batch: &[(usize, u32)],
    (settings, preserve_recent): (&Compress, usize),
    room: Room,
) -> bool {
    let (Some(&(first, _)), Some(&(last, _))) = (batch.first(), batch.last()) else {
        return false;
    };
    // The request at which the batch formed: its last message followed by
    // `after_turns` turns and outside the preserved tail.
    let mut turns = 0;
    let mut formed = last + 1;
    while turns < settings.after_turns && formed < roles.len() {
        if starts_turn(roles, formed) {
            turns += 1;
        }
        formed += 1;
    }
    // `formed` is one past the turn start that completed the count; the
    // request ends at the message after it at the earliest.
    let formed = formed
        .max(last + preserve_recent.max(1) + 1)
        .min(roles.len());
    let starts: Vec<usize> = (0..formed)
        .filter(|&i| roles[i] == Some(Role::Assistant))
        .collect();
    let steps = starts.len() as u64;
    // The requests the stubs save on: as many more as there have been
    // steps, but only until the raw history reaches the fold trigger,
    // where a restub or a fold stubs the batch anyway in a rewrite that
    // happens regardless (the raw history bounds the view from above, so
    // this is the fewest steps until then).
    let sum = |from: usize| {
        tokens[from..formed]
            .iter()
            .map(|&t| u64::from(t))
            .sum::<u64>()
    };
    let per_step =
        super::trigger::tokens_per_step(&starts, &tokens[..formed], super::trigger::RECENT_STEPS)
            .unwrap_or(0);
    let until_trigger = room.trigger.saturating_sub(sum(0)) / per_step.max(1);
    let requests = steps.min(until_trigger) as f64;
    let saved: f64 = batch.iter().map(|&(_, s)| f64::from(s)).sum();
    let rewritten = sum(first) as f64;
    saved * requests * CACHE_READ > rewritten * (CACHE_WRITE - CACHE_READ)
}

fn starts_turn(roles: &[Option<Role>], i: usize) -> bool {
    match roles[i] {
        Some(Role::User) => true,
        Some(Role::Tool) => i == 0 || roles[i - 1] != Some(Role::Tool),
        _ => false,
    }
}

/// The messages a fold may stub (`compress.with_fold`): long tool results
/// (and, with `compress.assistant`, answers) outside the pinned head,
/// whatever turns follow them. The newest exchange and the last message
/// are among them for a background rewrite, which lands on a later
/// request; no view of this request shows them as stubs
/// ([`Compression::shown_stub`]).
fn eligible<'r>(
    roles: &'r [Option<Role>],
    tokens: &'r [u32],
    settings: &'r Compress,
) -> impl Iterator<Item = usize> + 'r {
    let n = roles.len().min(tokens.len());
    let pinned = pinned_count(roles.iter().copied());
    (pinned..n).filter(move |&i| {
        let kind = match roles[i] {
            Some(Role::Tool) => settings.enabled,
            Some(Role::Assistant) => settings.assistant,
            _ => false,
        };
        kind && long_enough(roles, tokens, i, settings.min_tokens)
    })
}

/// Whether message `i` is long enough to stub: `min_tokens` on its own,
/// or, for a tool result, the results of its step together (the run of
/// tool results it belongs to): a step of 2–3 parallel calls whose results
/// are each under `min_tokens` weighs as much in the window as one long
/// result (docs/folding.md, "Sized by the step").
fn long_enough(roles: &[Option<Role>], tokens: &[u32], i: usize, min_tokens: u32) -> bool {
    if tokens[i] >= min_tokens {
        return true;
    }
    if roles[i] != Some(Role::Tool) {
        return false;
    }
    let is_tool = |j: &usize| roles.get(*j) == Some(&Some(Role::Tool));
    let first = (0..i).rev().take_while(is_tool).last().unwrap_or(i);
    let end = (i..roles.len().min(tokens.len()))
        .take_while(is_tool)
        .last()
        .map_or(i + 1, |j| j + 1);
    let step: u64 = tokens[first..end].iter().map(|&t| u64::from(t)).sum();
    step >= u64::from(min_tokens)
}

/// The specifics a stub of `message` lists: the artifacts of its text (an
/// assistant message's content only; its tool calls stay in the stub), in
/// order of appearance, single-line and at most [`MAX_ITEM_CHARS`] long,
/// the first [`STUB_ITEMS`] of them.
pub fn stub_items(message: &Value) -> Vec<String> {
    extract(&content_text(message))
        .into_iter()
        .map(|a| a.value)
        .filter(|v| !v.contains('\n') && v.chars().nth(MAX_ITEM_CHARS).is_none())
        .take(STUB_ITEMS)
        .collect()
}

/// The stub standing for `messages[i]`, which has `tokens` tokens; with
/// `recall`, it tells the model how to recall the message (else only that
/// it is archived). `None` when the message is not a tool result or an
/// assistant answer.
pub fn stub(messages: &[Value], i: usize, tokens: u32, recall: bool) -> Option<Value> {
    let message = messages.get(i)?;
    let role = Role::of_message(message)?;
    let text = content_text(message);
    let first = first_line(&text);
    let (what, query) = match role {
        Role::Tool => {
            let id = tool_call_id(message);
            let name = tool_name(messages, i);
            let what = match (name, id) {
                (Some(name), Some(id)) => format!("tool result of `{name}`, call `{id}`"),
                (None, Some(id)) => format!("tool result, call `{id}`"),
                _ => "tool result".to_string(),
            };
            (what, id.map(str::to_string))
        }
        Role::Assistant => ("assistant answer".to_string(), None),
        _ => return None,
    };
    let query = query.unwrap_or_else(|| {
        first
            .split_whitespace()
            .take(QUERY_WORDS)
            .collect::<Vec<_>>()
            .join(" ")
    });
    let mut out = format!("{STUB_PREFIX}{what}; {tokens} tokens]");
    if !first.is_empty() {
        out.push_str("\nFirst line: ");
        out.push_str(&first);
    }
    let items = stub_items(message);
    if !items.is_empty() {
        out.push_str("\nDetails:");
        for item in &items {
            out.push_str("\n- ");
            out.push_str(item);
        }
    }
    if recall {
        out.push_str(&format!(
            "\nThe full text is archived: call {RECALL_TOOL} with the query \"{}\" to read it.",
            query.replace('"', "'")
        ));
    } else {
        out.push_str("\nThe full text is archived.");
    }
    with_content(message, out)
}

/// `message` with its `content` replaced by `text` (in place, or last
/// where it had none), its other fields copied: the message's old content
/// (a tool result's kilobytes) is not copied only to be dropped.
fn with_content(message: &Value, text: String) -> Option<Value> {
    let fields = message.as_object()?;
    let mut out = serde_json::Map::with_capacity(fields.len() + 1);
    let mut text = Some(text);
    for (key, value) in fields {
        let value = match key.as_str() {
            "content" => Value::String(text.take().unwrap_or_default()),
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    if let Some(text) = text {
        out.insert("content".into(), Value::String(text));
    }
    Some(Value::Object(out))
}

/// The stubs of one request's view, and the message counts planning sees.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Compression {
    /// `(index, stub, stub tokens)`, ascending by index.
    stubs: Vec<(usize, Value, u32)>,
    /// The same for the other messages a fold may stub
    /// (`compress.with_fold`): long tool results not selected yet.
    spare: Vec<(usize, Value, u32)>,
    /// Where the newest tool exchange starts (the results the model is
    /// answering now): no stub mark shows a spare stub from there on, on
    /// this request (a background rewrite's mark may reach further: it
    /// was made for a later request, [`super::Budget::lands_later`]).
    newest: usize,
}

impl Compression {
    /// Compresses the [`select`]ed messages of `messages` (`raw`: each
    /// one's uncalibrated tokens) whose stub is smaller; `count` gives a
    /// stub's tokens in the same unit; `recall`: see [`stub`].
    pub fn of(
        messages: &[Value],
        raw: &[u32],
        settings: &Compress,
        preserve_recent: usize,
        recall: bool,
        count: &dyn Fn(&Value) -> u32,
    ) -> Self {
        Self::with(messages, raw, settings, preserve_recent, &mut |i| {
            let stub = stub(messages, i, *raw.get(i)?, recall)?;
            let tokens = count(&stub);
            Some((stub, tokens))
        })
    }

    /// [`Compression::of`] with the stubs and their tokens from `make`
    /// (e.g. a cache of [`stub`]'s results), every batch shown.
    pub fn with(
        messages: &[Value],
        raw: &[u32],
        settings: &Compress,
        preserve_recent: usize,
        make: &mut dyn FnMut(usize) -> Option<(Value, u32)>,
    ) -> Self {
        Self::within(
            messages,
            raw,
            (settings, preserve_recent),
            Room::default(),
            make,
        )
    }

    /// [`Compression::with`], showing only the batches that pay in `room`.
    pub fn within(
        messages: &[Value],
        raw: &[u32],
        (settings, preserve_recent): (&Compress, usize),
        room: Room,
        make: &mut dyn FnMut(usize) -> Option<(Value, u32)>,
    ) -> Self {
        let roles: Vec<Option<Role>> = messages.iter().map(Role::of_message).collect();
        let mut selected = select(&roles, raw, settings, preserve_recent);
        let mut render = |i: usize| {
            let (stub, tokens) = make(i)?;
            // A stub that saves nothing is not worth the recall.
            (tokens < *raw.get(i)?).then_some((i, stub, tokens))
        };
        let mut stubs: Vec<(usize, Value, u32)> =
            selected.iter().filter_map(|&i| render(i)).collect();
        if settings.when_it_pays && room.trigger > 0 && !stubs.is_empty() {
            // A message whose stub saves nothing is not shown either way.
            let saved = |i: usize| {
                stubs
                    .iter()
                    .find(|s| s.0 == i)
                    .map_or(0, |s| raw.get(i).map_or(0, |&r| r.saturating_sub(s.2)))
            };
            let size = settings.batch.max(1);
            let keep: Vec<usize> = selected
                .chunks(size)
                .filter(|batch| {
                    let batch: Vec<(usize, u32)> = batch.iter().map(|&i| (i, saved(i))).collect();
                    shown(&roles, raw, &batch, (settings, preserve_recent), room)
                })
                .flatten()
                .copied()
                .collect();
            stubs.retain(|s| keep.binary_search(&s.0).is_ok());
            selected = keep;
        }
        let spare = if settings.with_fold {
            eligible(&roles, raw, settings)
                .filter(|i| selected.binary_search(i).is_err())
                .filter_map(&mut render)
                .collect()
        } else {
            Vec::new()
        };
        let newest = super::plan::last_exchange(messages);
        Self {
            stubs,
            spare,
            newest,
        }
    }

    /// Whether nothing is compressed.
    pub fn is_empty(&self) -> bool {
        self.stubs.is_empty()
    }

    /// How many messages are compressed.
    pub fn len(&self) -> usize {
        self.stubs.len()
    }

    /// The compressed messages' indices, ascending.
    pub fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.stubs.iter().map(|(i, _, _)| *i)
    }

    /// The stub of message `i`, if it is compressed (or a fold may
    /// compress it).
    pub fn stub_of(&self, i: usize) -> Option<&Value> {
        self.any(i).map(|(_, stub, _)| stub)
    }

    /// Whether message `i` is compressed by the batch rule itself (not
    /// only when a fold marks it).
    pub fn is_selected(&self, i: usize) -> bool {
        self.find(i).is_some()
    }

    /// Every message that is compressed or that a fold may compress,
    /// ascending.
    pub fn stubbable(&self) -> Vec<usize> {
        let mut all: Vec<usize> = self
            .indices()
            .chain(self.spare.iter().map(|s| s.0))
            .collect();
        all.sort_unstable();
        all
    }

    /// The stub tokens of message `i`, if it is compressed (or a fold
    /// may compress it).
    pub fn tokens_of(&self, i: usize) -> Option<u32> {
        self.any(i).map(|(_, _, tokens)| *tokens)
    }

    fn find(&self, i: usize) -> Option<&(usize, Value, u32)> {
        self.stubs
            .binary_search_by_key(&i, |(j, _, _)| *j)
            .ok()
            .and_then(|at| self.stubs.get(at))
    }

    /// The stub of `i` from either list (selected, or one a fold may add).
    fn any(&self, i: usize) -> Option<&(usize, Value, u32)> {
        self.find(i).or_else(|| {
            self.spare
                .binary_search_by_key(&i, |(j, _, _)| *j)
                .ok()
                .and_then(|at| self.spare.get(at))
        })
    }

    /// Each message's tokens as a stub where a fold may stub it (through
    /// `unit`, e.g. calibration), else its entry of `counts` (the
    /// planning counts); empty when a fold stubs nothing more.
    pub fn stubbed(&self, counts: &[u32], unit: impl Fn(u32) -> u32) -> Vec<u32> {
        if self.spare.is_empty() {
            return Vec::new();
        }
        let mut out = counts.to_vec();
        for (i, _, tokens) in &self.spare {
            if let Some(c) = out.get_mut(*i) {
                *c = unit(*tokens);
            }
        }
        out
    }

    /// `counts` with each compressed message's count replaced by its
    /// stub's, every count through `unit` (e.g. calibration).
    pub fn counts(&self, counts: &[u32], unit: impl Fn(u32) -> u32) -> Vec<u32> {
        let mut out: Vec<u32> = counts.iter().map(|&c| unit(c)).collect();
        for (i, _, tokens) in &self.stubs {
            if let Some(c) = out.get_mut(*i) {
                *c = unit(*tokens);
            }
        }
        out
    }

    /// A view's layout with each compressed message shown as its stub, and
    /// every message before `mark` that a fold may stub shown as its stub
    /// too (the stubs a fold state keeps; 0: none).
    pub fn apply_marked(&self, items: Vec<Item>, mark: usize) -> Vec<Item> {
        if self.is_empty() && (mark == 0 || self.spare.is_empty()) {
            return items;
        }
        items
            .into_iter()
            .map(|item| match item {
                Item::Original(i) => match self.shown_stub(i, mark) {
                    Some(v) => Item::Stub(i, v.clone()),
                    None => Item::Original(i),
                },
                other => other,
            })
            .collect()
    }

    /// The stub a view with stub mark `mark` shows for message `i`, if it
    /// shows one: a compressed message's, or before `mark` one a fold may
    /// add, never in the newest tool exchange.
    pub fn shown_stub(&self, i: usize, mark: usize) -> Option<&Value> {
        match self.find(i) {
            Some(found) => Some(&found.1),
            None if i < mark.min(self.newest) => self.any(i).map(|(_, v, _)| v),
            None => None,
        }
    }
}

/// Stubs already rendered, with their tokens. A stub is a pure function
/// of its message, the call it answers, its token count, the recall line
/// and the model that counts it, so a conversation's stubs, shown on every
/// later request, are rendered once per process. An entry keeps only the
/// stub's text and tokens; the stub is the message it stands for (same
/// identity, so the same fields) with that text as its content. Bounded by
/// the bytes entries hold ([`STUB_ENTRY_BYTES`] and the text), and a stub
/// unused for [`STUB_IDLE`] goes: its conversation is over or away (it is
/// rendered again, the same bytes, if the conversation comes back), so the
/// cache holds what live conversations show rather than filling to its
/// bound with ended ones.
pub struct StubCache(moka::sync::Cache<u128, Arc<(Box<str>, u32)>>);

/// How long a stub no request showed is kept: a live conversation shows
/// its stubs on each request; rendering one again costs microseconds.
pub const STUB_IDLE: std::time::Duration = std::time::Duration::from_secs(120);

/// Bytes an entry holds beside its text: moka's entry with its 128-bit
/// key and the `Arc`'s block (two counts, the text's pointer and length,
/// the tokens). `examples/cache_bytes` counted 288 on the heap (542 for
/// a 254-byte text).
pub const STUB_ENTRY_BYTES: u32 = 288;

impl std::fmt::Debug for StubCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StubCache")
            .field(&self.0.entry_count())
            .finish()
    }
}

impl StubCache {
    /// Bytes charged against the cache's bound.
    pub fn bytes(&self) -> u64 {
        self.0.weighted_size()
    }

    /// A cache of about `bytes` of stubs, each kept while used within
    /// `idle` ([`STUB_IDLE`] in the server).
    pub fn new(bytes: u64, idle: std::time::Duration) -> Self {
        Self(
            moka::sync::Cache::builder()
                .max_capacity(bytes)
                .weigher(|_, v: &Arc<(Box<str>, u32)>| {
                    u32::try_from(v.0.len())
                        .unwrap_or(u32::MAX)
                        .saturating_add(STUB_ENTRY_BYTES)
                })
                .time_to_idle(idle)
                .build(),
        )
    }

    /// The stub of `messages[i]` (identity `id`, `tokens` tokens), counted
    /// by `count` for `model`: its text from the cache, else made and kept.
    pub fn get(
        &self,
        messages: &[Value],
        i: usize,
        (id, tokens): (MessageId, u32),
        (model, recall): (&str, bool),
        count: &dyn Fn(&Value) -> u32,
    ) -> Option<(Value, u32)> {
        let mut h = XxHash3_128::new();
        h.write(&id.to_le_bytes());
        h.write(&tokens.to_le_bytes());
        h.write(&[u8::from(recall)]);
        for part in [model, tool_name(messages, i).unwrap_or("")] {
            h.write(part.as_bytes());
            h.write(b"\0");
        }
        let key = h.finish_128();
        if let Some(hit) = self.0.get(&key) {
            let (text, counted) = hit.as_ref();
            return Some((with_content(messages.get(i)?, text.to_string())?, *counted));
        }
        let stub = stub(messages, i, tokens, recall)?;
        let counted = count(&stub);
        let text = stub.get("content").and_then(Value::as_str)?;
        self.0.insert(key, Arc::new((text.into(), counted)));
        Some((stub, counted))
    }
}

/// The text a stub describes: the content (an assistant's tool calls stay
/// beside the stub, so they are not described).
fn content_text(message: &Value) -> String {
    match message.get("content") {
        Some(content) => message_text(&serde_json::json!({ "content": content })),
        None => String::new(),
    }
}

/// The first non-blank line of `text`, trimmed, at most
/// [`FIRST_LINE_CHARS`] characters (`…` where cut).
fn first_line(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    match line.char_indices().nth(FIRST_LINE_CHARS) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

/// The name of the tool call that the tool result `messages[i]` answers,
/// from the assistant messages before it.
pub fn tool_name(messages: &[Value], i: usize) -> Option<&str> {
    let id = tool_call_id(messages.get(i)?)?;
    messages[..i].iter().rev().find_map(|m| {
        m.get("tool_calls")?
            .as_array()?
            .iter()
            .find(|c| c.get("id").and_then(Value::as_str) == Some(id))?
            .get("function")?
            .get("name")?
            .as_str()
    })
}

/// [`build_view`] with the messages `compression` selected shown as their
/// stubs.
pub fn build_view_with(
    messages: &[Value],
    state: Option<&FoldState>,
    placement: Placement,
    compression: &Compression,
) -> Result<Vec<Value>, FoldError> {
    if let Some(s) = state {
        if !s.matches(messages) {
            return Err(FoldError::StateMismatch { id: s.id.clone() });
        }
    }
    let mark = state.map_or(0, |s| s.retained.stubs_before);
    let items = compression.apply_marked(layout(messages, state, placement), mark);
    Ok(materialize(messages, items))
}

#[cfg(test)]
mod tests;
