//! A string that never prints: API keys and tokens from the configuration.

use serde::{Deserialize, Serialize, Serializer};
use std::fmt;
use subtle::ConstantTimeEq;

/// A secret value. `Debug`, `Display` and `Serialize` print `****`, so a
/// secret cannot leak through logs or `foldgate check-config`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `offered` is this secret, compared in constant time
    /// (`subtle`), so timing tells nothing about the value (only whether
    /// the lengths differ).
    pub fn matches(&self, offered: &str) -> bool {
        self.0.as_bytes().ct_eq(offered.as_bytes()).into()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("****")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("****")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("****")
    }
}

/// A connection URL with only its secrets masked: the password of the
/// `user:password@` part (a bare `token@` is masked whole) and the value
/// of any query parameter naming a password (`?password=`, `?pass=`), so
/// `foldgate check-config` shows the hosts, ports and database it will
/// use. `redis://u:pw@h:6379/0` prints `redis://u:****@h:6379/0`;
/// `redis://h:6379/0` prints as it is.
pub fn masked_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:****@{hosts}"),
            None => format!("****@{hosts}"),
        },
        None => authority.to_string(),
    };
    let query = query.map(|q| {
        let pairs: Vec<String> = q
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if k.to_ascii_lowercase().contains("pass") => format!("{k}=****"),
                _ => pair.to_string(),
            })
            .collect();
        format!("?{}", pairs.join("&"))
    });
    format!("{scheme}{authority}{path}{}", query.unwrap_or_default())
}

/// Serializes an optional URL held as a [`Secret`] with [`masked_url`]:
/// hosts shown, password masked.
pub fn serialize_masked_url<S: Serializer>(url: &Option<Secret>, s: S) -> Result<S::Ok, S::Error> {
    match url {
        Some(url) => s.serialize_some(&masked_url(url.expose())),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_the_value() {
        let s = Secret::new("sk-live-123");
        assert_eq!(format!("{s} {s:?}"), "**** ****");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"****\"");
        assert_eq!(s.expose(), "sk-live-123");
    }

    #[test]
    fn a_url_shows_its_hosts_and_masks_only_its_password() {
        for (url, shown) in [
            ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
            ("redis://u:pw@h:6379/0", "redis://u:****@h:6379/0"),
            ("redis://:pw@h:6379", "redis://:****@h:6379"),
            ("redis://token@h", "redis://****@h"),
            (
                "redis+cluster://a:p@w@h1:1,h2:2",
                "redis+cluster://a:****@h1:1,h2:2",
            ),
            (
                "redis+sentinel://s1:26379,s2:26379/mymaster/0",
                "redis+sentinel://s1:26379,s2:26379/mymaster/0",
            ),
            (
                "unix:///run/redis.sock?db=1&pass=x",
                "unix:///run/redis.sock?db=1&pass=****",
            ),
        ] {
            assert_eq!(masked_url(url), shown, "{url}");
        }
    }

    #[test]
    fn matches_only_the_same_value() {
        let s = Secret::new("abc");
        assert!(s.matches("abc"));
        assert!(!s.matches("abd"));
        assert!(!s.matches("abcd"));
        assert!(!s.matches(""));
    }
}
