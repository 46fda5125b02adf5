//! A batch of stubs only when it pays, through the real server: an agent
//! loop with 2–3 parallel tool calls per step sends its history as it is
//! while the window has room (no batch pays for its cache miss), shows
//! the due batches once the window is at risk, and keeps every stub it
//! showed on later requests.

use crate::common;

use common::llm::Llm;
use common::tooloop::ToolLoop;
use common::{Foldgate, post_json};
use foldgate::fold::compress::STUB_PREFIX;

/// Steps of the loop.
const STEPS: usize = 14;

/// Replays the loop against a `window`-token model with `compress` keys;
/// per step, the stubs the forwarded request showed and whether it folded.
async fn replay(window: u32, compress: &str) -> Vec<(usize, bool)> {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&format!(
        "{}[models.\"agent-*\"]\ncontext_window = {window}\n\
         [policy]\nmode = \"inline\"\n[summarizer]\ntimeout = \"5s\"\n\
         [compress]\nmin_tokens = 300\n{compress}",
        common::providers(llm.url())
    ))
    .await;
    let mut l = ToolLoop::new("port the billing service");
    let mut out = Vec::new();
    for k in 0..STEPS {
        l.bench_parallel_step(k);
        let before = llm.chat_requests().len();
        let reply = post_json(
            &format!("{}/v1/chat/completions", fg.url),
            &[
                ("x-conversation-id", "pays"),
                ("authorization", "Bearer sk-a"),
            ],
            &l.body("agent-model"),
        )
        .await;
        reply.assert_ok();
        let sent = &llm.chat_requests()[before];
        let stubs = sent["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| {
                m["content"]
                    .as_str()
                    .is_some_and(|t| t.starts_with(STUB_PREFIX))
            })
            .count();
        out.push((stubs, reply.header("x-foldgate-fold") == "new"));
    }
    out
}

fn stubs(run: &[(usize, bool)]) -> Vec<usize> {
    run.iter().map(|r| r.0).collect()
}

#[tokio::test]
async fn a_batch_waits_until_the_window_is_at_risk() {
    // A 200k window: batches are due (the loop has long results followed
    // by turns) but none pays for the miss, and nothing is at risk.
    let roomy = replay(200_000, "").await;
    assert!(
        roomy.iter().all(|&(s, folded)| s == 0 && !folded),
        "{roomy:?}"
    );
    // The same loop with every due batch shown (the rule off): stubs.
    let always = replay(200_000, "when_it_pays = false\n").await;
    assert!(stubs(&always).iter().any(|&s| s > 0), "{always:?}");
    // An 18k window: the history nears the 14,400-token trigger within the
    // loop, so the due batches show, and once shown they stay.
    let tight = replay(18_000, "").await;
    let first = tight.iter().position(|r| r.0 > 0);
    let Some(first) = first else {
        panic!("no batch shown at risk: {tight:?}")
    };
    assert!(first > 0, "not from the start: {tight:?}");
    for pair in tight[first..].windows(2) {
        assert!(
            pair[1].0 >= pair[0].0 || pair[1].1,
            "a stub shown is kept until a fold: {tight:?}"
        );
    }
}
