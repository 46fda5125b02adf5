//! What an archive search asks for, one definition for every backend: the
//! query's words (as SQLite's FTS5 `unicode61` tokenizer splits them), its
//! shaping (stop words dropped, words compared by their
//! [`stem`](crate::stem), the rule of FTS5's `porter` tokenizer), the FTS5
//! expression SQLite runs, the BM25 scoring the scanning backends (Redis,
//! memory) run, which words are too common to search by, and the excerpts
//! a recall hands the model.

use super::{Excerpt, Found, Hit, Row};
use crate::stem::stem;
use std::collections::{HashMap, HashSet};

/// Hits a recall looks at before cutting excerpts: as many distinct
/// messages as the room may take, best first.
pub const RECALL_HITS: usize = 16;
/// Rows a conversation's archive must hold before a word in more than a
/// third of them counts as too common to search by.
const COMMON_FROM: usize = 4;
/// Words a retry searches by, the rarest first.
pub const RETRY_WORDS: usize = 3;

/// Words that carry no subject: a query drops them (a query of them alone
/// is searched as it is).
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at",
    "be", "been", "before", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had",
    "has", "have", "he", "her", "him", "his", "how", "i", "if", "in", "is", "it", "its", "me",
    "my", "no", "not", "now", "of", "on", "or", "our", "please", "remind", "said", "say", "she",
    "so", "tell", "that", "the", "their", "them", "then", "there", "they", "this", "to", "us",
    "was", "we", "were", "what", "whats", "when", "where", "which", "who", "whom", "why", "will",
    "with", "would", "you", "your",
];

/// Whether `word` (lowercase) carries no subject: a stop word, or one
/// letter.
pub fn is_stopword(word: &str) -> bool {
    STOPWORDS.contains(&word)
        || (word.chars().count() < 2 && !word.chars().all(|c| c.is_ascii_digit()))
}

/// The stems of `text`'s words, as the index compares them.
pub fn stems(text: &str) -> impl Iterator<Item = String> + '_ {
    words(text).map(|w| stem(&w))
}
/// Words of a query used at most (the rest are ignored).
const MAX_WORDS: usize = 32;
/// Bytes per token, for excerpt budgets (a rough estimate on purpose: the
/// archive holds text, not a model's tokenizer).
const BYTES_PER_TOKEN: usize = 4;
/// BM25 parameters (the usual ones, as FTS5 uses).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// A parsed query: its whitespace-separated pieces, each as its words.
/// `src/lib.rs` is one piece of three words, matched as a phrase by SQLite.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Query {
    pieces: Vec<Vec<String>>,
}

/// The lowercase words of `text`: runs of letters and digits.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    cased_words(text).map(str::to_lowercase)
}

/// The words of `text` as written: runs of letters and digits.
pub fn cased_words(text: &str) -> impl Iterator<Item = &str> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
}

