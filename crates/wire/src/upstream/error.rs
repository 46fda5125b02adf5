//! Why the upstream clients could not be built at start-up; each message
//! names the configuration key at fault.

use std::path::PathBuf;

/// A provider whose client cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// A provider's `api` names no API foldgate speaks.
    #[error("providers.{name}.api = {api:?} is not an API foldgate speaks (one of: {known})")]
    UnknownApi {
        name: String,
        api: String,
        known: String,
    },
    /// The CA file could not be read as PEM certificates.
    #[error("ca_file {}: {source}", path.display())]
    CaFile {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    /// The CA file holds no certificate.
    #[error("ca_file {}: no certificate found", path.display())]
    NoCertificate { path: PathBuf },
    /// A certificate of the CA file was refused.
    #[error("ca_file {}: {source}", path.display())]
    BadCertificate {
        path: PathBuf,
        source: rustls::Error,
    },
    /// TLS could not be set up.
    #[error(transparent)]
    Tls(#[from] rustls::Error),
    /// `providers.<name>.base_url` is not a URI.
    #[error("providers.{name}.base_url: {source}")]
    BaseUrl {
        name: String,
        source: http::uri::InvalidUri,
    },
    /// `providers.<name>.base_url` has no host.
    #[error("providers.{name}.base_url has no host")]
    NoHost { name: String },
    /// No provider is configured (validation should have said so first).
    #[error("no provider configured")]
    NoProvider,
    /// A provider's signer could not be made (its message starts with
    /// the key at fault, `aws.region: …`).
    #[error("providers.{name}.{detail}")]
    Signer { name: String, detail: String },
    /// A provider's own client (its `ca_file`) could not be built.
    #[error("providers.{name}.{source}")]
    Provider {
        name: String,
        source: Box<UpstreamError>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_provider_key() {
        let e = UpstreamError::Provider {
            name: "local".into(),
            source: Box::new(UpstreamError::NoCertificate {
                path: "/etc/ca.pem".into(),
            }),
        };
        assert_eq!(
            e.to_string(),
            "providers.local.ca_file /etc/ca.pem: no certificate found"
        );
        let e = UpstreamError::NoHost { name: "p".into() };
        assert_eq!(e.to_string(), "providers.p.base_url has no host");
    }
}
