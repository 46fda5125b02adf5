//! Injected recall, for models that do not call tools: on a request whose
//! view hides archived messages, foldgate searches the conversation's
//! archive with the last user message (and, in an agent loop, the last
//! tool call's arguments) and places the best excerpts that are not in
//! the view, in one marked block, right before the last user message:
//! after the pinned messages and the summary, so the cache-stable prefix
//! keeps its bytes. The block is bounded by `archive.inject_tokens` and by
//! the window's [`room`](super::room); the client's messages are not
//! changed otherwise, and the block is never archived (the client never
//! sends it back).

use super::super::prepared::Prepared;
use super::super::request::ConvRequest;
use super::fit;
use super::room::{self, Fit};
use super::sticky::Placed;
use crate::app::App;
use crate::archive::query::{self, Query};
use crate::archive::{Excerpt, Hit};
use crate::config::RecallMode;
use crate::fold::extract::message_text;
use crate::fold::trigger::RECENT_STEPS;
use crate::fold::view::Item;
use crate::message::{Role, is_role, makes_calls};
use serde_json::{Map, Value};
use std::collections::HashSet;

/// The block's first line: what it is and why it is there.
pub const HEADING: &str = "[foldgate] Recalled from earlier in this conversation \
                           (archived messages no longer shown above; they may answer the next message):";

/// The share of the query's content words a hit must hold to be injected:
/// a passage that matches one word of a long question is noise.
const MIN_COVERAGE: f64 = 0.5;
/// Steps of the conversation a filled view leaves room for when its fold
/// lands, so the turns right after it do not move the fill.
const HEADROOM_STEPS: u64 = 2;
/// A hit holding this many of the query's content words qualifies however
/// long the query (an agent loop's query has many).
const ENOUGH_WORDS: usize = 3;

/// The excerpts to inject, as a block of text.
#[derive(Debug)]
pub struct Injection {
    /// The block, heading first.
    pub text: String,
    /// Excerpts in it.
    pub excerpts: usize,
    /// Its estimated tokens (not calibrated).
    pub tokens: u32,
}

/// The injection `request` gets, when its conversation injects, its view
/// hides archived messages, and a hit absent from the view covers enough
/// of the query within the room left.
pub(in crate::pipeline) async fn plan(
    app: &App,
    request: &ConvRequest,
    prepared: &Prepared,
    kept: &[Placed],
) -> Option<Injection> {
    let turn = request.turn()?;
    let messages = turn.messages().values;
    if !(turn.inject() || (turn.recall() && beside_tool(app, request.fields(), messages))) {
        return None;
    }
    let items = prepared.view.as_ref()?;
    let key = turn.data.key.as_ref()?;
    let words = content_words(&query_text(messages));
    if words.is_empty() {
        return None;
    }
    let (window, reserve) = request.limits()?;
    let room = room::room(window, prepared.tokens_out, reserve);
    let wanted = app.config.archive.inject_tokens;
    let share = match room::fit(wanted, room) {
        Fit::Whole(n) | Fit::Shortened(n) => n,
        Fit::NoRoom => return None,
    };
    // This request's fold may have just queued what it archived.
    app.archive.flush().await;
    let found = app
        .archive
        .found(key, &words.join(" "), query::RECALL_HITS)
        .await;
    // A hit is judged by the words searched by: a speaker's name in half
    // the messages, or a word no message holds, says nothing about it.
    let query = if found.searched.is_empty() {
        Query::of_words(words.iter().map(|w| w.to_lowercase()))
    } else {
        found.searched
    };
    let stems = query::query_stems(&query);
    let fresh = fresh_hits(found.hits, (messages, items), kept, &stems);
    if fresh.is_empty() {
        return None;
    }
    let tokens = |text: &str| fit::text_tokens(app, &request.model, text);
    let framing = tokens(HEADING);
    let text = fit::within(share, framing, &tokens, &|budget| {
        let excerpts = query::matching_lines(&fresh, &query, budget);
        (!excerpts.is_empty()).then(|| render(&excerpts))
    })?;
    let excerpts = text.matches("\n\n[turn ").count();
    let tokens = tokens(&text);
    // Shown again at its place on later requests (see [`kept`]).
    let data = &turn.data;
    app.injected
        .remember(key, (&data.roles, &data.ids), &text, tokens);
    Some(Injection {
        tokens,
        text,
        excerpts,
    })
}

