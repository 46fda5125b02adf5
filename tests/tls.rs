//! TLS termination and HTTPS upstreams trusted through `ca_file`.

use crate::common;

use common::Foldgate;
use common::mock::{self, Mock, Recorded};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;

/// A self-signed certificate for `localhost` and 127.0.0.1, written as PEM.
struct SelfSigned {
    dir: tempfile::TempDir,
    cert_pem: String,
    key_pem: String,
}

impl SelfSigned {
    fn new() -> Self {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
            .unwrap();
        let s = Self {
            dir: tempfile::tempdir().unwrap(),
            cert_pem: cert.cert.pem(),
            key_pem: cert.signing_key.serialize_pem(),
        };
        std::fs::write(s.cert_path(), &s.cert_pem).unwrap();
        std::fs::write(s.key_path(), &s.key_pem).unwrap();
        s
    }
    fn cert_path(&self) -> std::path::PathBuf {
        self.dir.path().join("cert.pem")
    }
    fn key_path(&self) -> std::path::PathBuf {
        self.dir.path().join("key.pem")
    }
    fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let certs = vec![CertificateDer::from_pem_slice(self.cert_pem.as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).unwrap();
        let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(cfg))
    }
    fn client_config(&self) -> rustls::ClientConfig {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.cert_pem.as_bytes()).unwrap())
            .unwrap();
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
    }
}

#[tokio::test]
async fn terminates_tls_with_http1_and_h2() {
    let upstream = Mock::echo().await;
    let cert = SelfSigned::new();
    let fg = Foldgate::start(&common::config_for(
        &upstream.url,
        &format!(
            "[server]\ntls_cert = {:?}\ntls_key = {:?}\n",
            cert.cert_path(),
            cert.key_path()
        ),
    ))
    .await;
    assert!(fg.url.starts_with("https://"));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(cert.client_config())
        .https_only()
        .enable_http1()
        .enable_http2()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(connector);
    let url = format!("https://localhost:{}/v1/models", fg.addr.port());
    let resp = client
        .request(Request::get(&url).body(foldgate::body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.version(), http::Version::HTTP_2, "ALPN should pick h2");
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&body).unwrap()["uri"],
        "/v1/models"
    );

    // A plain-HTTP request to the TLS port fails rather than leaking data.
    let plain = common::client()
        .request(
            Request::get(format!("http://{}/v1/models", fg.addr))
                .body(foldgate::body::empty())
                .unwrap(),
        )
        .await;
    assert!(plain.is_err() || plain.unwrap().status() != StatusCode::OK);
}

#[tokio::test]
async fn https_upstream_trusted_through_ca_file() {
    let cert = SelfSigned::new();
    let upstream = Mock::start_with_tls(Some(cert.acceptor()), |r: Recorded| async move {
        mock::json(
            StatusCode::OK,
            &serde_json::json!({"uri": r.uri, "version": format!("{:?}", r.version)}),
        )
    })
    .await;
    let base = format!("https://localhost:{}", upstream.addr.port());
    let fg = Foldgate::start(&format!(
        "[providers.private]\nbase_url = \"{base}/v1\"\nca_file = {:?}\n",
        cert.cert_path()
    ))
    .await;
    let reply = common::send(http::Method::GET, &format!("{}/v1/models", fg.url), &[], "").await;
    reply.assert_ok();
    assert_eq!(reply.json()["uri"], "/v1/models");
    assert_eq!(
        reply.json()["version"],
        "HTTP/2.0",
        "ALPN should negotiate h2 with the upstream"
    );

    // Without the CA the same upstream is untrusted: 502, not a silent pass.
    let untrusted =
        Foldgate::start(&format!("[providers.private]\nbase_url = \"{base}/v1\"\n")).await;
    let reply = common::send(
        http::Method::GET,
        &format!("{}/v1/models", untrusted.url),
        &[],
        "",
    )
    .await;
    reply.assert_envelope(502, "upstream_unreachable");
}
