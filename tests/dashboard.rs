//! The dashboard in a real headless browser (Debian's `chromium`): the page
//! loads, reads the admin API with the token given in its address, shows a
//! folded conversation (timeline, summary, chart, totals) and logs nothing
//! to the console. Fails, never skips, when chromium is missing.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly; the no-panic rule is for the request path"
)]

mod common;

use common::convo::{Convo, config, label};
use common::llm::Llm;
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
    let totals = block(dom, "totals", "</section>");
    assert!(totals.contains("<b>1</b><span>folds</span>"), "{totals}");
    assert!(
        totals.contains("<b>1</b><span>reused summaries</span>"),
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