/// The stems of the words `text` writes capitalized: the names a question
/// asks about ("What does Maya do …" names `maya`). A question's first
/// word is most often a stop word, which no search keeps anyway.
pub fn name_stems(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in cased_words(text).filter(|w| w.chars().next().is_some_and(char::is_uppercase)) {
        let s = stem(&w.to_lowercase());
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

impl Query {
    /// Parses a user's query; punctuation only separates words, so no
    /// input can inject FTS5 syntax.
    pub fn parse(text: &str) -> Self {
        let mut budget = MAX_WORDS;
        let pieces = text
            .split_whitespace()
            .map(|piece| {
                let piece: Vec<String> = words(piece).take(budget).collect();
                budget -= piece.len();
                piece
            })
            .filter(|p| !p.is_empty())
            .collect();
        Self { pieces }
    }

    /// A question shaped for searching: [`Query::parse`] without stop
    /// words; a query of stop words only is kept as it is.
    pub fn shape(text: &str) -> Self {
        let parsed = Self::parse(text);
        let pieces: Vec<Vec<String>> = parsed
            .pieces
            .iter()
            .map(|p| p.iter().filter(|w| !is_stopword(w)).cloned().collect())
            .filter(|p: &Vec<String>| !p.is_empty())
            .collect();
        if pieces.is_empty() {
            parsed
        } else {
            Self { pieces }
        }
    }

    /// A query of these words, each a piece of its own.
    pub fn of_words<S: AsRef<str>>(words: impl IntoIterator<Item = S>) -> Self {
        Self {
            pieces: words
                .into_iter()
                .map(|w| vec![w.as_ref().to_string()])
                .collect(),
        }
    }

    /// The query without the pieces `drop` says are too common (see
    /// [`common`]).
    pub fn without(&self, drop: &[bool]) -> Self {
        Self {
            pieces: self
                .pieces
                .iter()
                .zip(drop.iter().chain(std::iter::repeat(&false)))
                .filter(|(_, d)| !**d)
                .map(|(p, _)| p.clone())
                .collect(),
        }
    }

    /// The query's pieces, each as its words.
    pub fn pieces(&self) -> &[Vec<String>] {
        &self.pieces
    }

    /// Whether a piece has more than one word (a phrase, which may find
    /// nothing where its words would).
    pub fn has_phrase(&self) -> bool {
        self.pieces.iter().any(|p| p.len() > 1)
    }

    /// Whether the query has no word (a listing, not a search).
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Every distinct word of the query.
    pub fn words(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for w in self.pieces.iter().flatten() {
            if !out.contains(&w.as_str()) {
                out.push(w);
            }
        }
        out
    }

    /// The FTS5 expression: any piece, as a phrase, in column `column`
    /// (`text : "src lib rs" OR text : "port"`); BM25 ranks rows with more
    /// and rarer matches first. `None` for an empty query.
    pub fn fts(&self, column: &str) -> Option<String> {
        let phrases: Vec<String> = self
            .pieces
            .iter()
            .map(|p| format!("{column} : \"{}\"", p.join(" ")))
            .collect();
        (!phrases.is_empty()).then(|| phrases.join(" OR "))
    }
}

/// Which of `counts` (rows holding each piece of a query, of `rows` in the
/// archive) are too common to search by: in more than a third of the rows
/// (each speaker's name in a two-person talk is in about half),
/// when the archive holds at least [`COMMON_FROM`] and a rarer piece that
/// some row holds is left to search by (speaker names, role words).
pub fn common(counts: &[usize], rows: usize) -> Vec<bool> {
    let is_common = |c: usize| rows >= COMMON_FROM && c * 3 > rows;
    let rarer = counts.iter().any(|&c| c > 0 && !is_common(c));
    counts.iter().map(|&c| rarer && is_common(c)).collect()
}

/// Hits of one message merged: the best of each position (a message
/// archived twice under one position, e.g. changed by the client) and of
/// each text (the same words said twice) is kept, best first.
pub fn merge(hits: Vec<Hit>) -> Vec<Hit> {
    let mut positions = HashSet::new();
    let mut texts = HashSet::new();
    hits.into_iter()
        .filter(|h| positions.insert(h.row.position) & texts.insert(h.row.text.clone()))
        .collect()
}

/// Hits reordered so that the first ones hold the query's words together
/// (a question naming two things whose answers sit in two messages gets
/// both up front): the best hit, then, while a searched word (`wanted`,
/// stems) is in no hit placed so far, the best remaining hit holding one,
/// then the rest, best first. A query of one word keeps its order.
pub fn together(hits: Vec<Hit>, wanted: &[String]) -> Vec<Hit> {
    if wanted.len() < 2 || hits.len() < 2 {
        return hits;
    }
    let holds: Vec<HashSet<String>> = hits
        .iter()
        .map(|h| {
            let found: HashSet<String> = stems(&h.row.text).collect();
            wanted
                .iter()
                .filter(|w| found.contains(*w))
                .cloned()
                .collect()
        })
        .collect();
    let mut covered: HashSet<String> = HashSet::new();
    let mut order: Vec<usize> = Vec::with_capacity(hits.len());
    let mut placed = vec![false; hits.len()];
    while let Some(next) = (0..hits.len()).find(|&i| {
        !placed[i] && (order.is_empty() || holds[i].iter().any(|w| !covered.contains(w)))
    }) {
        placed[next] = true;
        order.push(next);
        covered.extend(holds[next].iter().cloned());
    }
    order.extend((0..hits.len()).filter(|&i| !placed[i]));
    let mut slots: Vec<Option<Hit>> = hits.into_iter().map(Some).collect();
    order
        .into_iter()
        .filter_map(|i| slots.get_mut(i).and_then(Option::take))
        .collect()
}

/// Hits reordered so that those holding more of `names` (stems of the
/// names a question asks about that were too common to search by: in a
/// talk between two people, the one the question is about, whose every
/// turn holds their name) come first, each group in its order. Such a
/// name finds nothing useful alone, but among the hits of the rarer words
/// it tells the turns of the question's subject from the same words said
/// by someone else (docs/folding.md, *Search*).
pub fn subject_first(hits: Vec<Hit>, names: &[String]) -> Vec<Hit> {
    if names.is_empty() || hits.len() < 2 {
        return hits;
    }
    let mut keyed: Vec<(usize, Hit)> = hits
        .into_iter()
        .map(|h| (matched(&h.row.text, names), h))
        .collect();
    // Stable: equal counts keep the search's order.
    keyed.sort_by_key(|k| std::cmp::Reverse(k.0));
    keyed.into_iter().map(|(_, h)| h).collect()
}

/// Ranks `rows` (oldest archived first) against `query` with BM25 over the
/// stems of the query's words, those in more than a third of the rows
/// left out when rarer ones are left ([`common`]): the best `limit`, best
/// first, the newer of equal scores first; rows matching no word are left
/// out. An empty query lists the last `limit` rows, newest first. The
/// query searched by leaves out the common words and those no row holds.
pub fn rank(rows: &[Row], query: &Query, limit: usize) -> Found {
    if query.is_empty() {
        let hits = rows
            .iter()
            .rev()
            .take(limit)
            .map(|row| Hit {
                row: row.clone(),
                score: 0.0,
            })
            .collect();
        return Found {
            hits,
            searched: Query::default(),
        };
    }
    let (wanted, said) = distinct_stems(query);
    let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
    let stats = term_stats(rows, &wanted);
    let n = rows.len() as f64;
    let avg = (stats.iter().map(|(_, len)| *len).sum::<usize>() as f64 / n.max(1.0)).max(1.0);
    let counts: Vec<usize> = wanted
        .iter()
        .map(|w| stats.iter().filter(|(tf, _)| tf.contains_key(w)).count())
        .collect();
    let dropped = common(&counts, rows.len());
    let idf: HashMap<&str, f64> = wanted
        .iter()
        .zip(counts.iter().zip(&dropped))
        .filter(|(_, (_, drop))| !**drop)
        .map(|(&w, (&df, _))| {
            let df = df as f64;
            (w, ((n - df + 0.5) / (df + 0.5) + 1.0).ln())
        })
        .collect();
    // Scores first; only the rows that make the cut are cloned.
    let mut scored: Vec<(usize, f64)> = stats
        .iter()
        .enumerate()
        .filter_map(|(order, (tf, len))| {
            let norm = K1 * (1.0 - B + B * *len as f64 / avg);
            let score: f64 = tf
                .iter()
                .map(|(w, &f)| {
                    let f = f64::from(f);
                    idf.get(w).copied().unwrap_or(0.0) * f * (K1 + 1.0) / (f + norm)
                })
                .sum();
            (score > 0.0).then_some((order, score))
        })
        .collect();
    scored.sort_by(|(ao, a), (bo, b)| b.total_cmp(a).then(bo.cmp(ao)));
    let hits = scored
        .into_iter()
        .take(limit)
        .filter_map(|(order, score)| {
            rows.get(order).map(|row| Hit {
                row: row.clone(),
                score,
            })
        })
        .collect();
    let searched: Vec<&str> = said
        .iter()
        .zip(counts.iter().zip(&dropped))
        .filter(|(_, (n, drop))| **n > 0 && !**drop)
        .map(|(w, _)| *w)
        .collect();
    Found {
        hits,
        searched: Query::of_words(searched),
    }
}

/// The query's distinct stems, each with the first word that gave it.
fn distinct_stems(query: &Query) -> (Vec<String>, Vec<&str>) {
    let mut wanted: Vec<String> = Vec::new();
    let mut said: Vec<&str> = Vec::new();
    for w in query.words() {
        let s = stem(w);
        if !wanted.contains(&s) {
            wanted.push(s);
            said.push(w);
        }
    }
    (wanted, said)
}

/// Each row's term frequencies of the `wanted` stems, and its length in
/// words.
fn term_stats<'w>(rows: &[Row], wanted: &[&'w str]) -> Vec<(HashMap<&'w str, u32>, usize)> {
    rows.iter()
        .map(|row| {
            let mut tf = HashMap::new();
            let mut len = 0;
            for w in stems(&row.text) {
                len += 1;
                if let Some(&hit) = wanted.iter().find(|&&q| q == w) {
                    *tf.entry(hit).or_insert(0) += 1;
                }
            }
            (tf, len)
        })
        .collect()
}

