//! `GET /foldgate/conversations/{id}/archive?q=…&limit=…`: a search of a
//! conversation's archived messages, under the admin routes' access rule
//! (the request's tenant, or every tenant with the admin token).

use crate::app::App;
use crate::error::ApiError;
use crate::state::ConvKey;
use serde_json::{Value, json};

/// Hits per tenant without `limit`.
const DEFAULT_LIMIT: usize = 10;
/// Largest `limit` honoured.
const MAX_LIMIT: usize = 100;

/// The route's suffix after the conversation id.
const SUFFIX: &str = "/archive";

/// The (still percent-encoded) conversation id of an archive search path.
pub fn id_of(path: &str) -> Option<&str> {
    path.strip_prefix("/foldgate/conversations/")?
        .strip_suffix(SUFFIX)
        .filter(|id| !id.is_empty())
}

/// Searches conversation `id`'s archive: of `tenant` only, or of every
/// tenant when `None` (the admin). `params` are the decoded query pairs:
/// `q` (words; empty lists the messages archived last) and `limit`.
/// 404 when the archive is off or holds nothing of this conversation for
/// the tenants the request may read.
pub async fn search(
    app: &App,
    tenant: Option<&str>,
    id: &str,
    params: impl Iterator<Item = (String, String)>,
) -> Result<Value, ApiError> {
    let mut q = String::new();
    let mut limit = DEFAULT_LIMIT;
    for (name, value) in params {
        match name.as_str() {
            "q" => q = value,
            "limit" => {
                limit = value.parse::<usize>().map_err(|_| ApiError::BadRequest {
                    message: format!("limit must be a whole number, got {value:?}"),
                    param: Some("limit"),
                })?;
            }
            _ => {}
        }
    }
    let limit = limit.clamp(1, MAX_LIMIT);
    let archive = &app.archive;
    let not_found = || ApiError::NoState(id.to_string());
    if !archive.enabled() {
        return Err(not_found());
    }
    let tenants = match tenant {
        Some(t) => vec![t.to_string()],
        None => archive.tenants(id).await,
    };
    let mut results = Vec::new();
    for tenant in tenants {
        let key = ConvKey {
            tenant,
            conversation: id.to_string(),
        };
        let archived = archive.count(&key).await;
        if archived == 0 {
            continue;
        }
        let hits: Vec<Value> = archive
            .hits(&key, &q, limit)
            .await
            .iter()
            .map(crate::archive::Hit::to_json)
            .collect();
        results.push(json!({ "tenant": key.tenant, "archived": archived, "hits": hits }));
    }
    if results.is_empty() {
        return Err(not_found());
    }
    Ok(json!({ "conversation": id, "query": q, "results": results }))
}
