//! The dashboard in a real headless browser (Debian's `chromium`): the page
//! loads, reads the admin API with the token given in its address, shows a
//! folded conversation (timeline, summary, chart, totals) and logs nothing
//! to the console. Fails, never skips, when chromium is missing.

use crate::common;

use common::convo::{Convo, config, label};
use common::llm::{Llm, Sum};
use common::mock::Mock;
use common::{Foldgate, post_json};
use http::Response;
use std::process::Stdio;
use std::time::Duration;

const ADMIN: &str = "adm-dashboard";

/// What headless chromium made of a page.
struct Page {
    /// The DOM after the page's scripts ran.
    dom: String,
    /// Every console message the page caused (errors, warnings, logs,
    /// uncaught exceptions, CSP refusals): the dashboard logs none.
    console: Vec<String>,
}

/// Loads `url` in headless chromium and dumps its DOM once the page is
/// idle (virtual time runs only while no fetch is pending).
async fn chromium(url: &str) -> Page {
    let profile = tempfile::tempdir().unwrap();
    let child = tokio::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run chromium ({e}); install it: apt-get install -y chromium")
        });
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("chromium did not finish within 120 s")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "chromium failed ({}): {stderr}",
        out.status
    );
    Page {
        dom: String::from_utf8_lossy(&out.stdout).into_owned(),
        console: stderr
            .lines()
            .filter(|l| l.contains(":CONSOLE"))
            .map(str::to_string)
            .collect(),
    }
}

/// foldgate with an admin token and one conversation folded, then reused.
async fn folded() -> (Llm, Foldgate) {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(
        &llm,
        &format!("[server]\nadmin_token = \"{ADMIN}\"\n"),
    ))
    .await;
    let mut convo = Convo::with_turns(55);
    let url = format!("{}/v1/chat/completions", fg.url);
    let headers = [
        ("x-conversation-id", "dash-conversation"),
        ("authorization", "Bearer sk-dash"),
    ];
    let reply = post_json(&url, &headers, &convo.body()).await;
    assert_eq!(label(&reply), "new");
    convo.next_turn("one more");
    let reply = post_json(&url, &headers, &convo.body()).await;
    assert_eq!(label(&reply), "reused");
    (llm, fg)
}

/// The text of the element with `id` in a dumped DOM.
fn element<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in:\n{dom}"));
    let rest = &dom[start..];
    let open = rest.find('>').unwrap() + 1;
    let close = rest[open..].find("</").unwrap();
    &rest[open..open + close]
}

