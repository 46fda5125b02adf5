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
    fn matches_only_the_same_value() {
        let s = Secret::new("abc");
        assert!(s.matches("abc"));
        assert!(!s.matches("abd"));
        assert!(!s.matches("abcd"));
        assert!(!s.matches(""));
    }
}