/// The hits the view does not show already: archived messages it hides,
/// kept together as [`together`] says, whose matching words are not in
/// the view's text or an earlier block's.
fn fresh_hits(
    hits: Vec<Hit>,
    (messages, items): (&[Value], &[Item]),
    kept: &[Placed],
    stems: &[String],
) -> Vec<Hit> {
    let mut seen = view_text(messages, items);
    for block in kept {
        seen.push_str(&block.text);
        seen.push('\n');
    }
    let seen = normalized(&seen);
    let shown: HashSet<usize> = items
        .iter()
        .filter_map(|i| match i {
            Item::Original(p) => Some(*p),
            _ => None,
        })
        .collect();
    let hidden: Vec<Hit> = hits
        .into_iter()
        .filter(|h| !shown.contains(&h.row.position))
        .collect();
    let keep = together(&hidden, stems);
    hidden
        .into_iter()
        .zip(keep)
        .filter(|(h, keep)| *keep && !in_view(&h.row.text, stems, &seen))
        .map(|(h, _)| h)
        .collect()
}

/// The blocks earlier requests of the conversation injected, to show
/// again before the user messages they went before, with the same bytes
/// ([`super::sticky`]), when the conversation gets the block; read from
/// the view before the fill (whose tail tells what a fold absorbed), and
/// their tokens. Admitted after the fill ([`admit`]).
pub(in crate::pipeline) fn kept(
    app: &App,
    request: &ConvRequest,
    prepared: &Prepared,
) -> (Vec<Placed>, u32) {
    let Some(turn) = request.turn() else {
        return (Vec::new(), 0);
    };
    let messages = turn.messages().values;
    if !(turn.inject() || (turn.recall() && beside_tool(app, request.fields(), messages))) {
        return (Vec::new(), 0);
    }
    let (Some(items), Some(key)) = (prepared.view.as_ref(), turn.data.key.as_ref()) else {
        return (Vec::new(), 0);
    };
    let data = &turn.data;
    app.injected.kept(key, (&data.roles, &data.ids), items)
}

/// Whether the kept blocks' `tokens` fit the room the view (the fill
/// included) leaves; if so they are added to `prepared`'s tokens. The
/// fill is planned without them, so its first message does not move for
/// them (it leaves the block's whole budget, `archive.inject_tokens`);
/// the kept blocks and this turn's block share that room, and when the
/// kept ones no longer fit it they are all left out (one cache miss).
pub(in crate::pipeline) fn admit(
    request: &ConvRequest,
    prepared: &mut Prepared,
    tokens: u32,
) -> bool {
    let Some((window, reserve)) = request.limits() else {
        return false;
    };
    if tokens > room::room(window, prepared.tokens_out, reserve) {
        return false;
    }
    prepared.tokens_out = prepared.tokens_out.saturating_add(tokens);
    prepared.raw_tokens_out = prepared.raw_tokens_out.saturating_add(tokens);
    true
}

