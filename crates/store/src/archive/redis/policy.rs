//! Whether the archive's Redis may evict archive rows. The archive is the
//! only verbatim copy of folded messages, and its lists carry an expiry
//! (`archive.ttl`): under memory pressure an `allkeys-*` policy may evict
//! them like any key, a `volatile-*` one like any key with an expiry. Only
//! `noeviction` keeps them (a full Redis then refuses writes, which wait in
//! the spool). Start-up and `foldgate check-config` ask the archive's
//! Redis (`CONFIG GET maxmemory-policy`, every master of a cluster) and
//! warn; a Redis that refuses `CONFIG` (managed services often do) is
//! noted, not an error.

use crate::config::{Config, StateBackend};
use crate::state::redis::Conn;
use std::time::Duration;

/// What a `maxmemory-policy` does to archive keys: `None` for
/// `noeviction`, else why it may drop them.
pub fn risk(policy: &str) -> Option<&'static str> {
    match policy {
        "noeviction" => None,
        p if p.starts_with("allkeys-") => Some("evicts any key under memory pressure"),
        _ => Some(
            "evicts keys that carry an expiry under memory pressure, and archive keys do (archive.ttl)",
        ),
    }
}

/// The warning for these policies (one per master) of the Redis named by
/// the configuration key `key`, or `None` when every one is `noeviction`.
pub fn warning(policies: &[String], key: &str) -> Option<String> {
    let (policy, why) = policies.iter().find_map(|p| risk(p).map(|why| (p, why)))?;
    Some(format!(
        "the archive's Redis ({key}) has maxmemory-policy {policy}, which {why}: archived messages (the only verbatim copy of folded ones) may be lost; give the archive a Redis with maxmemory-policy noeviction (archive.url; see docs/architecture.md, \"The archive in Redis\")"
    ))
}

/// Asks `conn` for its masters' `maxmemory-policy` within `timeout`.
async fn ask(conn: &mut Conn, timeout: Duration) -> Result<Vec<String>, String> {
    match tokio::time::timeout(timeout, conn.config_get("maxmemory-policy")).await {
        Ok(Ok(policies)) if !policies.is_empty() => Ok(policies),
        Ok(Ok(_)) => Err("no policy in its answer".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}

/// At start-up: one WARN when the archive's Redis may evict archive keys,
/// one INFO when it cannot be asked.
pub(crate) async fn warn_if_evicting(mut conn: Conn, timeout: Duration, key: &'static str) {
    match ask(&mut conn, timeout).await {
        Ok(policies) => {
            if let Some(warning) = warning(&policies, key) {
                tracing::warn!(target: "foldgate::archive", policy = policies.join(","), "{warning}");
            }
        }
        Err(error) => {
            tracing::info!(target: "foldgate::archive", error, "could not ask the archive's Redis for its maxmemory-policy; it must be noeviction, or archived messages may be evicted");
        }
    }
}

/// For `foldgate check-config`: a line about the archive's Redis eviction
/// policy (`warning: …` or `note: …`), or `None` when the archive is not
/// in Redis or its Redis keeps every key.
pub async fn check(config: &Config) -> Option<String> {
    if config.state.backend != StateBackend::Redis || !config.archive.enabled {
        return None;
    }
    let key = if config.archive.url.is_some() {
        "archive.url"
    } else {
        "state.url"
    };
    let url = config.archive.redis_url(&config.state);
    let mut conn = match Conn::open(url, config.state.timeout) {
        Ok(conn) => conn,
        Err(e) => {
            return Some(format!(
                "note: could not connect to the archive's Redis ({key}): {e}"
            ));
        }
    };
    match ask(&mut conn, config.state.timeout).await {
        Ok(policies) => warning(&policies, key).map(|w| format!("warning: {w}")),
        Err(error) => Some(format!(
            "note: could not ask the archive's Redis ({key}) for its maxmemory-policy ({error}); it must be noeviction, or archived messages may be evicted"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_noeviction_keeps_archive_keys() {
        assert_eq!(risk("noeviction"), None);
        for p in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-ttl",
        ] {
            assert!(risk(p).is_some(), "{p}");
        }
        let ok = ["noeviction".to_string(), "noeviction".to_string()];
        assert_eq!(warning(&ok, "state.url"), None);
        let mixed = ["noeviction".to_string(), "allkeys-lru".to_string()];
        let w = warning(&mixed, "archive.url").unwrap();
        assert!(
            w.contains("allkeys-lru") && w.contains("archive.url"),
            "{w}"
        );
    }
}
