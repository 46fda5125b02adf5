//! Who may read which conversations: the guard every conversation read and
//! listing goes through, so the API and the dashboard's fetches answer the
//! same credential the same way.

use crate::app::App;
use crate::error::ApiError;
use crate::pipeline::key;
use crate::upstream::headers;
use http::HeaderMap;

/// What a request may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Every tenant's conversations (`server.admin_token`).
    Admin,
    /// Only this tenant's (a hash of the request's credential).
    Tenant(String),
}

impl Access {
    /// The tenant a listing is limited to; `None` for the admin.
    pub fn tenant(&self) -> Option<&str> {
        match self {
            Self::Admin => None,
            Self::Tenant(t) => Some(t),
        }
    }
}

/// The header that offers the admin token when `Authorization` carries a
/// client credential.
pub const ADMIN_HEADER: &str = "x-foldgate-admin-token";

/// Checks a request's credential:
///
/// - `x-foldgate-admin-token` claims the admin: it must match
///   `server.admin_token` (401 otherwise);
/// - a credential (`Authorization: Bearer`, or an API's key header:
///   `x-api-key`, `x-goog-api-key`) that is the admin token
///   reads everything, any other scopes its tenant;
/// - without one, the `anonymous` tenant from loopback when no admin token
///   is set ([`may_read_keyless`]), else 401.
pub fn check(
    app: &App,
    headers: &HeaderMap,
    peer: Option<key::PeerAddr>,
) -> Result<Access, ApiError> {
    let token = app.config.server.admin_token.as_ref();
    if let Some(claimed) = headers.get(ADMIN_HEADER) {
        let valid = claimed
            .to_str()
            .ok()
            .zip(token)
            .is_some_and(|(offered, token)| token.matches(offered));
        return if valid {
            Ok(Access::Admin)
        } else {
            Err(ApiError::Unauthorized("wrong admin token"))
        };
    }
    match headers::credential(headers) {
        Some(offered) if token.is_some_and(|t| t.matches(offered)) => Ok(Access::Admin),
        Some(_) => Ok(Access::Tenant(key::tenant(headers))),
        None if may_read_keyless(app, peer) => Ok(Access::Tenant(key::tenant(headers))),
        None => Err(ApiError::Unauthorized(
            "admin token or the conversation's credential required",
        )),
    }
}

/// Whether a request without any credential may read the conversations of
/// key-less clients (the `anonymous` tenant): only without an admin token,
/// and only from this machine. Anyone on the network could otherwise read
/// every key-less conversation whose id is known or guessed.
pub fn may_read_keyless(app: &App, peer: Option<key::PeerAddr>) -> bool {
    app.config.server.admin_token.is_none() && peer.is_some_and(|p| p.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use http::HeaderValue;
    use std::sync::Arc;

    fn app(admin_token: Option<&str>) -> App {
        let token = admin_token.map_or(String::new(), |t| format!("admin_token = \"{t}\"\n"));
        let config = Config::from_toml(&format!(
            "[server]\n{token}[providers.local]\nbase_url = \"http://127.0.0.1:9/v1\"\n\
             [state]\nbackend = \"memory\"\n"
        ))
        .unwrap();
        App::new(Arc::new(config)).unwrap()
    }

    fn peer(ip: &str) -> Option<key::PeerAddr> {
        Some(key::PeerAddr(format!("{ip}:40000").parse().unwrap()))
    }

    #[test]
    fn keyless_reads_only_from_loopback_and_only_without_an_admin_token() {
        let open = app(None);
        assert!(may_read_keyless(&open, peer("127.0.0.1")));
        assert!(may_read_keyless(&open, peer("[::1]")));
        assert!(!may_read_keyless(&open, peer("192.0.2.7")));
        assert!(!may_read_keyless(&open, peer("[2001:db8::1]")));
        assert!(!may_read_keyless(&open, None));
        assert!(!may_read_keyless(&app(Some("adm")), peer("127.0.0.1")));
    }

    #[test]
    fn admin_header_must_match_and_credentials_scope_tenants() {
        let guarded = app(Some("adm"));
        let with = |name: &'static str, value: &str| {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_str(value).unwrap());
            h
        };
        let lan = peer("192.0.2.7");
        assert_eq!(
            check(&guarded, &with(ADMIN_HEADER, "adm"), lan).ok(),
            Some(Access::Admin)
        );
        assert!(check(&guarded, &with(ADMIN_HEADER, "nope"), lan).is_err());
        assert!(check(&app(None), &with(ADMIN_HEADER, "adm"), peer("127.0.0.1")).is_err());
        assert_eq!(
            check(&guarded, &with("authorization", "Bearer adm"), lan).ok(),
            Some(Access::Admin)
        );
        let tenant = check(&guarded, &with("authorization", "Bearer sk-a"), lan);
        assert!(matches!(tenant, Ok(Access::Tenant(t)) if t != "anonymous"));
        assert!(check(&guarded, &HeaderMap::new(), peer("127.0.0.1")).is_err());
        assert_eq!(
            check(&app(None), &HeaderMap::new(), peer("127.0.0.1")).ok(),
            Some(Access::Tenant("anonymous".into()))
        );
    }
}
