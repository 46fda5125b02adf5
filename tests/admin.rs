//! The admin API: listing conversations a page at a time on every state
//! backend, tenant-scoped or all with the admin token; 401 against 404;
//! turns and fold details for the dashboard.

use crate::common;

use common::convo::{Convo, config, label};
use common::llm::Llm;
use common::redis::Redis;
use common::{Foldgate, Reply, post_json, send};
use http::Method;
use serde_json::Value;

const ADMIN: &str = "adm-list";

/// Sends the conversation's history as the tenant of `key`.
async fn chat_as(fg: &Foldgate, key: &str, conversation: &str, convo: &Convo) -> Reply {
    post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[
            ("x-conversation-id", conversation),
            ("authorization", &format!("Bearer {key}")),
        ],
        &convo.body(),
    )
    .await
}

/// Folds `conversation` on its first request as the tenant of `key`.
async fn fold_as(fg: &Foldgate, key: &str, conversation: &str) -> Convo {
    let convo = Convo::with_turns(55);
    let reply = chat_as(fg, key, conversation, &convo).await;
    reply.assert_ok();
    assert_eq!(label(&reply), "new");
    convo
}

async fn get(fg: &Foldgate, path: &str, headers: &[(&str, &str)]) -> Reply {
    send(Method::GET, &format!("{}{path}", fg.url), headers, "").await
}

/// Every conversation a credential lists, page by page; checks each page's
/// size.
async fn list_all(fg: &Foldgate, headers: &[(&str, &str)], limit: usize) -> Vec<Value> {
    let mut all = Vec::new();
    let mut path = format!("/foldgate/conversations?limit={limit}");
    for _ in 0..20 {
        let reply = get(fg, &path, headers).await;
        reply.assert_ok();
        let page = reply.json();
        let items = page["conversations"].as_array().unwrap().clone();
        assert!(items.len() <= limit, "{page}");
        all.extend(items);
        match page["next"].as_str() {
            Some(next) => {
                assert_eq!(all.len() % limit, 0, "only a full page has a next one");
                path = format!(
                    "/foldgate/conversations?limit={limit}&after={}",
                    next.replace('%', "%25").replace(':', "%3A")
                );
            }
            None => return all,
        }
    }
    panic!("more than 20 pages");
}

fn ids(list: &[Value]) -> Vec<String> {
    list.iter()
        .map(|c| c["conversation"].as_str().unwrap().to_string())
        .collect()
}

/// The same listing and access rules, whatever backend holds the states.
async fn listing_rules(fg: &Foldgate) {
    for id in ["c-3", "c-1", "c:colon", "c-2"] {
        fold_as(fg, "sk-a", id).await;
    }
    fold_as(fg, "sk-b", "c-1").await;

    let a = [("authorization", "Bearer sk-a")];
    let own = list_all(fg, &a, 2).await;
    assert_eq!(ids(&own), ["c-1", "c-2", "c-3", "c:colon"], "sorted, paged");
    let tenant = own[0]["tenant"].as_str().unwrap();
    assert!(own.iter().all(|c| c["tenant"] == tenant), "one tenant only");
    assert_eq!(own[0]["folds"], 1);
    assert_eq!(own[0]["reason"], "token");
    assert!(own[0]["tokens_before"].as_u64() > own[0]["tokens_after"].as_u64());

    let b = list_all(fg, &[("authorization", "Bearer sk-b")], 50).await;
    assert_eq!(ids(&b), ["c-1"]);
    assert_ne!(b[0]["tenant"], tenant);
    let nobody = list_all(fg, &[("authorization", "Bearer sk-nobody")], 50).await;
    assert!(
        nobody.is_empty(),
        "a credential without states lists nothing"
    );

    for admin in [
        [("authorization", format!("Bearer {ADMIN}"))],
        [("x-foldgate-admin-token", ADMIN.to_string())],
    ] {
        let admin = [(admin[0].0, admin[0].1.as_str())];
        let all = list_all(fg, &admin, 3).await;
        assert_eq!(all.len(), 5, "every tenant's: {all:?}");
    }

    // 401: a credential is required, or the admin token offered is wrong.
    get(fg, "/foldgate/conversations", &[])
        .await
        .assert_envelope(401, "invalid_api_key");
    get(
        fg,
        "/foldgate/conversations",
        &[("x-foldgate-admin-token", "wrong")],
    )
    .await
    .assert_envelope(401, "invalid_api_key");
    get(fg, "/foldgate/conversations/c-1", &[])
        .await
        .assert_envelope(401, "invalid_api_key");
    // 400: a malformed page request.
    get(fg, "/foldgate/conversations?limit=0", &a)
        .await
        .assert_envelope(400, "invalid_request");
    get(fg, "/foldgate/conversations?after=nocolon", &a)
        .await
        .assert_envelope(400, "invalid_request");
    // Malformed escapes are kept as written, so they fail the same checks.
    for query in ["limit=%zz", "limit=%3", "limit=1%", "after=%E2%82"] {
        get(fg, &format!("/foldgate/conversations?{query}"), &a)
            .await
            .assert_envelope(400, "invalid_request");
    }
    // 404 with a message that says why: unknown, or another tenant's.
    for (path, key) in [
        ("/foldgate/conversations/never-seen", "Bearer sk-a"),
        ("/foldgate/conversations/c-2", "Bearer sk-b"),
    ] {
        let reply = get(fg, path, &[("authorization", key)]).await;
        reply.assert_envelope(404, "conversation_not_found");
        let message = reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            message.contains("has no state for this credential"),
            "{message}"
        );
    }
    let detail = get(fg, "/foldgate/conversations/c%3Acolon", &a).await;
    detail.assert_ok();
    assert_eq!(detail.json()["states"][0]["conversation"], "c:colon");
}

