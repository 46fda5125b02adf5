//! Paraphrase questions over long two-person conversations: does the
//! evidence reach the model when the question is worded differently from
//! it (synonyms, other word forms; the evidence sentence never repeats a
//! word of its question, speaker names aside)?
//!
//! Deterministic: [`CONVERSATIONS`] conversations of [`SESSIONS`] sessions
//! of [`EXCHANGES`] exchanges each between two people, small talk with
//! every fact of [`FACTS`] planted once at a pseudo-random turn, inside a
//! message of small talk. Each question is asked as the last user message
//! after the whole history, through foldgate (inline folds, a summarizer
//! that keeps nothing), and compared, in the same run, with trimming to
//! the newest messages that fit, plain BM25 (no stemming, no stop words)
//! over the whole history, and BM25 with foldgate's stemming and stop
//! words over the whole history (what a search of everything could find).

use super::common::llm::{Llm, Sum, content_text};
use super::common::{Foldgate, post_json, send};
use serde_json::{Value, json};

/// Conversations generated.
pub const CONVERSATIONS: usize = 4;
const SESSIONS: usize = 12;
const EXCHANGES: usize = 30;

/// A fact: what the speaker says (`{v}` a value of its own per
/// conversation) and the question about it (`{a}`: the speaker's name).
struct Fact {
    says: &'static str,
    asked: &'static str,
    values: [&'static str; CONVERSATIONS],
}

const fn fact(says: &'static str, asked: &'static str, values: [&'static str; 4]) -> Fact {
    Fact {
        says,
        asked,
        values,
    }
}

/// Facts and their questions: most questions share a stem with the
/// evidence in another word form (`bill` / `billing`), the others share no
/// word at all (only the speaker's name); [`Question::shares_stem`] tells.
const FACTS: &[Fact] = &[
    fact(
        "My sister just moved to {v} for work.",
        "Which city is {a}'s sibling living in now?",
        ["Porto", "Oslo", "Lyon", "Tartu"],
    ),
    fact(
        "I started running every morning before breakfast, about {v}.",
        "How far does {a} run daily?",
        ["5 km", "3 miles", "8 km", "4 km"],
    ),
    fact(
        "We adopted a rescue puppy and named her {v}.",
        "What name does the dog {a} adopts have?",
        ["Pepper", "Juno", "Miso", "Olive"],
    ),
    fact(
        "My favourite band is {v}, I have seen them live four times.",
        "Which musical group does {a} like best?",
        ["Radiohead", "Khruangbin", "Portishead", "Wilco"],
    ),
    fact(
        "I finally finished painting the kitchen walls {v}.",
        "What shade did {a} choose for painted kitchens?",
        ["pale green", "terracotta", "navy blue", "warm white"],
    ),
    fact(
        "I am learning to play the {v} on weekends.",
        "What instrument does {a} learn?",
        ["cello", "ukulele", "banjo", "harp"],
    ),
    fact(
        "Our team is migrating the billing service to {v} next quarter.",
        "Which platform will {a}'s bill system migration target?",
        ["Postgres", "Kafka", "Rust", "Kubernetes"],
    ),
    fact(
        "I booked flights to {v} for our anniversary in June.",
        "Which destination is {a} flying toward, celebrating their wedding?",
        ["Kyoto", "Lima", "Hanoi", "Tunis"],
    ),
    fact(
        "The doctor said my knee injury needs {v} of rest.",
        "How long must {a} recover with those knees?",
        ["six weeks", "two months", "ten days", "a month"],
    ),
    fact(
        "My grandmother turns {v} next month.",
        "How old will {a}'s grandma be?",
        ["90", "85", "100", "95"],
    ),
    fact(
        "I switched jobs and now work as a {v}.",
        "What is {a}'s occupation after switching?",
        ["nurse", "pilot", "librarian", "welder"],
    ),
    fact(
        "We are renovating the bathroom, the tiles arrive on {v}.",
        "What day does {a} expect tile delivery during renovations?",
        ["Friday", "Monday", "Thursday", "Tuesday"],
    ),
    fact(
        "I signed up for a {v} class at the community centre.",
        "What kind of classes is {a} taking?",
        ["pottery", "salsa", "woodwork", "life drawing"],
    ),
    fact(
        "My brother {v} is getting married in September.",
        "Whose wedding will {a} attend this autumn?",
        ["Daniel", "Tomas", "Karim", "Felix"],
    ),
    fact(
        "I have been reading a novel by {v} on the train.",
        "Which author's novels does {a} read aboard trains?",
        ["Ishiguro", "Le Guin", "Ferrante", "Murakami"],
    ),
    fact(
        "Our landlord raised the rent by {v} percent.",
        "How much did {a}'s rental price increase?",
        ["8", "12", "5", "10"],
    ),
    fact(
        "I planted {v} and basil in the garden this spring.",
        "What vegetables grow inside {a}'s gardens?",
        ["tomatoes", "peppers", "courgettes", "beans"],
    ),
    fact(
        "My daughter scored the winning goal in her {v} match.",
        "Which goals did {a}'s child score?",
        ["football", "hockey", "handball", "water polo"],
    ),
    fact(
        "We celebrated our tenth anniversary with a trip to {v}.",
        "Where did {a} travel for the anniversaries?",
        ["Venice", "Seville", "Bruges", "Porto"],
    ),
    fact(
        "I quit {v} three weeks ago and feel much better.",
        "What has {a} been quitting lately?",
        ["sugar", "coffee", "smoking", "alcohol"],
    ),
    fact(
        "The car broke down on the motorway and needed a new {v}.",
        "What part of {a}'s vehicle was replaced?",
        ["gearbox", "clutch", "radiator", "alternator"],
    ),
    fact(
        "I volunteer at the {v} every Saturday.",
        "Where does {a} do volunteering?",
        ["animal shelter", "food bank", "library", "hospice"],
    ),
    fact(
        "Our flat is on the {v} floor and the lift is broken again.",
        "Which storey does {a}'s apartment occupy?",
        ["fifth", "ninth", "third", "seventh"],
    ),
    fact(
        "I am saving money to buy a {v}.",
        "What does {a} save for?",
        ["sailboat", "motorbike", "camper van", "piano"],
    ),
];

/// Small talk: `{a}` the speaker, `{b}` the other.
const CHATTER: &[&str] = &[
    "How was your week, {b}?",
    "Pretty busy, lots of meetings at work.",
    "Did you watch the game last night?",
    "The weather has been lovely, we went for a walk by the river.",
    "I made pasta again, nothing special.",
    "Work has been quiet, which is nice for a change.",
    "My phone battery keeps dying, I need a new one.",
    "We should get coffee sometime soon.",
    "I read an article about city gardens, it was interesting.",
    "The train was late again this morning.",
    "Have you seen the new season of that show?",
    "I slept badly, the neighbours had a party.",
    "My kid loves anything with dinosaurs right now.",
    "The class I wanted to take was full.",
    "I think it is going to rain all weekend.",
    "We cleaned the whole house on Sunday.",
    "That sounds great, {b}!",
    "Haha, same here.",
    "I am so tired of emails.",
    "Let me know how it goes, {b}.",
    "My parents are visiting for a few days.",
    "I tried a new bakery near the station.",
    "The traffic downtown is getting worse.",
    "We watched an old movie and ordered pizza.",
    "I need to renew my passport before summer.",
    "Honestly I just want a long holiday.",
    "The team lunch was fun today.",
    "I bought new running shoes but have not used them.",
    "Our internet was down for two hours.",
    "I keep forgetting to water the plants.",
    "Did you hear about the new cafe opening?",
    "I finally cleared my inbox.",
    "My cousin sent photos from her trip.",
    "We are thinking about getting a bigger car one day.",
    "It was too hot to do anything yesterday.",
    "I started a puzzle with a thousand pieces.",
];

/// Speakers of each conversation.
const PEOPLE: [(&str, &str); CONVERSATIONS] = [
    ("Maya", "Theo"),
    ("Ines", "Rafael"),
    ("Jonah", "Priya"),
    ("Clara", "Sam"),
];

/// A small deterministic generator (a 64-bit LCG).
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % n
    }
}