/// Fills the room a folded chat's view leaves with the newest folded
/// messages, verbatim after the summary ([`crate::fold::fill`]), when the
/// request gets the block (so the conversation recalls), is no agent loop
/// (no tools of the client's, no tool call or result in its messages) and
/// its summary is a `system` message. Runs before the block is planned,
/// so the block quotes only what the fill leaves hidden. The fill takes the
/// room the view had when its fold landed (the room now plus what the
/// conversation has said since), beside the recall tool and the block's
/// whole budget (`archive.inject_tokens`), less [`HEADROOM_STEPS`] of the
/// conversation's steps (the next turns fit without a move) and a third of the band
/// between the fold's reset target and its trigger (`trigger_ratio −
/// reset_ratio` of the window) for each such third the conversation has
/// grown since: a budget that stays within the room and changes only at
/// those steps, so its first message stays put in between (on the
/// Anthropic bill each move re-writes the cache after the summary).
/// Measured on the long-conversation QA set of `cargo bench --bench
/// fidelity` and the 60-turn chat of `cargo bench --bench agent`
/// (docs/benchmarks.md): with the fold's reset target alone the verbatim
/// history was about half what trimming keeps, with the band alone about
/// two thirds; moving with every step of the room's shrinking cost the
/// Anthropic bill at 16k 15% over trimming's.
pub(in crate::pipeline) fn fill(app: &App, request: &ConvRequest, prepared: &mut Prepared) {
    let Some(turn) = request.turn() else { return };
    let messages = turn.messages().values;
    let chat = !(request.fields().is_some_and(client_tools) || agent_messages(messages));
    let injects = turn.inject() || (turn.recall() && beside_tool(app, request.fields(), messages));
    if !(chat && injects) || turn.data.placement == crate::config::Placement::User {
        return;
    }
    let (Some(items), Some((window, reserve))) = (prepared.view.as_mut(), request.limits()) else {
        return;
    };
    let tool = if request.recall() {
        fit::json_tokens(app, &request.model, &[request.api.recall().recall_tool()])
    } else {
        0
    };
    let room = room::room(window, prepared.tokens_out, reserve)
        .saturating_sub(tool)
        .saturating_sub(app.config.archive.inject_tokens);
    let policy = &turn.data.policy;
    let band = (policy.trigger_ratio - policy.reset_ratio).max(0.0) * f64::from(window);
    let counts = &turn.data.counts;
    let grown: u64 = prepared
        .landed
        .map_or(0, |n| counts.iter().skip(n).map(|&c| u64::from(c)).sum());
    // The landing's room less two steps of the conversation (the next
    // turns fit beside it), stepped down by a third of the band each time
    // the conversation has grown by as much more: within the room left,
    // and the fill's first message moves only at those steps.
    let step = crate::fold::trigger::step_tokens(messages, counts, RECENT_STEPS).unwrap_or(0);
    let ahead = HEADROOM_STEPS * step;
    let hold = ((band / 3.0) as u64).max(1);
    let stepped = ahead + hold * grown.saturating_sub(ahead).div_ceil(hold);
    let limits = crate::fold::fill::Limits {
        anchored: (u64::from(room) + grown).saturating_sub(stepped),
        room: u64::from(room),
    };
    let Some(fill) = crate::fold::fill::fill(items, counts, limits) else {
        return;
    };
    let raw: u64 = fill
        .shown
        .iter()
        .map(|&i| u64::from(turn.data.estimate.messages.get(i).copied().unwrap_or(0)))
        .sum();
    let mut ids = prepared.view_ids.to_vec();
    let at = fill.at.min(ids.len());
    let shown_ids = fill
        .shown
        .iter()
        .map(|&i| turn.data.ids.get(i).copied().unwrap_or_default());
    ids.splice(at..at, shown_ids);
    prepared.view_ids = ids.into();
    items.splice(
        fill.at..fill.at,
        fill.shown.iter().map(|&i| Item::Original(i)),
    );
    let raw_out = u64::from(prepared.raw_tokens_out) + raw;
    prepared.raw_tokens_out = u32::try_from(raw_out).unwrap_or(u32::MAX);
    prepared.tokens_out = prepared
        .tokens_out
        .saturating_add(u32::try_from(fill.tokens).unwrap_or(u32::MAX));
}

/// Whether a request's messages hold a tool call or result (an agent loop).
fn agent_messages(messages: &[Value]) -> bool {
    messages
        .iter()
        .any(|m| is_role(m, Role::Tool) || makes_calls(m))
}

