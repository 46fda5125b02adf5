//! The Redis backend: two foldgate replicas on one real redis-server fold a
//! conversation once and share it; a Redis outage never fails a request,
//! and sharing resumes when Redis is back.

use crate::common;

use common::Foldgate;
use common::convo::{Convo, chat, config, label};
use common::llm::Llm;
use common::redis::Redis;
use std::sync::atomic::Ordering;
use std::time::Duration;

fn redis_config(llm: &Llm, redis: &Redis) -> String {
    config(
        llm,
        &format!(
            "[state]\nbackend = \"redis\"\nurl = \"{}\"\nrefresh = \"200ms\"\ntimeout = \"300ms\"\nlock_wait = \"10s\"\n",
            redis.url()
        ),
    )
}

/// Sends one conversation to both replicas at once; returns both labels.
async fn both(a: &Foldgate, b: &Foldgate, conversation: &str, convo: &Convo) -> [String; 2] {
    let (ra, rb) = tokio::join!(chat(a, conversation, convo), chat(b, conversation, convo));
    for r in [&ra, &rb] {
        r.assert_ok();
    }
    let mut labels = [label(&ra).to_string(), label(&rb).to_string()];
    labels.sort();
    labels
}

/// Concurrent requests of one conversation on two replicas: one fold.
async fn assert_shared_fold(a: &Foldgate, b: &Foldgate, llm: &Llm, conversation: &str) {
    let calls = llm.summarizer_calls();
    let mut convo = Convo::with_turns(55);
    assert_eq!(
        both(a, b, conversation, &convo).await,
        ["new", "reused"],
        "one replica folds, the other waits and reuses"
    );
    assert_eq!(
        llm.summarizer_calls(),
        calls + 1,
        "exactly one summarizer call across replicas"
    );
    convo.next_turn("next");
    assert_eq!(both(a, b, conversation, &convo).await, ["reused", "reused"]);
    assert_eq!(llm.summarizer_calls(), calls + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_fold_once_and_share_the_state() {
    let redis = Redis::start();
    let llm = Llm::start().await;
    // A slow summarizer keeps the first fold in flight while the other
    // replica's request arrives.
    llm.state.summarizer_delay_ms.store(300, Ordering::Relaxed);
    let a = Foldgate::start(&redis_config(&llm, &redis)).await;
    let b = Foldgate::start(&redis_config(&llm, &redis)).await;
    assert_shared_fold(&a, &b, &llm, "shared-1").await;
    let stored = redis.command(&["KEYS", "foldgate:state:*"]).unwrap();
    assert!(stored.contains("shared-1"), "{stored}");
    let locks = redis.command(&["KEYS", "foldgate:lock:*"]).unwrap();
    assert!(locks.starts_with("*0"), "locks are released: {locks}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_never_fails_requests_and_sharing_resumes() {
    let mut redis = Redis::start();
    let llm = Llm::start().await;
    let config = redis_config(&llm, &redis).replace("lock_wait = \"10s\"", "lock_wait = \"1s\"");
    let a = Foldgate::start(&config).await;
    let b = Foldgate::start(&config).await;
    let mut before = Convo::with_turns(55);
    assert_eq!(label(&chat(&a, "before", &before).await), "new");

    redis.kill();
    // Each replica goes on with its own memory: folds and reuse still work.
    before.next_turn("during the outage");
    for fg in [&a, &b] {
        let reply = chat(fg, "before", &before).await;
        reply.assert_ok();
    }
    // Within `lock_wait` of the outage a fold the view can do without
    // waits a turn; past it, each replica folds alone (provisionally).
    let mut during = Convo::with_turns(55);
    for fg in [&a, &b] {
        let reply = chat(fg, "during", &during).await;
        reply.assert_ok();
        assert_ne!(
            label(&reply),
            "new",
            "a fold waits while Redis is new to the outage"
        );
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for (i, fg) in [&a, &b, &a, &b].into_iter().enumerate() {
        let reply = chat(fg, "during", &during).await;
        reply.assert_ok();
        if i >= 2 {
            assert_eq!(label(&reply), "reused", "each replica reuses its own fold");
        }
        during.next_turn("more");
    }

    redis.restart();
    // The replicas notice within their probe interval.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    llm.state.summarizer_delay_ms.store(300, Ordering::Relaxed);
    assert_shared_fold(&a, &b, &llm, "after").await;
    // A state a replica kept through the outage is shared again.
    before.next_turn("after the outage");
    for fg in [&a, &b] {
        let reply = chat(fg, "before", &before).await;
        assert_eq!(reply.status, 200);
        assert_eq!(label(&reply), "reused");
    }
}
