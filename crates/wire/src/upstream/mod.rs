//! Upstream providers: routing by model, path mapping, and sending a
//! request with clean headers and a deadline for the response head.

mod client;
mod error;
pub mod headers;
mod retry;

pub use client::HttpClient;

pub use error::UpstreamError;

use crate::api::{Api, Signer};
use crate::body::Body;
use crate::config::{Config, Secret};
use crate::error::ApiError;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Request, Response, Uri};
use hyper::body::Incoming;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// One configured provider, ready to send to.
#[derive(Debug)]
pub struct Provider {
    /// The provider's name in the configuration.
    pub name: String,
    scheme: Scheme,
    authority: Authority,
    /// The `Host` header every request to it carries, made once (the
    /// client would format it for each request).
    host: HeaderValue,
    /// Path of `base_url`, without a trailing slash (e.g. `/v1`).
    base_path: String,
    api_key: Option<Secret>,
    /// The API it speaks: the header its key goes in, the shape of
    /// summarizer calls to it.
    api: Api,
    /// Signs each request once its body is final (an AWS provider's
    /// SigV4), from [`crate::api::Provider::signer`].
    signer: Option<Arc<dyn Signer>>,
    max_body_bytes: usize,
    client: HttpClient,
}

/// All providers, and the rules that pick one for a request.
#[derive(Debug)]
pub struct Upstreams {
    config: Arc<Config>,
    providers: HashMap<String, Arc<Provider>>,
    /// The provider of requests no pattern names.
    default: Arc<Provider>,
}

impl Upstreams {
    /// Builds a client per provider (providers without `ca_file` share one
    /// pool). Reads provider keys from the environment once.
    pub fn new(config: Arc<Config>) -> Result<Self, UpstreamError> {
        let shared = client::build(None, config.server.connect_timeout)?;
        let mut providers = HashMap::new();
        for (name, p) in &config.providers {
            let uri: Uri = p
                .base_url
                .parse()
                .map_err(|source| UpstreamError::BaseUrl {
                    name: name.clone(),
                    source,
                })?;
            let client = match &p.ca_file {
                Some(ca) => {
                    client::build(Some(ca), config.server.connect_timeout).map_err(|e| {
                        UpstreamError::Provider {
                            name: name.clone(),
                            source: Box::new(e),
                        }
                    })?
                }
                None => shared.clone(),
            };
            // Unset: the client's credential is forwarded (warned at start-up).
            let api_key = p
                .api_key_env
                .as_deref()
                .and_then(crate::config::read_key)
                .map(Secret::new);
            let scheme = uri.scheme().cloned().unwrap_or(Scheme::HTTPS);
            let authority = uri
                .authority()
                .cloned()
                .ok_or_else(|| UpstreamError::NoHost { name: name.clone() })?;
            let api =
                crate::api::for_provider(&p.api.0).ok_or_else(|| UpstreamError::UnknownApi {
                    name: name.clone(),
                    api: p.api.0.clone(),
                    known: crate::api::provider_names().join(", "),
                })?;
            let signer = api.signer(p).map_err(|detail| UpstreamError::Signer {
                name: name.clone(),
                detail,
            })?;
            let provider = Provider {
                name: name.clone(),
                host: host_header(&scheme, &authority),
                scheme,
                authority,
                base_path: uri.path().trim_end_matches('/').to_string(),
                api_key,
                api,
                signer,
                max_body_bytes: config.server.max_body_bytes,
                client,
            };
            providers.insert(name.clone(), Arc::new(provider));
        }
        let default = config
            .default_provider()
            .and_then(|(name, _)| providers.get(name).cloned())
            .ok_or(UpstreamError::NoProvider)?;
        Ok(Self {
            config,
            providers,
            default,
        })
    }

    /// Whether the provider a request goes to depends on its model: not
    /// when one provider takes every model (`*`), so a body passed through
    /// need not be read for its `model` at all.
    pub fn route_by_model(&self) -> bool {
        let only =
            (self.config.providers.len() == 1).then(|| self.config.providers.values().next());
        !only
            .flatten()
            .is_some_and(|p| p.models.iter().any(|m| m == "*"))
    }

    /// The provider for `model` (see [`Config::provider_for`]); a model no
    /// provider lists is a 404 `model_not_found`.
    pub fn route(&self, model: Option<&str>) -> Result<Arc<Provider>, ApiError> {
        match self.config.provider_for(model) {
            Some((name, _)) => Ok(self.by_name(name)),
            None => match model {
                Some(model) => Err(ApiError::ModelNotFound(model.to_string())),
                None => Ok(self.default.clone()),
            },
        }
    }