/// Whether a conversation offered the recall tool gets the block too:
/// always with `archive.inject_with_tool`; under `recall = "auto"` (the
/// default), when the request carries no tools of the client's and its
/// messages no tool call or result (a chat, not an agent loop). Measured:
/// models often do not call the tool, and the block puts the evidence in
/// view for most questions; in an agent loop the block would change with
/// every step's call and move the bytes before the step's messages, which
/// the cache-stable prefix keeps (docs/folding.md#injected-recall).
fn beside_tool(app: &App, fields: Option<&Map<String, Value>>, messages: &[Value]) -> bool {
    let archive = &app.config.archive;
    let agent = fields.is_some_and(client_tools) || agent_messages(messages);
    archive.inject_with_tool || (archive.recall == RecallMode::Auto && !agent)
}

/// Whether a request declares tools of its own (`tools`, or the legacy
/// `functions` of chat completions), on any API.
fn client_tools(fields: &Map<String, Value>) -> bool {
    ["tools", "functions"].iter().any(|k| {
        fields
            .get(*k)
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
    })
}

/// The query's source: the last user message's text, and in an agent loop
/// (assistant tool calls after it) the last call's arguments first.
fn query_text(messages: &[Value]) -> String {
    let Some(last_user) = messages.iter().rposition(|m| is_role(m, Role::User)) else {
        return String::new();
    };
    let call = messages[last_user + 1..]
        .iter()
        .rev()
        .find(|m| m.get("tool_calls").is_some_and(Value::is_array));
    let user = message_text(&messages[last_user]);
    match call {
        Some(call) => format!("{} {user}", message_text(call)),
        None => user,
    }
}

/// The distinct words of `text` that carry a subject, in order (distinct
/// by stem), as written: a name keeps its capital, which ranks its turns
/// first ([`query::subject_first`]).
fn content_words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut stems: Vec<String> = Vec::new();
    for cased in query::cased_words(text) {
        let w = cased.to_lowercase();
        let digits = w.chars().any(|c| c.is_ascii_digit());
        let stem = crate::stem::stem(&w);
        if (digits || w.chars().count() >= 3) && !query::is_stopword(&w) && !stems.contains(&stem) {
            stems.push(stem);
            out.push(cased.to_string());
        }
    }
    out
}

/// Whether `text` holds enough of the query's content words (`stems`): at
/// least [`MIN_COVERAGE`] of them, or [`ENOUGH_WORDS`].
#[cfg(test)]
fn covers(text: &str, stems: &[String]) -> bool {
    enough(query::matched(text, stems), stems.len())
}

/// Whether `matched` of `of` query words are enough ([`covers`]).
fn enough(matched: usize, of: usize) -> bool {
    matched >= ENOUGH_WORDS || matched as f64 >= MIN_COVERAGE * of as f64
}

/// Which of `hits` to inject: a hit that covers the query ([`covers`]),
/// and two that cover it together, each holding a word the other lacks
/// (a question naming two things whose answers sit in two messages).
fn together(hits: &[Hit], stems: &[String]) -> Vec<bool> {
    let held: Vec<HashSet<&String>> = hits
        .iter()
        .map(|h| {
            let found: HashSet<String> = query::stems(&h.row.text).collect();
            stems.iter().filter(|w| found.contains(*w)).collect()
        })
        .collect();
    (0..hits.len())
        .map(|i| {
            enough(held[i].len(), stems.len())
                || (!held[i].is_empty()
                    && held.iter().enumerate().any(|(j, other)| {
                        j != i
                            && !other.is_subset(&held[i])
                            && !held[i].is_subset(other)
                            && enough(held[i].union(other).count(), stems.len())
                    }))
        })
        .collect()
}

