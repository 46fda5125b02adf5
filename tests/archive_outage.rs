//! The archive through a Redis outage: messages folded while a real
//! redis-server is down wait in the replica's spool, are recalled and
//! searched from it during the outage, and are replayed into Redis when it
//! is back; a full spool vetoes the fold instead of dropping a message.
//! Against a scripted model that calls `foldgate_recall` when asked about
//! a fact it cannot see, and a lossy summarizer that keeps no fact.

use crate::common;

use common::convo::{Convo, chat, label};
use common::llm::{LOSSY_SUMMARY, content_text};
use common::mock::{self, Mock, Recorded};
use common::redis::Redis;
use common::{Foldgate, Reply, metric, send};
use foldgate::summarize::prompt::SYSTEM_PROMPT;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// A plain word, so neither the ledger nor the lossy summary keeps it: only
/// the archive does.
const FACT: &str = "the vault code is marmalade";
const QUESTION: &str = "what is the vault code?";

/// The scripted model: a lossy summary for the summarizer; for a chat, the
/// fact when it sees it, else a recall call when asked and offered the tool.
/// It reports no usage, so token estimates are never recalibrated.
async fn upstream() -> Mock {
    Mock::start(|r: Recorded| async move {
        let body = r.json();
        let reply = |message: Value, finish: &str| {
            mock::json(
                StatusCode::OK,
                &json!({"id": "chatcmpl-o", "object": "chat.completion", "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}]}),
            )
        };
        if body.pointer("/messages/0/content").and_then(Value::as_str) == Some(SYSTEM_PROMPT) {
            return reply(json!({"role": "assistant", "content": LOSSY_SUMMARY}), "stop");
        }
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let asked = messages
            .last()
            .is_some_and(|m| content_text(m).contains("vault code"));
        let offered = body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["function"]["name"] == "foldgate_recall");
        if body["messages"].to_string().contains("marmalade") {
            reply(json!({"role": "assistant", "content": "It is marmalade."}), "stop")
        } else if asked && offered {
            let call = json!({"id": format!("call_{}", messages.len()), "type": "function",
                "function": {"name": "foldgate_recall", "arguments": "{\"query\": \"vault code\"}"}});
            reply(json!({"role": "assistant", "content": null, "tool_calls": [call]}), "tool_calls")
        } else {
            reply(json!({"role": "assistant", "content": "noted"}), "stop")
        }
    })
    .await
}

/// Stops a replica and waits until it has.
async fn stop(mut fg: Foldgate) {
    fg.begin_shutdown();
    if let Some(task) = fg.task.take() {
        task.await.unwrap();
    }
}

/// foldgate on Redis; recall by the tool alone (`recall = "tool"`: the
/// tests count the model's recall calls, which an injected block would
/// make needless).
fn config(upstream: &Mock, redis: &Redis, spool_bytes: u64) -> String {
    format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n\
         [models.\"tiny-*\"]\ncontext_window = 4000\n\
         [policy]\nreset_ratio = 0.45\nmode = \"inline\"\n\
         [summarizer]\nmax_summary_tokens = 400\nretries = 0\ntimeout = \"5s\"\n\
         [state]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"300ms\"\nrefresh = \"200ms\"\n\
         [archive]\nspool_bytes = {spool_bytes}\nrecall = \"tool\"\n",
        upstream.url,
        redis.url()
    )
}

/// The fact early, then enough turns to fold it away, then `last`.
fn conversation(last: &str) -> Convo {
    let mut convo = Convo::with_turns(0);
    convo
        .user(&format!("remember that {FACT}"))
        .assistant("noted");
    for i in 0..70 {
        convo
            .user(&format!("question {i}"))
            .assistant(&format!("answer {i}"));
    }
    convo.user(last);
    convo
}

/// The messages of every chat request foldgate forwarded (not the
/// summarizer's), oldest first.
fn views(upstream: &Mock) -> Vec<Vec<Value>> {
    upstream
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(Recorded::json)
        .filter(|b| b.pointer("/messages/0/content").and_then(Value::as_str) != Some(SYSTEM_PROMPT))
        .map(|b| b["messages"].as_array().cloned().unwrap())
        .collect()
}

/// Summarizer requests the model received.
fn summarizer_calls(upstream: &Mock) -> usize {
    upstream
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| {
            r.json()
                .pointer("/messages/0/content")
                .and_then(Value::as_str)
                == Some(SYSTEM_PROMPT)
        })
        .count()
}