    /// The provider of a conversation request on `api`'s route, for
    /// `model`: only a provider set to that API's `api` (a key sent to a
    /// Gemini route never reaches OpenAI's host). With none, a 404 naming
    /// the setting to add; with some, but none listing the model, a 404
    /// `model_not_found`.
    pub fn route_api(&self, api: Api, model: &str, path: &str) -> Result<Arc<Provider>, ApiError> {
        let wanted = api.provider();
        if let Some((name, _)) = self.config.provider_for_api(wanted, model) {
            return Ok(self.by_name(name));
        }
        match self.providers.values().any(|p| p.api.provider() == wanted) {
            true => Err(ApiError::ModelNotFound(model.to_string())),
            false => Err(ApiError::NoProvider {
                api: api.name(),
                provider_api: wanted,
                path: path.to_string(),
            }),
        }
    }

    /// A provider by name; unknown names give the default provider.
    pub fn by_name(&self, name: &str) -> Arc<Provider> {
        self.providers
            .get(name)
            .cloned()
            .unwrap_or_else(|| self.default.clone())
    }
}

impl Provider {
    /// The API the provider speaks: how it takes its key, how summarizer
    /// calls to it are shaped.
    pub fn api(&self) -> Api {
        self.api
    }

    /// Whether the provider runs on this machine or a private network (a
    /// local model server, which often serves one request at a time).
    pub fn is_local(&self) -> bool {
        let host = self
            .authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        match host.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback() || ip.is_private(),
            Ok(std::net::IpAddr::V6(ip)) => ip.is_loopback(),
            Err(_) => host.eq_ignore_ascii_case("localhost"),
        }
    }

    /// Maps a proxy path onto this provider: `/v1/x` → `{base_url}/x`,
    /// any other path `/y` → `{base_url}/y`. The query is kept.
    /// A path with a `.` or `..` segment (also percent-encoded, or split
    /// by an encoded `/` or a backslash) is refused: upstreams normalize
    /// them, which would reach paths outside `base_url`'s prefix.
    pub fn target(&self, path_and_query: Option<&PathAndQuery>) -> Result<Uri, ApiError> {
        let pq = path_and_query.map(PathAndQuery::as_str).unwrap_or("/");
        let rest = match pq.strip_prefix("/v1") {
            Some(r) if r.is_empty() || r.starts_with('/') || r.starts_with('?') => r,
            _ => pq,
        };
        self.join(rest)
    }

    /// `{base_url}` then `tail` (a path and query relative to the
    /// client's base URL, see [`crate::api::Route`]), dot segments refused
    /// as by [`Self::target`].
    pub fn join(&self, tail: &str) -> Result<Uri, ApiError> {
        if has_dot_segment(tail.split('?').next().unwrap_or_default()) {
            return Err(ApiError::BadRequest {
                message:
                    "the request path has `.` or `..` segments, which foldgate does not forward"
                        .into(),
                param: None,
            });
        }
        let mut path = String::with_capacity(self.base_path.len() + tail.len() + 1);
        path.push_str(&self.base_path);
        path.push_str(tail);
        if path.is_empty() {
            path.push('/');
        }
        let bad = |e: &dyn std::fmt::Display| ApiError::BadRequest {
            message: format!("bad request path: {e}"),
            param: None,
        };
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(PathAndQuery::try_from(path).map_err(|e| bad(&e))?);
        Uri::from_parts(parts).map_err(|e| bad(&e))
    }

    /// Sends `req` (whose URI is the client's) upstream and waits up to
    /// `timeout` for the response head. The body streams both ways. A body
    /// whole in memory is sent once more when the upstream drops the
    /// connection before answering (see `retry`).
    pub async fn send(
        &self,
        req: Request<Body>,
        timeout: Duration,
        drop_client_auth: bool,
    ) -> Result<Response<Incoming>, ApiError> {
        let target = self.target(req.uri().path_and_query())?;
        self.send_to(req, target, timeout, drop_client_auth).await
    }

    /// Sends a conversation request, whose URI is its route's tail
    /// ([`crate::api::Route::tail`]), to `{base_url}{tail}`.
    pub async fn send_tail(
        &self,
        req: Request<Body>,
        timeout: Duration,
        drop_client_auth: bool,
    ) -> Result<Response<Incoming>, ApiError> {
        let tail = req.uri().path_and_query().map_or("/", PathAndQuery::as_str);
        let target = self.join(tail)?;
        self.send_to(req, target, timeout, drop_client_auth).await
    }

    async fn send_to(
        &self,
        mut req: Request<Body>,
        mut target: Uri,
        timeout: Duration,
        drop_client_auth: bool,
    ) -> Result<Response<Incoming>, ApiError> {
        if self.api_key.is_some() || drop_client_auth {
            // The client's credential does not go upstream in the query
            // either (Gemini clients send `?key=`), as in its headers.
            target = without_query_key(target);
        }
        *req.uri_mut() = target;
        self.dispatch(req, timeout, drop_client_auth).await
    }

    /// Sends `req` to `path` on the provider's server itself: `base_url`'s
    /// path without a trailing `/v1`, then `path` (Ollama's `/api/show`
    /// and llama.cpp's `/props` sit beside their `/v1`).
    pub async fn send_to_server(
        &self,
        mut req: Request<Body>,
        path: &str,
        timeout: Duration,
    ) -> Result<Response<Incoming>, ApiError> {
        let root = self
            .base_path
            .strip_suffix("/v1")
            .unwrap_or(&self.base_path);
        *req.uri_mut() = Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(format!("{root}{path}"))
            .build()
            .map_err(|e| ApiError::BadRequest {
                message: format!("bad server path: {e}"),
                param: None,
            })?;
        self.dispatch(req, timeout, false).await
    }

    /// Sends a request whose URI is already the upstream's.
    async fn dispatch(
        &self,
        mut req: Request<Body>,
        timeout: Duration,
        drop_client_auth: bool,
    ) -> Result<Response<Incoming>, ApiError> {
        headers::to_upstream(
            req.headers_mut(),
            &self.host,
            self.api_key.as_ref().map(|k| (k.expose(), self.api)),
            drop_client_auth,
        );
        if let Some(signer) = &self.signer {
            req = self.signed(signer.as_ref(), req).await?;
        }
        // Let hyper pick the version: ALPN decides for TLS upstreams.
        *req.version_mut() = http::Version::HTTP_11;
        // One deadline for the head, a retry included.
        match tokio::time::timeout(timeout, retry::send(&self.client, &self.name, req)).await {
            Err(_) => Err(ApiError::UpstreamTimeout {
                provider: self.name.clone(),
                after: timeout,
            }),
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) => Err(self.classify(&e)),
        }
    }

    /// `req` signed by `signer` for its whole body (a body still
    /// streaming from the client is read first, bounded).
    async fn signed(
        &self,
        signer: &dyn Signer,
        req: Request<Body>,
    ) -> Result<Request<Body>, ApiError> {
        let (mut head, body) = req.into_parts();
        let bytes = match retry::Payload::of(body) {
            retry::Payload::Whole(bytes) => bytes,
            retry::Payload::Streaming(body) => self.whole(body).await?,
        };
        signer
            .sign(&mut head, &bytes)
            .map_err(|detail| ApiError::UpstreamUnreachable {
                provider: self.name.clone(),
                detail: format!("signing the request: {detail}"),
            })?;
        Ok(Request::from_parts(head, crate::body::full(bytes)))
    }

    /// A client's streaming body, whole (at most `max_body_bytes`).
    async fn whole(&self, mut body: Body) -> Result<bytes::Bytes, ApiError> {
        use http_body_util::BodyExt as _;
        let mut out = bytes::BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| ApiError::BadRequest {
                message: format!("could not read the request body: {e}"),
                param: None,
            })?;
            if let Ok(data) = frame.into_data() {
                if out.len() + data.len() > self.max_body_bytes {
                    return Err(ApiError::BodyTooLarge {
                        limit: self.max_body_bytes,
                    });
                }
                out.extend_from_slice(&data);
            }
        }
        Ok(out.freeze())
    }

    /// Turns a client error into the error the client sees.
    fn classify(&self, err: &hyper_util::client::legacy::Error) -> ApiError {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
        while let Some(e) = source {
            if e.is::<http_body_util::LengthLimitError>() {
                return ApiError::BodyTooLarge {
                    limit: self.max_body_bytes,
                };
            }
            source = e.source();
        }
        ApiError::UpstreamUnreachable {
            provider: self.name.clone(),
            detail: retry::error_chain(err),
        }
    }
}