/// Passages of `hits`, best first, within about `token_budget` tokens in
/// all: each at most a third of the budget, centred on the first word of
/// the query it contains.
pub fn excerpts(hits: &[Hit], query: &Query, token_budget: u32) -> Vec<Excerpt> {
    let total = usize::try_from(token_budget)
        .unwrap_or(usize::MAX)
        .saturating_mul(BYTES_PER_TOKEN);
    let each = (total / 3).max(64);
    let mut left = total;
    let mut out = Vec::new();
    for hit in hits {
        let room = each.min(left);
        if room < 32 {
            break;
        }
        let text = passage(&hit.row.text, query, room);
        left = left.saturating_sub(text.len());
        out.push(Excerpt {
            position: hit.row.position,
            role: hit.row.role.clone(),
            text,
        });
    }
    out
}

/// The sentences of `text`: its lines, each cut after a `.`, `?` or `!`
/// that a space follows; trimmed, empty ones left out.
pub fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut start = 0;
        let bytes = line.as_bytes();
        for i in 0..bytes.len() {
            let end = matches!(bytes[i], b'.' | b'?' | b'!')
                && bytes.get(i + 1).is_some_and(u8::is_ascii_whitespace);
            if end {
                out.push(line[start..=i].trim());
                start = i + 1;
            }
        }
        out.push(line[start..].trim());
    }
    out.retain(|s| !s.is_empty());
    out
}