/// Positions of the client's messages that a forwarded view lacks.
fn absent(client: &[Value], view: &[Value]) -> BTreeSet<usize> {
    (0..client.len())
        .filter(|&i| !view.contains(&client[i]))
        .collect()
}

/// Tenant A's archive hits for `q` in `conversation`, from the admin search.
async fn search(fg: &Foldgate, conversation: &str, q: &str) -> Vec<Value> {
    let url = format!(
        "{}/foldgate/conversations/{conversation}/archive?q={}&limit=100",
        fg.url,
        q.replace(' ', "+")
    );
    let reply: Reply = send(
        Method::GET,
        &url,
        &[("authorization", "Bearer sk-tenant-a")],
        "",
    )
    .await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    reply.json()["results"][0]["hits"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Whether a hit's message is the fact.
fn is_fact(hit: &Value) -> bool {
    content_text(&hit["message"]).contains(FACT)
}

/// Waits (up to 20 s) until the replica's metric `name` reads `value`;
/// returns its metrics.
async fn until(fg: &Foldgate, name: &str, value: f64) -> String {
    let started = Instant::now();
    loop {
        let metrics = fg.metrics().await;
        if metric(&metrics, name) == value {
            return metrics;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{name} never reached {value}:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the replica's spool is empty; returns its metrics.
async fn drained(fg: &Foldgate) -> String {
    until(fg, "foldgate_archive_spool_rows", 0.0).await
}

/// Every position of `convo` absent from `view`, as archive hits of `fg`.
async fn assert_archived(fg: &Foldgate, conversation: &str, convo: &Convo, view: &[Value]) {
    let gone = absent(&convo.messages, view);
    assert!(!gone.is_empty(), "the view folded messages");
    let listed: BTreeSet<usize> = search(fg, conversation, "")
        .await
        .iter()
        .map(|h| h["position"].as_u64().unwrap() as usize)
        .collect();
    assert!(
        gone.is_subset(&listed),
        "folded but not archived: {:?}",
        gone.difference(&listed).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fact_folded_during_a_redis_outage_is_recalled_during_it_and_after_it() {
    let mut redis = Redis::start();
    let upstream = upstream().await;
    let a = Foldgate::start(&config(&upstream, &redis, 64 << 20)).await;
    chat(&a, "warm", &Convo::with_turns(2)).await.assert_ok();

    redis.kill();
    let convo = conversation(QUESTION);
    let reply = chat(&a, "vault", &convo).await;
    reply.assert_ok();
    assert_eq!(
        label(&reply),
        "new",
        "folds go on during the outage: {:?}",
        reply.headers
    );
    let seen = views(&upstream);
    let view = &seen[seen.len() - 2];
    assert!(
        !view.iter().any(|m| content_text(m).contains("marmalade")),
        "the fact is folded away"
    );
    assert_eq!(
        reply.json()["choices"][0]["message"]["content"],
        "It is marmalade.",
        "recalled from the spool during the outage"
    );
    assert!(search(&a, "vault", "vault code").await.iter().any(is_fact));
    let folded = absent(&convo.messages, view).len() as f64;
    let metrics = until(&a, "foldgate_archive_spooled_rows_total", folded).await;
    assert_eq!(metric(&metrics, "foldgate_archive_spool_rows"), folded);

    redis.restart();
    let metrics = drained(&a).await;
    assert_eq!(
        metric(&metrics, "foldgate_archive_replayed_rows_total"),
        folded,
        "every spooled row replayed"
    );
    assert_eq!(
        metric(&metrics, "foldgate_archive_rows_total{by=\"fold\"}"),
        folded,
        "the rows handed to the archive are counted"
    );
    // A second replica has no spool: what it finds is in Redis itself.
    let b = Foldgate::start(&config(&upstream, &redis, 64 << 20)).await;
    assert!(search(&b, "vault", "vault code").await.iter().any(is_fact));
    assert_archived(&b, "vault", &convo, view).await;
    let keys = redis
        .command(&["KEYS", "foldgate:archive:*vault}"])
        .unwrap();
    let key = keys
        .lines()
        .find(|l| l.starts_with("foldgate:archive:"))
        .unwrap();
    assert_eq!(
        redis.command(&["LLEN", key]).unwrap().trim(),
        format!(":{folded}")
    );

    // And the replica recalls it from Redis after the outage.
    let mut after = conversation("thanks");
    after.assistant("noted").user(QUESTION);
    let reply = chat(&a, "vault", &after).await;
    reply.assert_ok();
    assert_eq!(
        reply.json()["choices"][0]["message"]["content"],
        "It is marmalade."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spool_vetoes_the_fold_and_loses_nothing() {
    let mut redis = Redis::start();
    let upstream = upstream().await;
    // Room for one fold's rows: an empty spool takes any one batch.
    let a = Foldgate::start(&config(&upstream, &redis, 1000)).await;
    chat(&a, "warm", &Convo::with_turns(2)).await.assert_ok();

    redis.kill();
    let first = conversation("hello");
    let reply = chat(&a, "first", &first).await;
    assert_eq!(label(&reply), "new");
    let first_view = views(&upstream).pop().unwrap();

    let second = conversation("hello again");
    let summaries = summarizer_calls(&upstream);
    let reply = chat(&a, "second", &second).await;
    reply.assert_ok();
    assert_eq!(label(&reply), "none", "the fold is not made");
    assert_eq!(
        summarizer_calls(&upstream),
        summaries,
        "no summary is made only to be thrown away"
    );
    let warning = reply.header("x-foldgate-warning");
    assert!(warning.contains("archive spool is full"), "{warning}");
    let view = views(&upstream).pop().unwrap();
    assert_eq!(
        view, second.messages,
        "forwarded whole: nothing left the view"
    );
    let metrics = a.metrics().await;
    assert_eq!(metric(&metrics, "foldgate_archive_vetoed_folds_total"), 1.0);
    assert_eq!(
        common::folds_counted(&metrics),
        1.0,
        "the vetoed fold is not counted as made"
    );

    redis.restart();
    drained(&a).await;
    let reply = chat(&a, "second", &second).await;
    assert_eq!(
        label(&reply),
        "new",
        "folds once the spool has room: {:?}",
        reply.headers
    );
    let second_view = views(&upstream).pop().unwrap();
    drained(&a).await;
    let b = Foldgate::start(&config(&upstream, &redis, 1000)).await;
    assert_archived(&b, "first", &first, &first_view).await;
    assert_archived(&b, "second", &second, &second_view).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_restarted_during_the_outage_replays_its_spool_file() {
    let mut redis = Redis::start();
    let upstream = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}spool_path = {:?}\n",
        config(&upstream, &redis, 64 << 20),
        dir.path().join("spool.db").display().to_string()
    );
    let a = Foldgate::start(&toml).await;
    chat(&a, "warm", &Convo::with_turns(2)).await.assert_ok();

    redis.kill();
    let convo = conversation("hello");
    let reply = chat(&a, "vault", &convo).await;
    assert_eq!(label(&reply), "new");
    let view = views(&upstream).pop().unwrap();
    let folded = absent(&convo.messages, &view).len() as f64;
    until(&a, "foldgate_archive_spooled_rows_total", folded).await;
    stop(a).await;

    // Still during the outage: the new process holds what the old one spooled.
    let a = Foldgate::start(&toml).await;
    let metrics = a.metrics().await;
    assert_eq!(metric(&metrics, "foldgate_archive_spool_rows"), folded);
    assert!(search(&a, "vault", "vault code").await.iter().any(is_fact));

    redis.restart();
    let metrics = drained(&a).await;
    assert_eq!(
        metric(&metrics, "foldgate_archive_replayed_rows_total"),
        folded
    );
    let b = Foldgate::start(&config(&upstream, &redis, 64 << 20)).await;
    assert_archived(&b, "vault", &convo, &view).await;
    stop(a).await;
    let again = Foldgate::start(&toml).await;
    let metrics = again.metrics().await;
    // A batch loaded from the file counts as spooled when the file is read.
    assert_eq!(
        metric(&metrics, "foldgate_archive_spooled_rows_total"),
        0.0,
        "replayed rows left the file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_on_failure_error_a_full_spool_answers_503_and_forwards_nothing() {
    let mut redis = Redis::start();
    let upstream = upstream().await;
    let toml = config(&upstream, &redis, 1000)
        .replace("[summarizer]\n", "[summarizer]\non_failure = \"error\"\n");
    let a = Foldgate::start(&toml).await;
    redis.kill();
    chat(&a, "first", &conversation("hello")).await.assert_ok();
    let forwarded = views(&upstream).len();
    let reply = chat(&a, "second", &conversation("hello again")).await;
    reply.assert_envelope(503, "unavailable");
    let message = reply.json()["error"]["message"].to_string();
    assert!(message.contains("archive spool is full"), "{message}");
    assert_eq!(views(&upstream).len(), forwarded, "nothing forwarded");
}