/// One generated conversation: its messages (no system message), and per
/// question its text, the index of its evidence message and the evidence
/// sentence.
pub struct Conversation {
    pub messages: Vec<Value>,
    pub questions: Vec<Question>,
}

pub struct Question {
    pub text: String,
    pub evidence: usize,
    pub sentence: String,
    /// Whether the question shares a stemmed word with its evidence.
    pub shares_stem: bool,
}

/// The words of `text`, lowercase, as the plain baseline splits them.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Conversation `c`, the same on every run.
pub fn conversation(c: usize) -> Conversation {
    let (a, b) = PEOPLE[c];
    let mut rng = Rng(0x5eed + c as u64);
    let turns = SESSIONS * EXCHANGES;
    // A distinct turn for each fact, not in the last session.
    let mut at: Vec<usize> = Vec::new();
    while at.len() < FACTS.len() {
        let t = rng.next(turns - EXCHANGES);
        if !at.contains(&t) {
            at.push(t);
        }
    }
    let mut messages = Vec::new();
    let mut questions = Vec::new();
    for t in 0..turns {
        for (speaker, other, role) in [(a, b, "user"), (b, a, "assistant")] {
            let mut text = format!("{speaker}: ");
            if t % EXCHANGES == 0 && role == "user" {
                text.push_str(&format!("(session {}) ", t / EXCHANGES + 1));
            }
            text.push_str(&CHATTER[rng.next(CHATTER.len())].replace("{b}", other));
            let planted = at.iter().position(|&x| x == t).filter(|_| role == "user");
            if let Some(f) = planted {
                let fact = &FACTS[f];
                let sentence = fact.says.replace("{v}", fact.values[c]);
                let question = fact.asked.replace("{a}", a);
                let said: Vec<String> = words(&sentence);
                let names = [a.to_lowercase(), b.to_lowercase(), "s".to_string()];
                let asked = words(&question);
                for w in &asked {
                    assert!(
                        names.contains(w) || !said.contains(w),
                        "question {question:?} repeats {w:?} of {sentence:?}"
                    );
                }
                let stem = foldgate::stem::stem;
                let stems: Vec<String> = said.iter().map(|w| stem(w)).collect();
                let shares_stem = asked.iter().any(|w| {
                    !names.contains(w)
                        && !foldgate::archive::query::is_stopword(w)
                        && stems.contains(&stem(w))
                });
                text.push(' ');
                text.push_str(&sentence);
                questions.push(Question {
                    text: question,
                    evidence: messages.len(),
                    sentence,
                    shares_stem,
                });
            }
            messages.push(json!({"role": role, "content": text}));
        }
    }
    Conversation {
        messages,
        questions,
    }
}

