//! The ledger's rules on small, hand-made folds.

use super::*;
use serde_json::json;

fn count(s: &str) -> u32 {
    (s.len() as u32).div_ceil(4)
}

fn item(value: &str, context: &str) -> LedgerItem {
    LedgerItem::new(value.to_owned(), context.to_owned(), None)
}

/// The least an item is rendered with before it leaves: no context, the
/// head noun of its clause.
fn all_brief(items: &[LedgerItem]) -> Ledger {
    let least = Detail {
        context: 0,
        clause: 0,
    };
    Ledger {
        items: with_detail(items, least),
    }
}

fn values(ledger: &Ledger) -> Vec<&str> {
    ledger.items().iter().map(|i| i.value.as_str()).collect()
}

fn fold(previous: &Ledger, folded: &[Value], summary: &str, budget: u32) -> LedgerUpdate {
    let refs: Vec<&Value> = folded.iter().collect();
    Ledger::after_fold(previous, None, &refs, summary, budget, &count)
}

#[test]
fn keeps_what_the_summary_lacks_newest_first() {
    let folded = [
        json!({"role": "user", "content": "Config is in /etc/app/a.toml and JIRA-1 tracks it."}),
        json!({"role": "assistant", "content": "Edited src/lib.rs; see JIRA-2."}),
    ];
    let update = fold(&Ledger::default(), &folded, "Worked on JIRA-1.", 10_000);
    assert_eq!(
        values(&update.ledger),
        ["src/lib.rs", "JIRA-2", "/etc/app/a.toml"]
    );
    assert!(update.evicted.is_empty());
}

#[test]
fn merges_dedups_and_survives_rewrites() {
    let first = fold(
        &Ledger::default(),
        &[json!({"role": "tool", "content": "wrote /tmp/out.csv for JIRA-7"})],
        "",
        10_000,
    );
    assert_eq!(values(&first.ledger), ["/tmp/out.csv", "JIRA-7"]);
    // The rewrite's summary now mentions the path: the item stays anyway,
    // and JIRA-7 seen again moves to the newest place with its new context.
    let second = fold(
        &first.ledger,
        &[json!({"role": "user", "content": "close JIRA-7 and open JIRA-8"})],
        "Wrote /tmp/out.csv.",
        10_000,
    );
    assert_eq!(values(&second.ledger), ["JIRA-7", "JIRA-8", "/tmp/out.csv"]);
    assert_eq!(
        second.ledger.items()[0].context,
        "close JIRA-7 and open JIRA-8"
    );
}

#[test]
fn earlier_summary_identifiers_come_back_when_dropped() {
    let previous = Ledger {
        items: vec![item("JIRA-1", "old")],
    };
    let earlier = format!(
        "Deployed v1.2.3 to db.example.com; Dana agreed.\n\n{LEDGER_HEADING}\n- JIRA-9 — x"
    );
    let update = Ledger::after_fold(
        &previous,
        Some(&earlier),
        &[],
        "Deployed v1.2.3.",
        10_000,
        &count,
    );
    assert_eq!(values(&update.ledger), ["JIRA-1", "db.example.com"]);
    assert_eq!(update.ledger.items()[1].context, FROM_EARLIER_SUMMARY);
}

#[test]
fn drops_context_before_evicting_oldest_first() {
    let previous = Ledger {
        items: (0..20)
            .map(|i| item(&format!("JIRA-{i}"), "a context line"))
            .collect(),
    };
    let full = fold(&previous, &[], "", 10_000).ledger.render();
    let brief = all_brief(&previous.items).render();
    for budget in [0, 5, 20, 25, 60, 100, count(&brief), count(&full) - 1] {
        let update = fold(&previous, &[], "", budget);
        let ledger = &update.ledger;
        assert!(count(&ledger.render()) <= budget, "budget {budget}");
        let kept = ledger.len();
        let values: Vec<_> = ledger.items().iter().map(|i| &i.value).collect();
        let expected: Vec<_> = previous.items[..kept].iter().map(|i| &i.value).collect();
        assert_eq!(values, expected);
        let evicted: Vec<_> = previous.items[kept..].iter().rev().cloned().collect();
        assert_eq!(update.evicted, evicted);
        // The newest keep their context, the oldest kept lose it.
        let detailed = ledger.items().iter().take_while(|i| !i.brief).count();
        assert!(ledger.items()[detailed..].iter().all(|i| i.brief));
        if kept < previous.len() {
            // Items leave only when even without context one more would not fit.
            assert!(count(&all_brief(&previous.items[..=kept]).render()) > budget);
            assert_eq!(detailed, 0, "budget {budget}");
        } else if detailed < kept {
            let mut more = ledger.items().to_vec();
            more[detailed].brief = false;
            assert!(count(&Ledger { items: more }.render()) > budget);
        }
    }
    let update = fold(&previous, &[], "", count(&full));
    assert_eq!(update.ledger.len(), 20);
    assert!(update.ledger.items().iter().all(|i| !i.brief));
    assert!(fold(&previous, &[], "", 16).ledger.is_empty());
}

