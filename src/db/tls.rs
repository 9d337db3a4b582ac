//! TLS as `sslmode` and `sslrootcert` ask for it, the way libpq reads them: the settings, the
//! connector with its trusted CAs, and the certificate verifiers for `require`/`prefer` and
//! `verify-ca`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{Error, Result};

/// What `sslmode` and `sslrootcert` ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Tls {
    /// `sslmode=disable`: plain TCP.
    Off,
    /// TLS; when not `required` (`prefer`), plain TCP if the server offers no TLS.
    On { required: bool, verify: Verify },
}

/// What is checked of the server's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verify {
    /// Nothing: encrypted, but anyone in the middle could present any certificate.
    Nothing,
    /// That it chains to one of the roots.
    Chain(Roots),
    /// That it chains to one of the roots and names the host connected to.
    ChainAndHost(Roots),
}

/// The CAs trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Roots {
    /// A PEM (or DER) file: `sslrootcert=PATH`.
    File(PathBuf),
    /// The public CAs: `sslrootcert=system`.
    System,
}

/// The TLS settings `sslmode` and `sslrootcert` ask for, as libpq reads them.
pub(super) fn tls_settings(
    sslmode: Option<&str>,
    sslrootcert: Option<&str>,
    home: Option<&Path>,
) -> Result<Tls> {
    let roots = match sslrootcert.map(str::trim).filter(|r| !r.is_empty()) {
        None => None,
        Some("system") => Some(Roots::System),
        Some(path) => Some(Roots::File(PathBuf::from(path))),
    };
    let mode = match sslmode.map(|m| m.trim().to_ascii_lowercase()) {
        Some(mode) => mode,
        None if roots == Some(Roots::System) => "verify-full".to_owned(),
        None => "prefer".to_owned(),
    };
    let known = [
        "disable",
        "allow",
        "prefer",
        "require",
        "verify-ca",
        "verify-full",
    ];
    if !known.contains(&mode.as_str()) {
        return Err(Error::Url(format!(
            "DATABASE_URL: sslmode={mode:?} is not a mode PostgreSQL knows: use disable, prefer, \
             require, verify-ca or verify-full (Supabase: sslmode=verify-full with \
             sslrootcert=/path/to/the-project-ca.crt, or sslmode=require)"
        )));
    }
    if roots == Some(Roots::System) && mode != "verify-full" {
        return Err(Error::Url(format!(
            "DATABASE_URL: sslrootcert=system trusts every public CA, so it needs \
             sslmode=verify-full (which checks the host name too), not sslmode={mode}"
        )));
    }
    // verify-* without sslrootcert: libpq's default file, when it exists.
    let required_roots = |mode: &str| -> Result<Roots> {
        if let Some(roots) = &roots {
            return Ok(roots.clone());
        }
        if let Some(default) = home.map(|h| h.join(".postgresql").join("root.crt")) {
            if default.is_file() {
                return Ok(Roots::File(default));
            }
        }
        Err(Error::Url(format!(
            "DATABASE_URL: sslmode={mode} checks the server's certificate against a CA, but no \
             sslrootcert was given (nor is there ~/.postgresql/root.crt): add \
             sslrootcert=/path/to/ca.pem (Supabase: Project Settings → Database → SSL \
             configuration → download the certificate), or sslrootcert=system for a server with \
             a certificate from a public CA, or use sslmode=require to encrypt without checking"
        )))
    };
    let optional = roots.clone().map_or(Verify::Nothing, Verify::Chain);
    Ok(match mode.as_str() {
        "disable" => Tls::Off,
        "allow" | "prefer" => Tls::On {
            required: false,
            verify: optional,
        },
        "require" => Tls::On {
            required: true,
            verify: optional,
        },
        "verify-ca" => Tls::On {
            required: true,
            verify: Verify::Chain(required_roots(&mode)?),
        },
        _ => Tls::On {
            required: true,
            verify: Verify::ChainAndHost(required_roots(&mode)?),
        },
    })
}

/// The TLS connector for `tls`: reads the root certificates.
pub(super) fn connector(tls: &Tls) -> Result<MakeRustlsConnect> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(format!("TLS setup failed: {e}")))?;
    let verify = match tls {
        // Never used: tokio-postgres does not ask for TLS with sslmode=disable.
        Tls::Off => &Verify::Nothing,
        Tls::On { verify, .. } => verify,
    };
    let mut config = match verify {
        Verify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
            .with_no_client_auth(),
        Verify::Chain(roots) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly {
                roots: Arc::new(load_roots(roots)?),
                provider,
            }))
            .with_no_client_auth(),
        Verify::ChainAndHost(roots) => builder
            .with_root_certificates(load_roots(roots)?)
            .with_no_client_auth(),
    };
    // PostgreSQL 17's ALPN name: required for sslnegotiation=direct, harmless otherwise.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(MakeRustlsConnect::new(config))
}

/// The trusted CAs: Mozilla's list, or the certificates of a PEM (or DER) file.
///
/// Each error holds its cause's text rather than the cause, so that it reads whole wherever it
/// is shown.
fn load_roots(roots: &Roots) -> Result<RootCertStore> {
    let path = match roots {
        Roots::System => {
            return Ok(RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            })
        }
        Roots::File(path) => path,
    };
    let shown = path.display();
    let bytes = std::fs::read(path).map_err(|e| {
        Error::Url(format!(
            "DATABASE_URL: sslrootcert={shown} cannot be read: {e}"
        ))
    })?;
    let mut certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| {
            Error::Url(format!(
                "DATABASE_URL: sslrootcert={shown} is not a PEM file: {e}"
            ))
        })?;
    if certificates.is_empty() && bytes.first() == Some(&0x30) {
        // One DER certificate (an ASN.1 SEQUENCE), as some CA downloads are.
        certificates.push(CertificateDer::from(bytes.clone()));
    }
    if certificates.is_empty() {
        return Err(Error::Url(format!(
            "DATABASE_URL: sslrootcert={shown} holds no certificate (expected PEM: -----BEGIN \
             CERTIFICATE-----)"
        )));
    }
    let mut store = RootCertStore::empty();
    for certificate in certificates {
        store.add(certificate).map_err(|e| {
            Error::Url(format!(
                "DATABASE_URL: sslrootcert={shown} holds a certificate that cannot be a CA: {e}"
            ))
        })?;
    }
    Ok(store)
}

/// libpq's `require` and `prefer` without a CA: encrypt, but accept any certificate. The
/// handshake's signatures are still checked (against the presented certificate).
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// libpq's `verify-ca` (and `require` with a CA): the certificate must chain to a trusted root,
/// for whatever host name.
#[derive(Debug)]
struct ChainOnly {
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let certificate = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &certificate,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verify_full(roots: Roots) -> Tls {
        Tls::On {
            required: true,
            verify: Verify::ChainAndHost(roots),
        }
    }

    fn error(tls: &Tls) -> String {
        format!(
            "{:#}",
            connector(tls).err().expect("the connector is refused")
        )
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let err = error(&verify_full(Roots::File("/nonexistent/ca.pem".into())));
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("ca.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let err = error(&Tls::On {
            required: true,
            verify: Verify::Chain(Roots::File(junk)),
        });
        assert!(err.contains("no certificate"), "{err}");
        // System roots load.
        assert!(connector(&verify_full(Roots::System)).is_ok());
    }
}