/// BM25 (k1 1.2, b 0.75) over `docs` for `query`'s words: indexes of the
/// best `k`, best first. Plain: every word as it is, no stemming, no stop
/// words; `stemmed`: stop words dropped and words compared by foldgate's
/// stem, the same rule the archive search runs (but over every message,
/// without its cut of common words).
pub fn bm25(docs: &[String], query: &str, k: usize, stemmed: bool) -> Vec<usize> {
    let shape = |text: &str| -> Vec<String> {
        let w = words(text);
        if !stemmed {
            return w;
        }
        w.into_iter()
            .filter(|w| !foldgate::archive::query::is_stopword(w))
            .map(|w| foldgate::stem::stem(&w))
            .collect()
    };
    let docs: Vec<Vec<String>> = docs.iter().map(|d| shape(d)).collect();
    let n = docs.len() as f64;
    let avg = docs.iter().map(Vec::len).sum::<usize>() as f64 / n.max(1.0);
    let mut q = shape(query);
    q.sort();
    q.dedup();
    let idf: Vec<f64> = q
        .iter()
        .map(|w| {
            let df = docs.iter().filter(|d| d.contains(w)).count() as f64;
            ((n - df + 0.5) / (df + 0.5) + 1.0).ln()
        })
        .collect();
    let mut scored: Vec<(usize, f64)> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let norm = 1.2 * (1.0 - 0.75 + 0.75 * d.len() as f64 / avg);
            let s = q
                .iter()
                .zip(&idf)
                .map(|(w, idf)| {
                    let f = d.iter().filter(|x| *x == w).count() as f64;
                    idf * f * 2.2 / (f + norm)
                })
                .sum::<f64>();
            (i, s)
        })
        .filter(|&(_, s)| s > 0.0)
        .collect();
    scored.sort_by(|x, y| y.1.total_cmp(&x.1).then(y.0.cmp(&x.0)));
    scored.into_iter().take(k).map(|(i, _)| i).collect()
}

/// Counts over the questions of one window and recall mode.
#[derive(Default)]
pub struct Tally {
    pub questions: usize,
    pub trimmed: usize,
    pub bm25: [usize; 3],
    pub stemmed: [usize; 3],
    pub in_view: usize,
    /// In the view's messages other than the injected block.
    pub verbatim: usize,
    pub recall: [usize; 3],
    pub reachable: [usize; 3],
    pub stem_questions: usize,
    pub stem_reachable: usize,
    pub injected_tokens: u64,
}

/// The top-k cut-offs reported: 3, 10, and every hit the recall looks at.
pub const KS: [usize; 3] = [3, 10, foldgate::archive::query::RECALL_HITS];

