//! What an archive search asks for, one definition for every backend: the
//! query's words (as SQLite's FTS5 `unicode61` tokenizer splits them), the
//! FTS5 expression SQLite runs, the BM25 scoring the scanning backends
//! (Redis, memory) run, and the excerpts a recall hands the model.

use super::{Excerpt, Hit, Row};
use std::collections::HashMap;

/// Hits a recall looks at before cutting excerpts.
pub const RECALL_HITS: usize = 8;
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
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
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

/// Ranks `rows` (oldest archived first) against `query` with BM25 over the
/// query's words: the best `limit`, best first, the newer of equal scores
/// first; rows matching no word are left out. An empty query lists the
/// last `limit` rows, newest first.
pub fn rank(rows: &[Row], query: &Query, limit: usize) -> Vec<Hit> {
    if query.is_empty() {
        return rows
            .iter()
            .rev()
            .take(limit)
            .map(|row| Hit {
                row: row.clone(),
                score: 0.0,
            })
            .collect();
    }
    let wanted = query.words();
    // Term frequencies of the wanted words, and each row's length in words.
    let stats: Vec<(HashMap<&str, u32>, usize)> = rows
        .iter()
        .map(|row| {
            let mut tf = HashMap::new();
            let mut len = 0;
            // One lowercase copy per row, words borrowed from it.
            let lower = row.text.to_lowercase();
            for w in lower
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
            {
                len += 1;
                if let Some(&hit) = wanted.iter().find(|&&q| q == w) {
                    *tf.entry(hit).or_insert(0) += 1;
                }
            }
            (tf, len)
        })
        .collect();
    let n = rows.len() as f64;
    let avg = (stats.iter().map(|(_, len)| *len).sum::<usize>() as f64 / n.max(1.0)).max(1.0);
    let idf: HashMap<&str, f64> = wanted
        .iter()
        .map(|&w| {
            let df = stats.iter().filter(|(tf, _)| tf.contains_key(w)).count() as f64;
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
    scored
        .into_iter()
        .take(limit)
        .filter_map(|(order, score)| {
            rows.get(order).map(|row| Hit {
                row: row.clone(),
                score,
            })
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

/// Shortened passages of `hits` for a window with little room: best hit
/// first, each cut to its lines matching the most query words (those
/// first, each line at most the room left), within about `token_budget`
/// tokens in all. The best hit takes what it needs before the next.
pub fn matching_lines(hits: &[Hit], query: &Query, token_budget: u32) -> Vec<Excerpt> {
    let mut left = usize::try_from(token_budget)
        .unwrap_or(usize::MAX)
        .saturating_mul(BYTES_PER_TOKEN);
    let wanted = query.words();
    let mut out = Vec::new();
    for hit in hits {
        if left < 32 {
            break;
        }
        let lines: Vec<&str> = hit.row.text.lines().collect();
        let matched = |line: &str| {
            let found: Vec<String> = words(line).collect();
            wanted
                .iter()
                .filter(|w| found.iter().any(|f| f == *w))
                .count()
        };
        // Lines by how many query words they hold, most first, earlier first.
        let mut ranked: Vec<(usize, usize)> = lines
            .iter()
            .enumerate()
            .map(|(i, l)| (i, matched(l)))
            .filter(|&(_, n)| n > 0)
            .collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut chosen: Vec<String> = Vec::new();
        for (i, _) in ranked {
            if left < 32 {
                break;
            }
            let Some(line) = lines.get(i) else { continue };
            let piece = passage(line.trim(), query, left);
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
        query
            .words()
            .iter()
            .filter_map(|w| lower.find(w))
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
    fn rank_prefers_rarer_and_more_matches_and_lists_newest_first() {
        let rows = vec![
            row(1, "the database listens on port 5433"),
            row(2, "the the the the"),
            row(3, "we talked about the weather"),
            row(4, "port forwarding is off"),
        ];
        let hits = rank(&rows, &Query::parse("database port"), 10);
        let order: Vec<usize> = hits.iter().map(|h| h.row.position).collect();
        assert_eq!(order, [1, 4]);
        assert!(hits[0].score > hits[1].score);
        let listed = rank(&rows, &Query::default(), 2);
        assert_eq!(
            listed.iter().map(|h| h.row.position).collect::<Vec<_>>(),
            [4, 3]
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
