//! SigV4 for a Bedrock provider (`[providers.NAME.aws]`): each forwarded
//! request is signed with the provider's own credentials once its body is
//! final. A client's signature cannot survive a fold (the body changed),
//! so the client's `Authorization` and `x-amz-*` headers are dropped first.

use crate::api::Signer;
use crate::config::{AwsConfig, ProviderConfig};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use std::time::SystemTime;

/// The service name Bedrock's runtime signs for.
pub const SERVICE: &str = "bedrock";

/// A provider's SigV4 signer: its region and credentials.
#[derive(Debug)]
pub struct SigV4 {
    region: String,
    credentials: Credentials,
}

impl SigV4 {
    /// A signer for `region` with these keys.
    pub fn new(region: &str, access_key_id: &str, secret: &str, token: Option<String>) -> Self {
        Self {
            region: region.to_string(),
            credentials: Credentials::new(access_key_id, secret, token, None, "foldgate"),
        }
    }

    /// The signer of a provider with an `aws` table (`None` without one);
    /// `Err` names the key at fault.
    pub fn of(provider: &ProviderConfig) -> Result<Option<Self>, String> {
        let Some(aws) = &provider.aws else {
            return Ok(None);
        };
        let region = region(aws, &provider.base_url).ok_or_else(|| {
            "aws.region: not set, AWS_REGION is not set and base_url's host names no region"
                .to_string()
        })?;
        let var = |name: &str| crate::config::read_key(name);
        let key = var(&aws.access_key_id_env).ok_or_else(|| {
            format!(
                "aws.access_key_id_env: environment variable {} is not set",
                aws.access_key_id_env
            )
        })?;
        let secret = var(&aws.secret_access_key_env).ok_or_else(|| {
            format!(
                "aws.secret_access_key_env: environment variable {} is not set",
                aws.secret_access_key_env
            )
        })?;
        let token = var(&aws.session_token_env);
        Ok(Some(Self::new(&region, &key, &secret, token)))
    }

    /// Signs `head` for `body` as of `time`.
    pub fn sign_at(
        &self,
        head: &mut http::request::Parts,
        body: &[u8],
        time: SystemTime,
    ) -> Result<(), String> {
        drop_client_signature(&mut head.headers);
        let uri = head.uri.to_string();
        let host = head.uri.authority().map(|a| a.as_str().to_string());
        let host = head
            .headers
            .get(HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .or(host)
            .ok_or("the request has no host")?;
        let content_type = head
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        // Only what no hop rewrites is signed: the host and the body's type.
        let mut signed: Vec<(&str, &str)> = vec![("host", host.as_str())];
        if let Some(kind) = &content_type {
            signed.push(("content-type", kind.as_str()));
        }
        let identity = self.credentials.clone().into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(SERVICE)
            .time(time)
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| e.to_string())?
            .into();
        let request = SignableRequest::new(
            head.method.as_str(),
            uri,
            signed.into_iter(),
            SignableBody::Bytes(body),
        )
        .map_err(|e| e.to_string())?;
        let (instructions, _) = sign(request, &params)
            .map_err(|e| e.to_string())?
            .into_parts();
        for (name, value) in instructions.headers() {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| e.to_string())?;
            let mut value = HeaderValue::from_str(value).map_err(|e| e.to_string())?;
            value.set_sensitive(name == AUTHORIZATION || name == "x-amz-security-token");
            head.headers.insert(name, value);
        }
        Ok(())
    }
}

impl Signer for SigV4 {
    fn sign(&self, head: &mut http::request::Parts, body: &[u8]) -> Result<(), String> {
        self.sign_at(head, body, SystemTime::now())
    }
}

/// Removes a client's own signature: `Authorization` and every `x-amz-*`
/// header (its date, session token, payload hash).
fn drop_client_signature(headers: &mut http::HeaderMap) {
    headers.remove(AUTHORIZATION);
    let amz: Vec<HeaderName> = headers
        .keys()
        .filter(|name| name.as_str().starts_with("x-amz-"))
        .cloned()
        .collect();
    for name in amz {
        headers.remove(name);
    }
}

/// The region to sign for: configured, else `AWS_REGION`, else the one
/// in a Bedrock host (`bedrock-runtime.REGION.amazonaws.com`, the FIPS
/// `bedrock-runtime-fips.REGION…`).
fn region(aws: &AwsConfig, base_url: &str) -> Option<String> {
    if let Some(region) = aws.region.as_ref().filter(|r| !r.is_empty()) {
        return Some(region.clone());
    }
    if let Some(region) = crate::config::read_key("AWS_REGION") {
        return Some(region);
    }
    let host = base_url.parse::<http::Uri>().ok()?.host()?.to_string();
    let mut labels = host.split('.');
    let service = labels.next()?;
    let region = labels.next()?;
    (service.starts_with("bedrock") && host.ends_with(".amazonaws.com")).then(|| region.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(uri: &str) -> http::request::Parts {
        let (mut head, ()) = http::Request::post(uri).body(()).unwrap().into_parts();
        head.headers
            .insert(HOST, HeaderValue::from_static("127.0.0.1:9"));
        head.headers
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        head.headers.insert(
            AUTHORIZATION,
            HeaderValue::from_static("AWS4-HMAC-SHA256 Credential=client"),
        );
        head.headers
            .insert("x-amz-security-token", HeaderValue::from_static("client"));
        head
    }

    #[test]
    fn the_clients_signature_is_replaced_by_the_providers() {
        let signer = SigV4::new("us-east-1", "AKIDEXAMPLE", "secret", None);
        let mut h = head("http://127.0.0.1:9/model/us.anthropic.claude-x-v1%3A0/invoke");
        let time = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        signer.sign_at(&mut h, b"{}", time).unwrap();
        let auth = h.headers[AUTHORIZATION].to_str().unwrap();
        assert!(
            auth.starts_with(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20231114/us-east-1/bedrock/aws4_request"
            ),
            "{auth}"
        );
        assert!(
            auth.contains("SignedHeaders=content-type;host;x-amz-date"),
            "{auth}"
        );
        assert_eq!(h.headers["x-amz-date"], "20231114T221320Z");
        assert!(!h.headers.contains_key("x-amz-security-token"));
        // Another body, another signature.
        let mut other = head("http://127.0.0.1:9/model/us.anthropic.claude-x-v1%3A0/invoke");
        signer.sign_at(&mut other, b"{ }", time).unwrap();
        assert_ne!(other.headers[AUTHORIZATION], h.headers[AUTHORIZATION]);
    }

    #[test]
    fn the_region_comes_from_the_config_or_the_host() {
        let aws = AwsConfig {
            region: Some("eu-west-1".into()),
            ..AwsConfig::default()
        };
        assert_eq!(
            region(&aws, "http://127.0.0.1:9").as_deref(),
            Some("eu-west-1")
        );
        if std::env::var_os("AWS_REGION").is_none() {
            let aws = AwsConfig::default();
            let host = "https://bedrock-runtime.us-west-2.amazonaws.com";
            assert_eq!(region(&aws, host).as_deref(), Some("us-west-2"));
            assert_eq!(region(&aws, "http://127.0.0.1:9"), None);
        }
    }
}