/// The markup from the element with `id` to the first `end` after it.
fn block<'a>(dom: &'a str, id: &str, end: &str) -> &'a str {
    let start = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in:\n{dom}"));
    let rest = &dom[start..];
    &rest[..rest.find(end).unwrap_or(rest.len())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_folded_conversation_without_console_errors() {
    let (_llm, fg) = folded().await;
    // A conversation where no API claims it: the page names its path.
    let chat = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    post_json(&format!("{}/v2/chat", fg.url), &[], &chat).await;
    let page = chromium(&format!("{}/foldgate/ui#token={ADMIN}", fg.url)).await;
    let dom = &page.dom;
    assert!(page.console.is_empty(), "console: {:#?}", page.console);
    assert_eq!(element(dom, "status"), "", "no error shown:\n{dom}");
    assert!(
        dom.contains("dash-conversation"),
        "the conversation is listed:\n{dom}"
    );
    assert!(
        element(dom, "detail-title").contains("dash-conversation"),
        "and opened:\n{dom}"
    );
    assert!(
        element(dom, "detail-title").contains("chat API"),
        "with the API it speaks:\n{dom}"
    );
    assert!(
        element(dom, "summary").contains("[foldgate] Summary"),
        "its current summary:\n{dom}"
    );
    assert_eq!(
        element(dom, "economy"),
        "Cache-stable requests: 1 of 1 (100%).",
        "the cache-stable share:\n{dom}"
    );
    let timeline = block(dom, "timeline", "</table>");
    assert_eq!(
        timeline.matches("<tr>").count(),
        2,
        "header and one fold:\n{timeline}"
    );
    assert!(timeline.contains("<td>token</td>"), "{timeline}");
    let chart = block(dom, "chart", "</svg>");
    assert_eq!(
        chart.matches("<polyline").count(),
        2,
        "full and forwarded:\n{chart}"
    );
    assert_eq!(
        chart.matches("class=\"fold\"").count(),
        1,
        "one new fold:\n{chart}"
    );
    let unclaimed = block(dom, "unclaimed", "</section>");
    assert!(!unclaimed.contains("hidden"), "{unclaimed}");
    assert!(unclaimed.contains("POST /v2/chat   × 1"), "{unclaimed}");
    let totals = block(dom, "totals", "</section>");
    assert!(totals.contains("<b>1</b><span>folds</span>"), "{totals}");
    assert!(
        totals.contains("<b>1</b><span>reused summaries since start</span>"),
        "{totals}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_token_the_dashboard_shows_nothing_but_the_401() {
    let (_llm, fg) = folded().await;
    let page = chromium(&format!("{}/foldgate/ui", fg.url)).await;
    assert!(
        element(&page.dom, "status").starts_with("Unauthorized"),
        "{}",
        page.dom
    );
    assert!(!page.dom.contains("dash-conversation"), "{}", page.dom);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_check_sees_what_a_page_logs() {
    // The check above is only worth something if chromium's log shows
    // console messages: a page that logs one and throws must be caught.
    let mock = Mock::start(|_| async {
        let mut resp = Response::new(foldgate::body::full(
            "<html><body><script>console.error('deliberate'); undefinedCall();</script></body></html>",
        ));
        resp.headers_mut()
            .insert("content-type", "text/html".parse().unwrap());
        resp
    })
    .await;
    let page = chromium(&format!("{}/page", mock.url)).await;
    let console = page.console.join("\n");
    assert!(console.contains("deliberate"), "{console}");
    assert!(console.contains("undefinedCall"), "{console}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fold_stays_in_the_timeline_and_other_tenants_are_named() {
    // The summarizer fails every attempt of the first fold, then works: the
    // failure stays on the record after the success. The client sends the
    // placeholder key `none`, a tenant of its own.
    let llm = Llm::start().await;
    llm.script([Sum::Status(500), Sum::Status(500), Sum::Status(500)]);
    let fg = Foldgate::start(&config(
        &llm,
        // Inside [summarizer]: no backoff, so the next turn folds again.
        &format!("failure_backoff = \"0s\"\n[server]\nadmin_token = \"{ADMIN}\"\n"),
    ))
    .await;
    let mut convo = Convo::with_turns(55);
    let url = format!("{}/v1/chat/completions", fg.url);
    let headers = [
        ("x-conversation-id", "dash-failing"),
        ("authorization", "Bearer none"),
    ];
    let reply = post_json(&url, &headers, &convo.body()).await;
    assert_eq!(label(&reply), "none", "the fold failed");
    convo.next_turn("again");
    let reply = post_json(&url, &headers, &convo.body()).await;
    assert_eq!(label(&reply), "new", "the next one worked");

    let page = chromium(&format!("{}/foldgate/ui#token={ADMIN}", fg.url)).await;
    let dom = &page.dom;
    assert!(page.console.is_empty(), "console: {:#?}", page.console);
    let timeline = block(dom, "timeline", "</table>");
    assert_eq!(
        timeline.matches("<tr").count(),
        3,
        "header, the failure, the fold:\n{timeline}"
    );
    let failure_row = timeline
        .find("<tr class=\"failed\"><td>failed</td>")
        .unwrap_or_else(|| panic!("{timeline}"));
    assert!(
        failure_row < timeline.find("<td>1</td>").unwrap(),
        "the failure comes before the fold that followed it:\n{timeline}"
    );
    assert!(timeline.contains("→ not folded"), "{timeline}");
    assert!(
        timeline.contains("500"),
        "the summarizer's error:\n{timeline}"
    );
    let failures = element(dom, "failures");
    assert!(failures.starts_with("Last fold failure: "), "{failures}");
    assert!(failures.contains("a later fold succeeded"), "{failures}");
    let chart = block(dom, "chart", "</svg>");
    assert_eq!(chart.matches("class=\"failure\"").count(), 1, "{chart}");
    assert!(
        !element(dom, "tenants").contains("other credentials"),
        "the admin reads everything:\n{dom}"
    );

    // Another credential reads none of it, and is told why and how.
    let page = chromium(&format!("{}/foldgate/ui#token=sk-someone-else", fg.url)).await;
    let hint = element(&page.dom, "tenants");
    assert!(
        hint.starts_with("1 conversation belongs to other credentials"),
        "{}",
        page.dom
    );
    assert!(hint.contains("enter the admin token"), "{hint}");
    assert!(hint.contains("placeholder key \"none\""), "{hint}");
    assert!(!page.dom.contains("dash-failing"), "nothing of it is shown");
    assert_eq!(element(&page.dom, "status"), "", "{}", page.dom);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_totals_still_count_the_folds_the_table_shows() {
    // Four conversations folded once each, in SQLite; then a new foldgate
    // on the same file, whose own counters start at zero.
    let llm = Llm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = config(
        &llm,
        &format!(
            "[server]\nadmin_token = \"{ADMIN}\"\n[state]\nbackend = \"sqlite\"\npath = {:?}\n",
            dir.path().join("foldgate.db").display().to_string()
        ),
    );
    let mut fg = Foldgate::start(&toml).await;
    let url = format!("{}/v1/chat/completions", fg.url);
    for id in ["dash-1", "dash-2", "dash-3", "dash-4"] {
        let headers = [
            ("x-conversation-id", id),
            ("authorization", "Bearer sk-dash"),
        ];
        let reply = post_json(&url, &headers, &Convo::with_turns(55).body()).await;
        assert_eq!(label(&reply), "new");
    }
    fg.begin_shutdown();
    if let Some(task) = fg.task.take() {
        task.await.unwrap();
    }
    let fg = Foldgate::start(&toml).await;

    let page = chromium(&format!("{}/foldgate/ui#token={ADMIN}", fg.url)).await;
    let dom = &page.dom;
    assert!(page.console.is_empty(), "console: {:#?}", page.console);
    let table = block(dom, "conversations", "</table>");
    assert_eq!(
        table.matches("<tr").count(),
        5,
        "header and four conversations:\n{table}"
    );
    let totals = block(dom, "totals", "</section>");
    assert!(totals.contains("<b>4</b><span>folds</span>"), "{totals}");
    assert!(
        totals.contains("<b>4</b><span>conversations</span>"),
        "{totals}"
    );
    assert!(
        totals.contains("<b>0</b><span>requests since start</span>"),
        "this process's counters say what they count:\n{totals}"
    );
}