#[test]
fn fit_holds_for_counters_that_are_not_additive() {
    let items: Vec<LedgerItem> = (0..50).map(|i| item(&format!("JIRA-{i}"), "ctx")).collect();
    let framed = |s: &str| 4 + (s.len() as u32).div_ceil(4);
    let lines = |s: &str| 3 * s.lines().count() as u32;
    for counter in [&framed as &dyn Fn(&str) -> u32, &lines] {
        for budget in [0, 10, 50, 100, 151, 1000] {
            let order: Vec<usize> = (0..items.len()).rev().collect();
            let (gone, d) = fit(&items, &order, budget, counter);
            let k = items.len() - gone;
            let rendered = render_items(&with_detail(&items[..k], d));
            assert!(k == 0 || counter(&rendered) <= budget);
            let more = all_brief(&items[..(k + 1).min(50)]).render();
            assert!(k == items.len() || counter(&more) > budget);
        }
    }
}

#[test]
fn the_earlier_heading_is_not_a_specific() {
    let earlier =
        "[foldgate] Summary of the earlier conversation (24 messages folded):\n\nShipped v1.2.3.";
    let update = Ledger::after_fold(&Ledger::default(), Some(earlier), &[], "", 10_000, &count);
    let values = values(&update.ledger);
    assert!(values.iter().all(|v| !v.contains("24")), "{values:?}");
    assert!(values.iter().any(|v| v.contains("v1.2.3")), "{values:?}");
}

#[test]
fn render_bytes() {
    assert_eq!(Ledger::default().render(), "");
    let ledger = Ledger {
        items: vec![
            item("src/lib.rs", "edited src/lib.rs"),
            item("JIRA-2", ""),
            item("a\nb", "c\r\nd"),
            LedgerItem {
                brief: true,
                ..item("JIRA-3", "context left out")
            },
        ],
    };
    assert_eq!(
        ledger.render(),
        format!(
            "{LEDGER_HEADING}\n- src/lib.rs — edited src/lib.rs\n- JIRA-2\n- a b — c  d\n- JIRA-3"
        )
    );
    assert_eq!(ledger.render(), ledger.clone().render());
}

#[test]
fn long_values_are_ignored() {
    let long = "x".repeat(MAX_VALUE_CHARS + 1);
    let previous = Ledger {
        items: vec![item(&long, ""), item("JIRA-3", "")],
    };
    assert_eq!(values(&fold(&previous, &[], "", 10_000).ledger), ["JIRA-3"]);
}

#[test]
fn serializes_as_a_list() {
    let brief = LedgerItem {
        brief: true,
        ..item("JIRA-3", "")
    };
    let ledger = Ledger {
        items: vec![item("JIRA-2", "ctx"), brief],
    };
    let text = serde_json::to_string(&ledger).unwrap_or_default();
    assert_eq!(
        text,
        r#"[{"value":"JIRA-2","context":"ctx"},{"value":"JIRA-3","context":"","brief":true}]"#
    );
    let back: Ledger = serde_json::from_str(&text).unwrap_or_default();
    assert_eq!(back, ledger);
}

#[test]
fn items_the_plan_completed_render_apart_after_the_open_ones() {
    let mut ledger = Ledger {
        items: vec![
            item("src/queue/mod.rs", "ported"),
            item("INV-QP20931", "the invoice to fix"),
            item("billing-v2", "the branch"),
        ],
    };
    ledger.mark_done(&["Port src/queue/mod.rs to the new queue".to_owned()]);
    assert_eq!(
        ledger.render(),
        format!(
            "{LEDGER_HEADING}\n- INV-QP20931 — the invoice to fix\n- billing-v2 — the branch\n{DONE_HEADING}\n- src/queue/mod.rs — ported"
        )
    );
    // A later plan that reopens the item moves it back.
    ledger.mark_done(&[]);
    assert!(!ledger.render().contains(DONE_HEADING));
}

#[test]
fn a_clause_shrinks_to_its_head_noun_before_the_item_leaves() {
    let folded = [
        json!({"role": "user", "content": "The release manager is Ana Ortiz."}),
        json!({"role": "tool", "content": "deploy to falcon.corp, the build host"}),
        json!({"role": "user", "content": "The metrics port is 9187."}),
    ];
    let full = fold(&Ledger::default(), &folded, "", 10_000)
        .ledger
        .render();
    assert_eq!(
        full,
        format!(
            "{LEDGER_HEADING}\n- metrics port 9187 — The metrics port is 9187.\n\
             - build host falcon.corp — deploy to falcon.corp, the build host\n\
             - release manager Ana Ortiz — The release manager is Ana Ortiz."
        )
    );
    let heads = ["port 9187", "host falcon.corp", "manager Ana Ortiz"];
    for budget in 0..count(&full) {
        let update = fold(&Ledger::default(), &folded, "", budget);
        let rendered = update.ledger.render();
        assert!(count(&rendered) <= budget, "budget {budget}");
        // Every kept line names what its value is, by its head noun at least.
        for (line, head) in rendered.lines().skip(1).zip(heads) {
            assert!(line.contains(head), "budget {budget}: {line:?}");
        }
        // Items leave only when even with head nouns alone one more would not fit.
        if let Some(last) = update.evicted.last() {
            let mut more = update.ledger.items().to_vec();
            more.push(last.clone());
            assert!(count(&all_brief(&more).render()) > budget);
        }
    }
    let tight = fold(&Ledger::default(), &folded, "", 30).ledger.render();
    assert_eq!(
        tight,
        format!("{LEDGER_HEADING}\n- metrics port 9187\n- host falcon.corp\n- manager Ana Ortiz")
    );
}
