//! `GET /foldgate/conversations` (a page of the conversations a credential
//! may read) and `GET /foldgate/conversations/{id}` (one conversation's
//! folds, every one its audit holds, summary, ledger, recent failures and
//! turns).

use super::access::Access;
use crate::app::App;
use crate::error::ApiError;
use crate::fold::FoldChain;
use crate::state::{ConvKey, ListQuery};
use serde_json::{Value, json};

/// Conversations per page when `limit` is not given.
const DEFAULT_LIMIT: usize = 50;

/// A page of conversations, oldest key first: `?limit=N` (1 to 500) and
/// `?after=CURSOR` (the previous page's `next`).
pub async fn list(app: &App, access: &Access, query: &str) -> Result<Value, ApiError> {
    let mut list = ListQuery {
        tenant: access.tenant().map(str::to_string),
        after: None,
        limit: DEFAULT_LIMIT,
    };
    for (name, value) in super::query_pairs(query) {
        match name.as_str() {
            "limit" => {
                list.limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=crate::state::MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        bad(
                            format!("limit must be 1 to {}", crate::state::MAX_LIMIT),
                            "limit",
                        )
                    })?;
            }
            "after" => {
                let key = ConvKey::from_cursor(&value).ok_or_else(|| {
                    bad(
                        "after must be a `next` cursor of a previous page".into(),
                        "after",
                    )
                })?;
                list.after = Some(key);
            }
            _ => {}
        }
    }
    let page = app.store.list(&list).await;
    let conversations: Vec<Value> = page
        .conversations
        .iter()
        .map(|(key, chain)| overview(app, key, chain))
        .collect();
    let hidden = match (access.tenant(), &list.after) {
        (Some(tenant), None) => hidden(app, tenant).await,
        _ => Value::Null,
    };
    Ok(json!({
        "conversations": conversations,
        "next": page.next.as_ref().map(ConvKey::to_cursor),
        "hidden": hidden,
    }))
}

/// Placeholder keys SDKs and local-server recipes send when a server needs
/// none: each is a tenant of its own, so its conversations are named.
const PLACEHOLDER_KEYS: &[&str] = &["none", "EMPTY", "sk-no-key-required", "ollama", "lm-studio"];

/// Conversations of other tenants than `tenant`, counted (never named) so
/// the dashboard can say they exist and how to read them: among the first
/// [`crate::state::MAX_LIMIT`] stored (`more` when there may be others),
/// and which placeholder keys (`none`, …) own some of them.
async fn hidden(app: &App, tenant: &str) -> Value {
    let all = ListQuery {
        tenant: None,
        after: None,
        limit: crate::state::MAX_LIMIT,
    };
    let page = app.store.list(&all).await;
    let others: Vec<&ConvKey> = page
        .conversations
        .iter()
        .map(|(key, _)| key)
        .filter(|key| key.tenant != tenant)
        .collect();
    let keys: Vec<&str> = PLACEHOLDER_KEYS
        .iter()
        .copied()
        .filter(|k| {
            let owner = placeholder_tenant(k);
            others.iter().any(|key| key.tenant == owner)
        })
        .collect();
    let anonymous = others.iter().any(|key| key.tenant == "anonymous");
    json!({
        "conversations": others.len(),
        "more": page.next.is_some(),
        "placeholder_keys": keys,
        "keyless": anonymous,
    })
}

/// The tenant a client sending `Authorization: Bearer KEY` gets.
fn placeholder_tenant(key: &str) -> String {
    let mut headers = http::HeaderMap::new();
    if let Ok(value) = http::HeaderValue::from_str(&format!("Bearer {key}")) {
        headers.insert(http::header::AUTHORIZATION, value);
    }
    crate::pipeline::key::tenant(&headers)
}

fn bad(message: String, param: &'static str) -> ApiError {
    ApiError::BadRequest {
        message,
        param: Some(param),
    }
}

/// One line of the listing: the conversation and its latest fold.
fn overview(app: &App, key: &ConvKey, chain: &FoldChain) -> Value {
    let latest = chain.latest();
    json!({
        "tenant": key.tenant,
        "conversation": key.conversation,
        "folds": chain.folds_made(),
        "restubs": chain.restubs_made(),
        "depth": latest.map(|s| s.depth),
        "covered": latest.map(|s| s.covered),
        "reason": latest.map(|s| s.reason.as_str()),
        "last_fold_at": latest.map(|s| s.created_at),
        "tokens_before": latest.map(|s| s.tokens_before),
        "tokens_after": latest.map(|s| s.tokens_after),
        "failures": failures(app, key),
        "failed_folds": chain.failed_folds(),
        "last_failure_at": chain.failures().last().map(|f| f.at),
        "saved": app.turns.of(key).iter().map(|t| u64::from(t.tokens_in.saturating_sub(t.tokens_out))).sum::<u64>(),
        "cache_stable": cache_stable(app, key),
        "pins_folded": latest.map(|s| s.retained.pins_folded),
    })
}

/// The conversation's cache-stable share in this process: requests whose
/// forwarded messages start with every message of the previous request's.
fn cache_stable(app: &App, key: &ConvKey) -> Value {
    let (stable, requests) = app.turns.cache_stable(key);
    json!({
        "stable": stable,
        "requests": requests,
        "share": (requests > 0).then(|| stable as f64 / requests as f64),
    })
}

/// The conversation's failed folds in a row, if its last fold failed.
fn failures(app: &App, key: &ConvKey) -> Value {
    match app.background.failures(key) {
        Some((in_a_row, wait)) => json!({
            "in_a_row": in_a_row,
            "retry_in_ms": u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        }),
        None => Value::Null,
    }
}

/// Every fold the audit holds, oldest first: the records of folds the
/// chain no longer holds, then the held states in full (with summary and
/// ledger).
fn folds(chain: &FoldChain) -> Vec<Value> {
    let older = chain.older().iter().map(|r| json!(r));
    older
        .chain(chain.states().iter().map(|s| json!(s)))
        .collect()
}

/// The fold chains of conversation `id` that `access` may read (one per
/// tenant for the admin), or a 404 that says there is none.
pub async fn one(app: &App, access: &Access, id: &str) -> Result<Value, ApiError> {
    let found = match access {
        Access::Admin => app.store.find(id).await,
        Access::Tenant(tenant) => {
            let key = ConvKey {
                tenant: tenant.clone(),
                conversation: id.to_string(),
            };
            app.store
                .load(&key)
                .await
                .map(|chain| (key, chain))
                .into_iter()
                .collect()
        }
    };
    if found.is_empty() {
        return Err(ApiError::NoState(id.to_string()));
    }
    let states: Vec<Value> = found
        .iter()
        .map(|(key, chain)| {
            let latest = chain.latest();
            json!({
                "tenant": key.tenant,
                "conversation": key.conversation,
                "folds": folds(chain),
                "folds_made": chain.folds_made(),
                "restubs_made": chain.restubs_made(),
                "current": latest.map(|s| s.summary.render(s.folded())),
                "ledger": latest.map(|s| s.ledger.render()),
                "failures": failures(app, key),
                "fold_failures": chain.failures(),
                "failed_folds": chain.failed_folds(),
                "turns": app.turns.of(key),
                "cache_stable": cache_stable(app, key),
                "pins_folded": latest.map(|s| s.retained.pins_folded),
            })
        })
        .collect();
    Ok(json!({ "conversation": id, "states": states }))
}