/// Whitespace runs as one space, lowercase.
fn normalized(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Runs every question of every conversation at `window` with `archive`
/// (an `[archive]` section's keys) and `policy` (`[policy]` keys: the
/// shipped default, background folding, when empty).
pub async fn run(window: u32, archive: &str, policy: &str) -> Tally {
    let llm = Llm::start().await;
    llm.answer_always(Sum::Lossy);
    let fg = Foldgate::start(&format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n[models.\"bench-*\"]\ncontext_window = {window}\n\
         [policy]\n{policy}[archive]\n{archive}",
        llm.url()
    ))
    .await;
    let url = format!("{}/v1/chat/completions", fg.url);
    let counter = foldgate::tokens::TokenCounter::new(&foldgate::config::Config::default());
    let mut tally = Tally::default();
    let system = json!({"role": "system", "content": "You are a friendly assistant in a chat between two friends."});
    for c in 0..CONVERSATIONS {
        let convo = conversation(c);
        let id = format!("paraphrase-{c}");
        let texts: Vec<String> = convo.messages.iter().map(content_text).collect();
        for q in &convo.questions {
            tally.questions += 1;
            tally.stem_questions += usize::from(q.shares_stem);
            let asked = json!({"role": "user", "content": q.text});
            let mut messages = vec![system.clone()];
            messages.extend(convo.messages.iter().cloned());
            messages.push(asked.clone());
            // Trimming: the newest messages that fit beside the system
            // message, the question and the output reserve.
            let mut room = i64::from(window)
                - 200
                - i64::from(counter.message_tokens("bench-model", &system))
                - i64::from(counter.message_tokens("bench-model", &asked));
            let mut kept_from = convo.messages.len();
            while kept_from > 0 {
                room -= i64::from(
                    counter.message_tokens("bench-model", &convo.messages[kept_from - 1]),
                );
                if room < 0 {
                    break;
                }
                kept_from -= 1;
            }
            tally.trimmed += usize::from(q.evidence >= kept_from);
            let top = bm25(&texts, &q.text, KS[2], false);
            let stemmed = bm25(&texts, &q.text, KS[2], true);
            for (n, k) in KS.iter().enumerate() {
                tally.bm25[n] += usize::from(top.iter().take(*k).any(|&i| i == q.evidence));
                tally.stemmed[n] += usize::from(stemmed.iter().take(*k).any(|&i| i == q.evidence));
            }
            let body = json!({"model": "bench-model", "messages": messages, "max_tokens": 200});
            post_json(&url, &[("x-conversation-id", id.as_str())], &body)
                .await
                .assert_ok();
            let view = llm.chat_requests().pop().unwrap_or_default();
            let texts_shown: Vec<String> = view["messages"]
                .as_array()
                .map(|m| m.iter().map(content_text).collect())
                .unwrap_or_default();
            let seen = normalized(&texts_shown.join("\n"));
            let injected = texts_shown
                .iter()
                .find(|t| t.starts_with("[foldgate] Recalled"));
            let verbatim = normalized(
                &texts_shown
                    .iter()
                    .filter(|t| !t.starts_with("[foldgate] Recalled"))
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("\n"),
            );
            tally.verbatim += usize::from(verbatim.contains(&normalized(&q.sentence)));
            if let Some(block) = injected {
                tally.injected_tokens += u64::from(
                    counter
                        .message_tokens("bench-model", &json!({"role": "user", "content": block})),
                );
            }
            let shown = seen.contains(&normalized(&q.sentence));
            tally.in_view += usize::from(shown);
            let hits = recall_hits(&fg, &id, &q.text).await;
            let at = hits.iter().position(|h| h.contains(&q.sentence));
            for (n, k) in KS.iter().enumerate() {
                let found = at.is_some_and(|p| p < *k);
                tally.recall[n] += usize::from(found);
                tally.reachable[n] += usize::from(shown || found);
            }
            tally.stem_reachable += usize::from(q.shares_stem && (shown || at.is_some()));
            if std::env::var_os("FIDELITY_DUMP").is_some() && !shown {
                println!(
                    "not in view ({window}, {archive:?}): {:?} recall rank {at:?}, evidence {:?}, injected {:?}",
                    q.text,
                    q.sentence,
                    injected.map(|b| b.len())
                );
            }
        }
    }
    tally
}

/// The texts of the archive search's hits for `query` (what the recall
/// tool looks at), best first.
async fn recall_hits(fg: &Foldgate, id: &str, query: &str) -> Vec<String> {
    let q: String = form_urlencoded::byte_serialize(query.as_bytes()).collect();
    let url = format!(
        "{}/foldgate/conversations/{id}/archive?q={q}&limit={}",
        fg.url, KS[2]
    );
    let reply = send(http::Method::GET, &url, &[], "").await;
    if reply.status != 200 {
        return Vec::new();
    }
    reply.json()["results"][0]["hits"]
        .as_array()
        .map(|hits| hits.iter().map(|h| content_text(&h["message"])).collect())
        .unwrap_or_default()
}