/// `uri` without its `key` query parameters.
fn without_query_key(uri: Uri) -> Uri {
    let Some(query) = uri.query().filter(|q| q.split('&').any(is_key_pair)) else {
        return uri;
    };
    let kept: Vec<&str> = query.split('&').filter(|p| !is_key_pair(p)).collect();
    let path = match kept.is_empty() {
        true => uri.path().to_string(),
        false => format!("{}?{}", uri.path(), kept.join("&")),
    };
    let mut parts = uri.clone().into_parts();
    match path.parse() {
        Ok(pq) => {
            parts.path_and_query = Some(pq);
            Uri::from_parts(parts).unwrap_or(uri)
        }
        Err(_) => uri,
    }
}

fn is_key_pair(pair: &str) -> bool {
    pair == "key" || pair.starts_with("key=")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_is_the_authority_without_userinfo_or_the_default_port() {
        let host = |scheme: &str, authority: &str| {
            let scheme: Scheme = scheme.parse().unwrap();
            host_header(&scheme, &authority.parse().unwrap())
        };
        assert_eq!(host("http", "127.0.0.1:19191"), "127.0.0.1:19191");
        assert_eq!(host("https", "api.example"), "api.example");
        assert_eq!(host("https", "api.example:443"), "api.example");
        assert_eq!(host("http", "h:80"), "h");
        assert_eq!(host("http", "h:443"), "h:443");
        assert_eq!(host("https", "h:80"), "h:80");
        assert_eq!(host("http", "user:pw@h:8080"), "h:8080");
        assert_eq!(host("http", "[::1]:8080"), "[::1]:8080");
    }

    #[test]
    fn dot_segments_are_found_however_they_are_spelled() {
        for climbing in [
            "/v1/..",
            "/v1/%2E%2e/x",
            "/a\\..\\b",
            "/v1/.%2fx",
            "/v1%5c..%5cx",
            "/./x",
        ] {
            assert!(has_dot_segment(climbing), "{climbing}");
        }
        for plain in [
            "/v1/chat/completions",
            "/v1/files/a.json",
            "/v1/.well",
            "/v1/..x",
            "/",
        ] {
            assert!(!has_dot_segment(plain), "{plain}");
        }
    }

    #[test]
    fn the_clients_query_key_is_dropped_and_the_rest_kept() {
        let strip = |s: &str| without_query_key(s.parse().unwrap()).to_string();
        assert_eq!(
            strip("https://h/v1beta/models/m:streamGenerateContent?alt=sse&key=AIza"),
            "https://h/v1beta/models/m:streamGenerateContent?alt=sse"
        );
        assert_eq!(strip("https://h/p?key=a"), "https://h/p");
        assert_eq!(strip("https://h/p?keys=a&x=1"), "https://h/p?keys=a&x=1");
    }

    #[test]
    fn a_provider_speaking_no_known_api_stops_the_start() {
        let toml = "[providers.p]\nbase_url = \"http://127.0.0.1:9\"\napi = \"cohere\"\n";
        let config = Arc::new(Config::from_toml(toml).unwrap());
        let err = Upstreams::new(config).unwrap_err().to_string();
        assert!(err.contains("providers.p.api = \"cohere\""), "{err}");
        let toml = toml.replace("cohere", "gemini");
        let config = Arc::new(Config::from_toml(&toml).unwrap());
        let gemini = Upstreams::new(config).unwrap().by_name("p").api();
        assert_eq!(gemini.name(), "gemini");
    }

    fn provider(base: &str) -> Arc<Provider> {
        let toml = format!("[providers.p]\nbase_url = \"{base}\"\n");
        let config = Arc::new(Config::from_toml(&toml).unwrap());
        Upstreams::new(config).unwrap().by_name("p")
    }

    #[test]
    fn path_mapping() {
        let p = provider("https://api.example.com/v1");
        let map = |s: &str| p.target(Some(&s.parse().unwrap())).unwrap().to_string();
        assert_eq!(
            map("/v1/chat/completions"),
            "https://api.example.com/v1/chat/completions"
        );
        assert_eq!(
            map("/chat/completions?x=1"),
            "https://api.example.com/v1/chat/completions?x=1"
        );
        assert_eq!(
            map("/v1/models?limit=2"),
            "https://api.example.com/v1/models?limit=2"
        );
        assert_eq!(map("/v1beta/x"), "https://api.example.com/v1/v1beta/x");
        let root = provider("http://127.0.0.1:9000/");
        assert_eq!(
            root.target(Some(&"/v1/models".parse().unwrap()))
                .unwrap()
                .to_string(),
            "http://127.0.0.1:9000/models"
        );
    }
}

