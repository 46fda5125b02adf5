//! The structured summary a fold produces and its frozen rendering.
//!
//! The summarizer returns [`Summary`] as JSON. [`Summary::render`] turns it
//! into text deterministically: a fixed heading line, the narrative, then one
//! `## Section` with `- item` bullets per non-empty list, in a fixed order.
//! Every item appears verbatim, and the same summary renders to the same
//! bytes on every request, so the upstream's prompt cache stays warm.

use crate::message::RECALL_TOOL;
use serde::{Deserialize, Serialize};

/// Summarizer output: a short narrative plus lists kept item by item.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Summary {
    /// Short narrative of what happened.
    pub summary: String,
    /// Stable facts: identifiers, numbers, names, paths.
    pub facts: Vec<String>,
    /// What the user is trying to achieve.
    pub goals: Vec<String>,
    /// Decisions taken (the most recent explicit one wins).
    pub decisions: Vec<String>,
    /// Work finished (so it is not redone), apart from what is pending.
    pub completed: Vec<String>,
    /// Questions and tasks still open: pending work only.
    pub open_items: Vec<String>,
    /// Files, URLs, commands and other artifacts produced or referenced.
    pub artifacts: Vec<String>,
}

/// The first line of every rendered summary; `{n}` is the folded count.
pub const HEADING_PREFIX: &str = "[foldgate] Summary of the earlier conversation";

impl Summary {
    /// The sections in rendering order, with their headings.
    pub fn sections(&self) -> [(&'static str, &[String]); 6] {
        [
            ("Facts", &self.facts),
            ("Goals", &self.goals),
            ("Decisions", &self.decisions),
            ("Completed", &self.completed),
            ("Open items", &self.open_items),
            ("Artifacts", &self.artifacts),
        ]
    }

    /// Renders the summary of `folded` messages as the text of a message.
    ///
    /// ```text
    /// [foldgate] Summary of the earlier conversation (12 messages folded):
    ///
    /// <narrative>
    ///
    /// ## Facts
    /// - item
    /// ```
    pub fn render(&self, folded: usize) -> String {
        let noun = if folded == 1 { "message" } else { "messages" };
        let mut out = format!("{HEADING_PREFIX} ({folded} {noun} folded):");
        let narrative = self.summary.trim();
        if !narrative.is_empty() {
            out.push_str("\n\n");
            out.push_str(narrative);
        }
        for (heading, items) in self.sections() {
            if items.is_empty() {
                continue;
            }
            out.push_str("\n\n## ");
            out.push_str(heading);
            for item in items {
                out.push_str("\n- ");
                out.push_str(item);
            }
        }
        out
    }

    /// Drops list items (artifacts first, decisions last) and then the
    /// narrative's last sentences until the rendering of `folded` messages
    /// takes at most `limit` tokens. Used when the summarizer wrote more
    /// than the room the ledger leaves it. Returns whether it dropped
    /// anything.
    pub fn trim_to(&mut self, folded: usize, limit: u32, count: &dyn Fn(&str) -> u32) -> bool {
        let mut trimmed = false;
        while count(&self.render(folded)) > limit {
            let lists = [
                &mut self.artifacts,
                &mut self.facts,
                &mut self.goals,
                &mut self.open_items,
                &mut self.completed,
                &mut self.decisions,
            ];
            if let Some(items) = lists.into_iter().find(|l| !l.is_empty()) {
                items.pop();
            } else if !self.summary.is_empty() {
                let text = self.summary.trim_end();
                let body = text.strip_suffix(['.', '!', '?']).unwrap_or(text);
                let cut = body.rfind(['.', '!', '?', '\n']).map_or(0, |i| i + 1);
                self.summary.truncate(cut);
            } else {
                break;
            }
            trimmed = true;
        }
        trimmed
    }
}

/// The line a summary ends with when the model may recall what it folded.
pub fn recall_hint() -> String {
    format!(
        "The folded messages are archived verbatim: to see an exact detail the summary lacks \
         (a file's content, an error, a value), call the {RECALL_TOOL} tool with a query."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_headings_for_non_empty_lists_only() {
        let s = Summary {
            summary: "Fixing the parser.".into(),
            facts: vec!["repo at /src/app".into(), "port 8080".into()],
            open_items: vec!["run tests".into()],
            ..Default::default()
        };
        assert_eq!(
            s.render(3),
            "[foldgate] Summary of the earlier conversation (3 messages folded):\n\n\
             Fixing the parser.\n\n## Facts\n- repo at /src/app\n- port 8080\n\n\
             ## Open items\n- run tests"
        );
    }

    #[test]
    fn trims_items_then_sentences_to_fit() {
        let count = |s: &str| (s.len() as u32).div_ceil(4);
        let full = Summary {
            summary: "First sentence. Second one. Third one.".into(),
            facts: vec!["fact one".into(), "fact two".into()],
            decisions: vec!["keep the cache".into()],
            artifacts: vec!["a.rs".into()],
            ..Default::default()
        };
        let mut s = full.clone();
        assert!(!s.trim_to(2, 1000, &count));
        assert_eq!(s, full);
        let limit = count(&full.render(2)) - 3;
        assert!(s.trim_to(2, limit, &count));
        assert!(count(&s.render(2)) <= limit);
        assert!(s.artifacts.is_empty() && s.decisions.len() == 1, "{s:?}");
        // Down to the heading: items first, then sentences, decisions last.
        let heading = count(&Summary::default().render(2));
        let mut s = full.clone();
        s.trim_to(2, heading + 12, &count);
        assert!(s.facts.is_empty() && s.artifacts.is_empty());
        assert!(count(&s.render(2)) <= heading + 12, "{s:?}");
        let mut s = full;
        s.trim_to(2, heading, &count);
        assert_eq!(s.render(2), Summary::default().render(2));
    }

    #[test]
    fn missing_lists_default_to_empty() {
        let s: Summary = serde_json::from_str(r#"{"summary":"x","facts":["a"]}"#).unwrap();
        assert!(s.goals.is_empty() && s.artifacts.is_empty());
        assert_eq!(
            s.render(1),
            format!("{HEADING_PREFIX} (1 message folded):\n\nx\n\n## Facts\n- a")
        );
    }
}