/// How many of `wanted` (stems) `text` holds.
pub fn matched(text: &str, wanted: &[String]) -> usize {
    let found: HashSet<String> = stems(text).collect();
    wanted.iter().filter(|w| found.contains(*w)).count()
}

/// The distinct stems of the query's words.
pub fn query_stems(query: &Query) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in query.words() {
        let s = stem(w);
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// Shortened passages of `hits` for a window with little room, and the
/// sentences injected recall shows: best hit first, each cut to its
/// sentences matching the most query words (by stem; those first, each
/// at most the room left), within about `token_budget` tokens in all. The
/// best hit takes what it needs before the next; as many hits as fit.
pub fn matching_lines(hits: &[Hit], query: &Query, token_budget: u32) -> Vec<Excerpt> {
    let mut left = usize::try_from(token_budget)
        .unwrap_or(usize::MAX)
        .saturating_mul(BYTES_PER_TOKEN);
    let wanted = query_stems(query);
    let mut out = Vec::new();
    for hit in hits {
        if left < 32 {
            break;
        }
        let lines = sentences(&hit.row.text);
        // Sentences by how many query words they hold, most first, earlier first.
        let mut ranked: Vec<(usize, usize)> = lines
            .iter()
            .enumerate()
            .map(|(i, l)| (i, matched(l, &wanted)))
            .filter(|&(_, n)| n > 0)
            .collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut chosen: Vec<String> = Vec::new();
        for (i, _) in ranked {
            if left < 32 {
                break;
            }
            let Some(line) = lines.get(i) else { continue };
            let piece = passage(line, query, left);
            left = left.saturating_sub(piece.len() + 1);
            chosen.push(piece);
        }
        if chosen.is_empty() {
            continue;
        }
        out.push(Excerpt {
            position: hit.row.position,
            role: hit.row.role.clone(),
            text: chosen.join("\n"),
        });
    }
    out
}

/// At most `room` bytes of `text` around the first query word it contains
/// (a third before it), with `…` where cut.
fn passage(text: &str, query: &Query, room: usize) -> String {
    if text.len() <= room {
        return text.to_string();
    }
    let lower = text.to_lowercase();
    // Lowercasing can change byte lengths; then offsets do not carry over.
    let at = if lower.len() == text.len() {
        query_stems(query)
            .iter()
            .filter_map(|w| lower.find(w.as_str()))
            .min()
            .unwrap_or(0)
    } else {
        0
    };
    let mut start = at.saturating_sub(room / 3);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (start + room).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end - start + 8);
    if start > 0 {
        out.push('…');
    }
    out.push_str(&text[start..end]);
    if end < text.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(position: usize, text: &str) -> Row {
        Row {
            position,
            role: "user".into(),
            tool_call_id: None,
            fold: "f".into(),
            api: "chat".into(),
            archived_at: 0,
            digest: format!("{position}"),
            text: text.into(),
            message: "{}".into(),
        }
    }

    #[test]
    fn queries_cannot_inject_fts_syntax() {
        let q = Query::parse("src/lib.rs \"OR\" NEAR(x) port:5433 *");
        assert_eq!(
            q.fts("text").as_deref(),
            Some(
                "text : \"src lib rs\" OR text : \"or\" OR text : \"near x\" OR text : \"port 5433\""
            )
        );
        assert_eq!(Query::parse(" ,; ").fts("text"), None);
        assert_eq!(Query::parse(&"w ".repeat(100)).words(), ["w"]);
    }

    #[test]
    fn common_words_are_left_out_only_while_a_rarer_one_finds() {
        // A name in half of 10 rows, a word in 1, a word in none.
        assert_eq!(common(&[5, 1, 0], 10), [true, false, false]);
        assert_eq!(common(&[5, 0], 10), [false, false], "nothing rarer finds");
        assert_eq!(common(&[2, 1], 3), [false, false], "too few rows to tell");
        assert_eq!(common(&[3, 1], 10), [false, false], "a third is not common");
    }

    #[test]
    fn shaping_drops_stop_words_and_ranking_compares_stems() {
        let q = Query::shape("What did Maya say about the gardens?");
        assert_eq!(q.words(), ["maya", "gardens"]);
        assert_eq!(Query::shape("what is it").words(), ["what", "is", "it"]);
        let rows = vec![
            row(1, "Maya: my garden has tomatoes"),
            row(2, "Maya: hello"),
            row(3, "Theo: hi Maya"),
            row(4, "Theo: the weather"),
            row(5, "Maya: nice"),
        ];
        let hits = rank(&rows, &q, 10).hits;
        let order: Vec<usize> = hits.iter().map(|h| h.row.position).collect();
        assert_eq!(order, [1], "the name in most rows finds nothing alone");
    }

    #[test]
    fn the_named_subjects_hits_come_first() {
        assert_eq!(
            name_stems("Which instruments does Theo play? Ask O'Neil"),
            ["which", "theo", "ask", "o", "neil"]
        );
        let hit = |p: usize, text: &str| Hit {
            row: row(p, text),
            score: 1.0,
        };
        let hits = vec![
            hit(1, "Maya: instrument strings, instrument lessons"),
            hit(2, "Theo: my first instrument"),
            hit(3, "Maya: an instrument, Theo"),
            hit(4, "Maya: instrument"),
        ];
        let order = |hits: Vec<Hit>| hits.iter().map(|h| h.row.position).collect::<Vec<_>>();
        assert_eq!(
            order(subject_first(hits.clone(), &["theo".into()])),
            [2, 3, 1, 4],
            "the hits holding the name first, each group in its order"
        );
        assert_eq!(
            order(subject_first(hits.clone(), &["theo".into(), "maya".into()])),
            [3, 1, 2, 4],
            "more of the names first"
        );
        assert_eq!(order(subject_first(hits, &[])), [1, 2, 3, 4]);
    }

    #[test]
    fn hits_of_one_message_merge() {
        let hit = |p: usize, text: &str, score: f64| Hit {
            row: row(p, text),
            score,
        };
        let merged = merge(vec![
            hit(1, "a", 3.0),
            hit(1, "a, edited", 2.0),
            hit(2, "a", 1.5),
            hit(3, "b", 1.0),
        ]);
        let order: Vec<usize> = merged.iter().map(|h| h.row.position).collect();
        assert_eq!(order, [1, 3]);
        assert_eq!(merged[0].score, 3.0);
    }

    #[test]
    fn sentences_split_lines_and_stops() {
        assert_eq!(
            sentences("Sure. The port is 9187.\nv1.2.3 ships? Yes!"),
            ["Sure.", "The port is 9187.", "v1.2.3 ships?", "Yes!"]
        );
    }

    #[test]
    fn rank_prefers_rarer_and_more_matches_and_lists_newest_first() {
        let rows = vec![
            row(1, "the database listens on port 5433"),
            row(2, "the the the the"),
            row(3, "we talked about the weather"),
            row(4, "port forwarding is off"),
            // Rows without `port`, so it is in too few to be left out.
            row(5, "lunch was good"),
            row(6, "nothing to add"),
            row(7, "see you"),
        ];
        let hits = rank(&rows, &Query::parse("database port"), 10).hits;
        let order: Vec<usize> = hits.iter().map(|h| h.row.position).collect();
        assert_eq!(order, [1, 4]);
        assert!(hits[0].score > hits[1].score);
        let listed = rank(&rows, &Query::default(), 2).hits;
        assert_eq!(
            listed.iter().map(|h| h.row.position).collect::<Vec<_>>(),
            [7, 6]
        );
    }

    #[test]
    fn excerpts_stay_within_the_budget_and_centre_on_a_match() {
        let long = format!("{} the secret is 42 {}", "a".repeat(2000), "b".repeat(2000));
        let hits = vec![
            Hit {
                row: row(7, &long),
                score: 2.0,
            },
            Hit {
                row: row(9, "short note on the secret"),
                score: 1.0,
            },
        ];
        let out = excerpts(&hits, &Query::parse("secret"), 100);
        assert_eq!(out.len(), 2);
        assert!(out[0].text.contains("the secret is 42"), "{}", out[0].text);
        assert!(out[0].text.starts_with('…') && out[0].text.ends_with('…'));
        let bytes: usize = out.iter().map(|e| e.text.len()).sum();
        assert!(bytes <= 100 * BYTES_PER_TOKEN + 8, "{bytes}");
        assert_eq!(
            (out[1].position, out[1].role.as_str()),
            (9, "user"),
            "turn and role come with the passage"
        );
        // Multi-byte text is cut on character boundaries.
        let wide = "é".repeat(3000);
        assert!(passage(&wide, &Query::parse("x"), 101).len() <= 101 + 6);
    }

    #[test]
    fn matching_lines_keep_the_best_lines_of_the_best_hit_first() {
        let mut log: Vec<String> = (0..200)
            .map(|i| format!("vault sync step {i}: nothing to report"))
            .collect();
        log.insert(120, "the vault code is VX-4471".into());
        let hits = vec![
            Hit {
                row: row(3, &log.join("\n")),
                score: 3.0,
            },
            Hit {
                row: row(5, "vault code rotation is monthly"),
                score: 1.0,
            },
        ];
        let out = matching_lines(&hits, &Query::parse("vault code"), 60);
        assert!(
            out[0].text.starts_with("the vault code is VX-4471"),
            "{}",
            out[0].text
        );
        let bytes: usize = out.iter().map(|e| e.text.len()).sum();
        assert!(bytes <= 60 * BYTES_PER_TOKEN, "{bytes}");
        assert!(
            !out[0].text.contains("nothing to report\nnothing"),
            "lines, not a block"
        );
        // Nothing to match, nothing to show.
        assert!(matching_lines(&hits, &Query::parse("zebra"), 60).is_empty());
    }
}
