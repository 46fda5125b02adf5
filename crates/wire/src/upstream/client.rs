//! The pooled HTTP(S) client: hyper-util's legacy client over hyper-rustls,
//! HTTP/1.1 and HTTP/2 by ALPN, webpki roots plus an optional private CA.

use super::UpstreamError;
use crate::body::Body;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::RootCertStore;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The client type every provider uses.
pub type HttpClient = Client<HttpsConnector<HttpConnector>, Body>;

/// Builds a pooled client trusting webpki roots and, when given, the PEM
/// certificates in `ca_file`.
pub fn build(
    ca_file: Option<&Path>,
    connect_timeout: Duration,
) -> Result<HttpClient, UpstreamError> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect())
            .map_err(|source| UpstreamError::CaFile {
                path: path.to_path_buf(),
                source,
            })?;
        if certs.is_empty() {
            return Err(UpstreamError::NoCertificate {
                path: path.to_path_buf(),
            });
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|source| UpstreamError::BadCertificate {
                    path: path.to_path_buf(),
                    source,
                })?;
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();

    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .build(https))
}
