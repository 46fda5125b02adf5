//! Listing stored conversations a page at a time, the same way on every
//! backend: ordered by tenant then conversation id, resumed after the last
//! key of the previous page (a cursor that stays valid while conversations
//! come and go, unlike an offset).

use super::ConvKey;

/// Largest page a listing returns, whatever `limit` asks.
pub const MAX_LIMIT: usize = 500;

/// Which conversations to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Only this tenant's, or every tenant's when `None` (admin).
    pub tenant: Option<String>,
    /// Resume after this key (the previous page's `next`).
    pub after: Option<ConvKey>,
    /// Conversations per page, 1 to [`MAX_LIMIT`].
    pub limit: usize,
}

impl ListQuery {
    /// Whether `key` belongs on a page of this listing (tenant and cursor;
    /// not the limit).
    pub fn admits(&self, key: &ConvKey) -> bool {
        self.tenant.as_ref().is_none_or(|t| *t == key.tenant)
            && self
                .after
                .as_ref()
                .is_none_or(|after| order(key) > order(after))
    }

    /// The page's limit, within bounds.
    pub fn limit(&self) -> usize {
        self.limit.clamp(1, MAX_LIMIT)
    }
}

/// The listing order: tenant, then conversation id.
fn order(key: &ConvKey) -> (&str, &str) {
    (&key.tenant, &key.conversation)
}

/// One page: the first `limit` admitted entries in listing order, and the
/// cursor of the next page when more follow.
pub fn page_of<T>(
    entries: impl IntoIterator<Item = (ConvKey, T)>,
    query: &ListQuery,
) -> (Vec<(ConvKey, T)>, Option<ConvKey>) {
    let mut entries: Vec<(ConvKey, T)> = entries
        .into_iter()
        .filter(|(k, _)| query.admits(k))
        .collect();
    entries.sort_by(|(a, _), (b, _)| order(a).cmp(&order(b)));
    entries.dedup_by(|(a, _), (b, _)| a == b);
    let limit = query.limit();
    let next = (entries.len() > limit).then(|| entries[limit - 1].0.clone());
    entries.truncate(limit);
    (entries, next)
}

impl ConvKey {
    /// The key as a listing cursor: `tenant:conversation` (a tenant never
    /// contains `:`).
    pub fn to_cursor(&self) -> String {
        format!("{}:{}", self.tenant, self.conversation)
    }

    /// The key a cursor names, if it is one.
    pub fn from_cursor(cursor: &str) -> Option<Self> {
        let (tenant, conversation) = cursor.split_once(':')?;
        Some(Self {
            tenant: tenant.to_string(),
            conversation: conversation.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tenant: &str, conversation: &str) -> ConvKey {
        ConvKey {
            tenant: tenant.into(),
            conversation: conversation.into(),
        }
    }

    #[test]
    fn pages_follow_each_other_without_gaps_or_repeats() {
        let keys: Vec<ConvKey> = ["b", "a", "c", "e", "d"]
            .iter()
            .map(|c| key("t1", c))
            .chain([key("t0", "z"), key("t2", "a")])
            .collect();
        let mut query = ListQuery {
            tenant: Some("t1".into()),
            after: None,
            limit: 2,
        };
        let mut seen = Vec::new();
        loop {
            let (page, next) = page_of(keys.iter().map(|k| (k.clone(), ())), &query);
            seen.extend(page.into_iter().map(|(k, ())| k.conversation));
            match next {
                Some(next) => query.after = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, ["a", "b", "c", "d", "e"]);
        query.tenant = None;
        query.after = None;
        query.limit = 10;
        let (all, next) = page_of(keys.into_iter().map(|k| (k, ())), &query);
        assert_eq!(all.first().map(|e| &e.0), Some(&key("t0", "z")));
        assert_eq!(all.last().map(|e| &e.0), Some(&key("t2", "a")));
        assert_eq!((all.len(), next), (7, None));
    }

    #[test]
    fn cursor_round_trips_ids_with_colons() {
        let k = key("anonymous", "a:b:c");
        assert_eq!(ConvKey::from_cursor(&k.to_cursor()), Some(k));
        assert_eq!(ConvKey::from_cursor("no-colon"), None);
    }
}