/// The `Host` header for `authority`: its host, and its port unless the
/// scheme's default (as the client writes it when a request has none).
fn host_header(scheme: &Scheme, authority: &Authority) -> HeaderValue {
    let default_port = if *scheme == Scheme::HTTPS { 443 } else { 80 };
    let text = match authority.port() {
        Some(port) if port.as_u16() != default_port => format!("{}:{port}", authority.host()),
        _ => authority.host().to_string(),
    };
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("localhost"))
}

/// Whether `path`, once `%2e`, `%2f` and `%5c` are decoded, has a `.` or
/// `..` segment between `/` or `\\` separators.
fn has_dot_segment(path: &str) -> bool {
    // Most paths have no percent sign or backslash (a model's name, such
    // as `gemini-2.5-pro`, may have dots): their segments are as written.
    if !path.bytes().any(|b| matches!(b, b'%' | b'\\')) {
        return path
            .split('/')
            .any(|segment| segment == "." || segment == "..");
    }
    let lower = path.to_ascii_lowercase();
    let decoded = lower
        .replace("%2e", ".")
        .replace("%2f", "/")
        .replace("%5c", "/")
        .replace('\\', "/");
    decoded
        .split('/')
        .any(|segment| segment == "." || segment == "..")
}

/// Time the upstream took to answer with its response head, set as a
/// response extension for the access log.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamLatency(pub Duration);