fn admin_config(llm: &Llm, state: &str) -> String {
    config(
        llm,
        &format!("[server]\nadmin_token = \"{ADMIN}\"\n{state}"),
    )
}

#[tokio::test]
async fn listing_in_memory() {
    let llm = Llm::start().await;
    listing_rules(&Foldgate::start(&admin_config(&llm, "")).await).await;
}

#[tokio::test]
async fn listing_in_sqlite() {
    let llm = Llm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let state = format!(
        "[state]\nbackend = \"sqlite\"\npath = {:?}\n",
        dir.path().join("fg.db").display().to_string()
    );
    listing_rules(&Foldgate::start(&admin_config(&llm, &state)).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_in_redis() {
    let llm = Llm::start().await;
    let redis = Redis::start();
    let state = format!(
        "[state]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n",
        redis.url()
    );
    listing_rules(&Foldgate::start(&admin_config(&llm, &state)).await).await;
}

#[tokio::test]
async fn a_conversation_shows_its_turns_failures_and_ledger() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    let mut convo = fold_as(&fg, "sk-a", "turns").await;
    convo.next_turn("and one more");
    let reply = chat_as(&fg, "sk-a", "turns", &convo).await;
    assert_eq!(label(&reply), "reused");
    let a = [("authorization", "Bearer sk-a")];
    let state = get(&fg, "/foldgate/conversations/turns", &a).await.json()["states"][0].clone();
    let turns = state["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2, "{state}");
    assert_eq!(turns[0]["fold"], "new");
    assert_eq!(turns[1]["fold"], "reused");
    // The reused turn starts with every message the fold forwarded.
    assert_eq!(turns[1]["stable"], true, "{state}");
    assert_eq!(
        state["cache_stable"],
        serde_json::json!({"stable": 1, "requests": 1, "share": 1.0}),
        "{state}"
    );
    for turn in turns {
        assert!(
            turn["tokens_in"].as_u64() > turn["tokens_out"].as_u64(),
            "{turn}"
        );
    }
    assert_eq!(
        turns[1]["tokens_out"].as_u64().unwrap(),
        u64::from(reply.tokens_out()),
        "the turn is what the answer said"
    );
    assert!(state["ledger"].is_string());
    assert!(state["failures"].is_null());
    let listed = list_all(&fg, &a, 10).await;
    assert!(listed[0]["saved"].as_u64().unwrap() > 0, "{listed:?}");

    // A failing summarizer shows as failures in a row on the conversation.
    llm.answer_always(common::llm::Sum::Status(500));
    for i in 0..40 {
        convo.next_turn(&format!("more work {i}"));
    }
    let reply = chat_as(&fg, "sk-a", "turns", &convo).await;
    reply.assert_ok();
    assert!(
        !reply.header("x-foldgate-warning").is_empty(),
        "the fold failed"
    );
    let state = get(&fg, "/foldgate/conversations/turns", &a).await.json()["states"][0].clone();
    assert_eq!(state["failures"]["in_a_row"], 1, "{state}");
    assert_eq!(state["turns"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn the_dashboard_files_are_served_without_a_key_and_its_data_is_not() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "[server]\napi_keys = [\"sk-allowed\"]\n")).await;
    for (path, kind) in [
        ("/foldgate/ui", "text/html"),
        ("/foldgate/ui/app.js", "text/javascript"),
        ("/foldgate/ui/style.css", "text/css"),
    ] {
        let reply = get(&fg, path, &[]).await;
        reply.assert_ok();
        assert!(reply.header("content-type").starts_with(kind), "{path}");
        assert!(
            reply
                .header("content-security-policy")
                .contains("default-src 'none'"),
            "{path}"
        );
    }
    get(&fg, "/foldgate/ui/other.js", &[])
        .await
        .assert_envelope(404, "not_found");
    get(&fg, "/foldgate/conversations", &[])
        .await
        .assert_envelope(401, "invalid_api_key");
    let listed = get(
        &fg,
        "/foldgate/conversations",
        &[("authorization", "Bearer sk-allowed")],
    )
    .await;
    listed.assert_ok();
    assert_eq!(listed.json()["conversations"], serde_json::json!([]));
}

#[tokio::test]
async fn with_api_keys_the_admin_token_still_opens_the_admin_routes_only() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(
        &llm,
        "[server]\napi_keys = [\"sk-allowed\"]\nadmin_token = \"adm-secret\"\n",
    ))
    .await;
    fold_as(&fg, "sk-allowed", "shared-conv").await;
    // The dashboard sends the admin token as a bearer credential.
    let admin = [("authorization", "Bearer adm-secret")];
    let listed = list_all(&fg, &admin, 10).await;
    assert_eq!(ids(&listed), ["shared-conv"]);
    get(
        &fg,
        "/foldgate/conversations",
        &[("authorization", "Bearer adm-wrong")],
    )
    .await
    .assert_envelope(401, "invalid_api_key");
    // It is not an API key for the proxy.
    let reply = common::post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &admin,
        &serde_json::json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    reply.assert_envelope(401, "invalid_api_key");
}