/// The text of everything the view shows: kept messages, foldgate's own
/// (the summary), stubs.
fn view_text(messages: &[Value], items: &[Item]) -> String {
    let mut out = String::new();
    for item in items {
        let text = match item {
            Item::Original(i) => messages.get(*i).map(message_text).unwrap_or_default(),
            Item::New(v) | Item::Stub(_, v) => message_text(v),
        };
        out.push_str(&text);
        out.push('\n');
    }
    out
}

/// Whether what an archived message says about the query is in the view
/// already: every one of its sentences holding the query's best-matched
/// words is in the view's text (`seen`, [`normalized`]). A sentence counts,
/// not one of its identifiers: a ledger line holding a port number without
/// the sentence naming what it is the port of does not make it present.
fn in_view(text: &str, stems: &[String], seen: &str) -> bool {
    let sentences = query::sentences(text);
    let best = sentences
        .iter()
        .map(|s| query::matched(s, stems))
        .max()
        .unwrap_or(0);
    best > 0
        && sentences
            .iter()
            .filter(|s| query::matched(s, stems) == best)
            .all(|s| seen.contains(&normalized(s.trim_end_matches(['.', '?', '!']))))
}

/// `text` lowercase, each run of whitespace one space, so a sentence is
/// found whatever its line breaks.
fn normalized(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// The block: the heading, then each excerpt with its turn and role.
fn render(excerpts: &[Excerpt]) -> String {
    let mut out = HEADING.to_string();
    for e in excerpts {
        out.push_str(&format!(
            "\n\n[turn {}, {}]\n{}",
            e.position, e.role, e.text
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_query_is_the_last_user_message_and_the_last_calls_arguments() {
        let messages = vec![
            json!({"role": "user", "content": "old question"}),
            json!({"role": "user", "content": "What is the admin port?"}),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\": \"conf/admin.toml\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "c", "content": "x"}),
        ];
        let words = content_words(&query_text(&messages));
        assert!(words.contains(&"admin".to_string()) && words.contains(&"port".to_string()));
        assert!(words.contains(&"toml".to_string()), "{words:?}");
        assert!(!words.contains(&"what".to_string()) && !words.contains(&"old".to_string()));
        assert!(content_words("what is it?").is_empty());
    }

    #[test]
    fn names_keep_their_capitals_for_the_search() {
        let words = content_words("Which instrument does Theo have?");
        assert_eq!(words, ["instrument", "Theo"]);
        assert_eq!(query::name_stems(&words.join(" ")), ["theo"]);
    }

    #[test]
    fn a_hit_must_cover_enough_of_the_query() {
        let words = content_words("what is the favourite colour of the customer?");
        assert_eq!(words, ["favourite", "colour", "customer"]);
        let stems = query::query_stems(&Query::of_words(&words));
        assert!(covers(
            "the favourite colour of the customer is teal",
            &stems
        ));
        assert!(covers("favourite colour: teal", &stems));
        assert!(
            covers("Customers' favourite colours vary.", &stems),
            "by stem"
        );
        assert!(!covers("a new customer signed up", &stems));
    }

    #[test]
    fn client_tools_are_a_non_empty_tools_or_functions_array() {
        let fields = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert!(!client_tools(&fields(json!({"model": "m"}))));
        assert!(!client_tools(&fields(json!({"tools": []}))));
        assert!(client_tools(&fields(
            json!({"tools": [{"type": "function"}]})
        )));
        assert!(client_tools(&fields(
            json!({"functions": [{"name": "ls"}]})
        )));
    }

    #[test]
    fn a_sentence_is_present_only_whole() {
        let stems = query::query_stems(&Query::of_words(["metrics", "port"]));
        let said = "Sure. The metrics port is 9187.\nAnything else?";
        let ledger = normalized("Ledger:\n- 9187\n- metrics");
        assert!(
            !in_view(said, &stems, &ledger),
            "an identifier is not its sentence"
        );
        let shown = normalized("user: The metrics\n port is 9187. Thanks");
        assert!(in_view(said, &stems, &shown));
        assert!(
            !in_view("Nothing here.", &stems, &shown),
            "no matching sentence"
        );
    }
}
