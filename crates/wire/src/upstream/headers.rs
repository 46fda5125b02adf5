//! Header hygiene between client, foldgate and upstream.

use crate::api::Api;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Hop-by-hop headers (RFC 9110 §7.6.1): they describe one connection and
/// must not be forwarded.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Whether `name` (in any case) is a hop-by-hop header: for most names,
/// eight length comparisons.
fn is_hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// Removes hop-by-hop headers, including any that `Connection` names.
/// Most messages carry none: one look at each name, then nothing removed;
/// the others (an upstream's `Connection: keep-alive`) lose only the names
/// they carry.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let mut doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|name| is_hop_by_hop(name.as_str()))
        .cloned()
        .collect();
    if doomed.is_empty() {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        // `close` names no header; the listed names go anyway.
        .filter(|name| !name.eq_ignore_ascii_case("close") && !is_hop_by_hop(name))
        .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
        .filter(|name| headers.contains_key(name))
        .collect();
    doomed.extend(named);
    for name in doomed {
        headers.remove(name);
    }
}

/// Prepares client headers for the upstream: hop-by-hop removed, `Host`
/// the upstream's, and the credential replaced by the provider's key when
/// it has one, in the header its API reads.
pub fn to_upstream(
    headers: &mut HeaderMap,
    host: &HeaderValue,
    provider_key: Option<(&str, Api)>,
    drop_client_auth: bool,
) {
    strip_hop_by_hop(headers);
    headers.insert(header::HOST, host.clone());
    if drop_client_auth || provider_key.is_some() {
        for name in crate::api::key_headers() {
            headers.remove(name);
        }
    }
    let Some((key, api)) = provider_key else {
        return;
    };
    let (mut name, mut value) = api.key_header(key);
    if name == header::AUTHORIZATION && azure(host) {
        // Azure OpenAI takes an API key only as `api-key`; a bearer there
        // must be an Entra ID token.
        (name, value) = (HeaderName::from_static("api-key"), key.to_string());
    }
    if let Ok(mut value) = HeaderValue::from_str(&value) {
        value.set_sensitive(true);
        headers.insert(name, value);
    }
}

/// Whether `host` (a `Host` header's value) is an Azure OpenAI resource's
/// (`RESOURCE.openai.azure.com`, or an AI Services resource's
/// `RESOURCE.cognitiveservices.azure.com`, `RESOURCE.services.ai.azure.com`).
fn azure(host: &HeaderValue) -> bool {
    let host = host.as_bytes();
    let name = host
        .iter()
        .rposition(|&b| b == b':')
        .map_or(host, |colon| &host[..colon]);
    [
        ".openai.azure.com",
        ".cognitiveservices.azure.com",
        ".services.ai.azure.com",
    ]
    .iter()
    .any(|suffix| {
        name.len() > suffix.len()
            && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
    })
}

/// Prepares upstream response headers for the client. Streams (event
/// streams, JSON lines) get `X-Accel-Buffering: no` so a buffering proxy
/// in front of foldgate (nginx) passes chunks through as they come.
pub fn to_client(headers: &mut HeaderMap) {
    strip_hop_by_hop(headers);
    if crate::sse::Framing::of(headers).is_some() {
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    }
}

/// The bearer credential a request carries: `Authorization: Bearer X`, else
/// the key in another API's key header (`x-api-key: X` for Anthropic-style
/// clients).
pub fn credential(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    bearer.or_else(|| {
        crate::api::key_headers()
            .iter()
            .filter(|name| **name != header::AUTHORIZATION)
            .find_map(|name| headers.get(name).and_then(|v| v.to_str().ok()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(name: &str) -> Api {
        crate::api::for_provider(name).unwrap()
    }

    #[test]
    fn strips_connection_named_headers() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("close, x-hop"));
        h.insert("x-hop", HeaderValue::from_static("1"));
        h.append("x-hop", HeaderValue::from_static("2"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-keep", HeaderValue::from_static("1"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-keep"));
    }

    #[test]
    fn provider_key_replaces_client_auth() {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer client"),
        );
        h.insert(header::HOST, HeaderValue::from_static("localhost:8080"));
        let upstream = HeaderValue::from_static("api.example:8443");
        to_upstream(
            &mut h,
            &upstream,
            Some(("sk-provider", api("openai"))),
            false,
        );
        assert_eq!(h[header::AUTHORIZATION], "Bearer sk-provider");
        assert_eq!(h[header::HOST], "api.example:8443");
        h.insert("x-api-key", HeaderValue::from_static("client"));
        to_upstream(&mut h, &upstream, Some(("sk-ant", api("anthropic"))), false);
        assert_eq!(h["x-api-key"], "sk-ant");
        assert!(!h.contains_key(header::AUTHORIZATION));
    }

    #[test]
    fn an_azure_host_gets_the_key_as_api_key() {
        let key = Some(("az-key", api("openai")));
        for host in [
            "myres.openai.azure.com",
            "myres.openai.azure.com:443",
            "MyRes.CognitiveServices.Azure.com",
            "myres.services.ai.azure.com",
        ] {
            let mut h = HeaderMap::new();
            h.insert("api-key", HeaderValue::from_static("client"));
            to_upstream(&mut h, &HeaderValue::from_static(host), key, false);
            assert_eq!(h["api-key"], "az-key", "{host}");
            assert!(!h.contains_key(header::AUTHORIZATION), "{host}");
        }
        // Not Azure: a bearer, as before.
        let mut h = HeaderMap::new();
        to_upstream(
            &mut h,
            &HeaderValue::from_static("azure.com.example"),
            key,
            false,
        );
        assert_eq!(h[header::AUTHORIZATION], "Bearer az-key");
        assert!(!h.contains_key("api-key"));
    }

    #[test]
    fn credential_from_either_header() {
        let mut h = HeaderMap::new();
        h.insert("x-api-key", HeaderValue::from_static("k1"));
        assert_eq!(credential(&h), Some("k1"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer k2"));
        assert_eq!(credential(&h), Some("k2"));
    }
}
