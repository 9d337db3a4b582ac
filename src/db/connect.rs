//! DATABASE_URL read the way libpq reads it, so that a Supabase connection string works pasted as
//! is: a `postgres://` / `postgresql://` URL or `key=value` pairs. tokio-postgres parses
//! everything but what it does not know — `sslmode`'s `allow` and `verify-*`, any case, and
//! `sslrootcert` — which is taken out of the string first and applied with rustls, by the rules
//! of [`MODES`].
//!
//! `sslrootcert` is a PEM (or DER) file of the CA to trust, e.g. Supabase's, whose server
//! certificates chain to its own CA; `sslrootcert=system` trusts the public CAs (Mozilla's list)
//! and, as in libpq, needs `verify-full` (the default with it). `verify-*` without `sslrootcert`
//! uses `~/.postgresql/root.crt` when it exists, like libpq, and otherwise is refused with what to
//! add. Unlike libpq, `prefer` falls back to plain TCP only when the server offers no TLS, not
//! after a failed handshake; the `PGSSLMODE`/`PGSSLROOTCERT` environment variables are not read.
//!
//! No message holds any part of the password: each is built from parsed fields other than the
//! password (the hosts, the mode, the CA file, the name of a key tokio-postgres does not know),
//! never from the text of the URL; and a URL whose password would be misread (an unencoded
//! `# / ?` or a second `@` before the host) is refused with the fix alone.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::error::causes;
use super::{describe, Error, Result};

/// What one `sslmode` does: a row of [`MODES`].
#[derive(Debug, PartialEq, Eq)]
pub(super) struct SslRule {
    name: &'static str,
    /// Plain TCP (then no certificate is checked), TLS when the server offers it, or TLS or
    /// nothing.
    tls: SslMode,
    /// Whether the server's certificate must chain to a trusted CA whether or not
    /// `sslrootcert` names the CAs (otherwise only when it does).
    verify: bool,
    /// Whether the certificate must also name the host connected to.
    host: bool,
}

/// libpq's `sslmode`s: the one table of what each encrypts and checks.
#[rustfmt::skip]
const MODES: [SslRule; 6] = [
    SslRule { name: "disable",     tls: SslMode::Disable, verify: false, host: false },
    SslRule { name: "allow",       tls: SslMode::Prefer,  verify: false, host: false },
    SslRule { name: "prefer",      tls: SslMode::Prefer,  verify: false, host: false },
    SslRule { name: "require",     tls: SslMode::Require, verify: false, host: false },
    SslRule { name: "verify-ca",   tls: SslMode::Require, verify: true,  host: false },
    SslRule { name: "verify-full", tls: SslMode::Require, verify: true,  host: true },
];

/// The CAs a certificate is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Roots {
    /// A PEM (or DER) file: `sslrootcert=PATH`.
    File(PathBuf),
    /// The public CAs: `sslrootcert=system`.
    System,
}

/// DATABASE_URL, parsed: tokio-postgres's settings and the TLS its `sslmode` asks for.
#[derive(Debug)]
pub(super) struct ConnectSettings {
    /// With `ssl_mode` set from `mode`.
    pub(super) config: tokio_postgres::Config,
    pub(super) mode: &'static SslRule,
    /// The CAs the chain is checked against; `None`: the certificate is not checked.
    pub(super) roots: Option<Roots>,
}

/// How to spell a connection string, for messages.
const URL_FORMS: &str = "postgres://USER:PASSWORD@HOST:PORT/DATABASE, or key=value pairs \
    (Supabase: Project Settings → Database → Connection string)";

/// How to write a password that a URL would misread. It names no encoded character as `%XX`,
/// so that it holds no three characters of any encoded password.
const ENCODE_PASSWORD: &str = "percent-encode each of @ # / ? : in the password as a % sign \
    followed by the character's hex code (@ is 40, # 23, / 2F, ? 3F, : 3A), as Python's \
    urllib.parse.quote(password, safe='') does; or give DATABASE_URL as key=value pairs, where \
    the password needs no encoding: host=HOST port=5432 user=USER password='PASSWORD' \
    dbname=DATABASE";

/// Where Supabase's CA certificate is downloaded, for messages.
const SUPABASE_CA: &str =
    "Supabase: Project Settings → Database → SSL configuration → download the certificate";

impl ConnectSettings {
    /// Parses a connection string; `home` is where libpq's `~/.postgresql/root.crt` would be.
    pub(super) fn parse(database_url: &str, home: Option<&Path>) -> Result<ConnectSettings> {
        let url = database_url.trim();
        let refused = |what: &str| Error::Url(format!("DATABASE_URL {what}: use {URL_FORMS}"));
        let lower = url.to_ascii_lowercase();
        if url.is_empty() {
            return Err(refused("is empty"));
        }
        if lower.starts_with("http://") || lower.starts_with("https://") {
            return Err(refused("is a web address, not a database connection string (a Supabase project's API URL?)"));
        }
        let (rest, sslmode, sslrootcert) = split(url)?;
        let mut config: tokio_postgres::Config = rest.parse().map_err(|e| {
            Error::Url(format!(
                "DATABASE_URL is not a PostgreSQL connection string ({}): use {URL_FORMS}",
                describe(&e)
            ))
        })?;
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            return Err(refused("names no host"));
        }
        let roots = match sslrootcert.as_deref().map(str::trim) {
            None | Some("") => None,
            Some("system") => Some(Roots::System),
            Some(path) => Some(Roots::File(PathBuf::from(path))),
        };
        let name = match sslmode.map(|m| m.trim().to_ascii_lowercase()) {
            Some(name) => name,
            None if roots == Some(Roots::System) => "verify-full".to_owned(),
            None => "prefer".to_owned(),
        };
        let Some(mode) = MODES.iter().find(|m| m.name == name) else {
            return Err(unknown_mode(&name));
        };
        if roots == Some(Roots::System) && !mode.host {
            return Err(Error::Url(format!(
                "DATABASE_URL: sslrootcert=system trusts every public CA, so it needs \
                 sslmode=verify-full (which checks the host name too), not sslmode={name}"
            )));
        }
        let roots = match (mode.tls, roots) {
            (SslMode::Disable, _) => None,
            // libpq's default CA file, when it exists.
            (_, None) if mode.verify => Some(Roots::File(
                home.map(|h| h.join(".postgresql").join("root.crt"))
                    .filter(|f| f.is_file())
                    .ok_or_else(|| Error::Url(format!(
                        "DATABASE_URL: sslmode={name} checks the server's certificate against a CA, but no \
                         sslrootcert was given (nor is there ~/.postgresql/root.crt): add \
                         sslrootcert=/path/to/ca.pem ({SUPABASE_CA}), or sslrootcert=system for a \
                         server with a certificate from a public CA, or use sslmode=require to \
                         encrypt without checking"
                    )))?,
            )),
            (_, roots) => roots,
        };
        config.ssl_mode(mode.tls);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(30));
        }
        if config.get_application_name().is_none() {
            config.application_name("rowbranch");
        }
        Ok(ConnectSettings {
            config,
            mode,
            roots,
        })
    }

    /// The TLS connector: the CAs read, and the certificate checked as the mode says.
    pub(super) fn connector(&self) -> Result<MakeRustlsConnect> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = self.roots.as_ref().map(|roots| {
            WebPkiServerVerifier::builder_with_provider(root_store(roots)?, provider.clone())
                .build()
                .map_err(|e| Error::Url(format!("DATABASE_URL: sslrootcert cannot be used: {e}")))
        });
        let chain = chain.transpose()?;
        let verifier = Arc::new(Verifier {
            chain,
            host: self.mode.host,
            signatures: provider.signature_verification_algorithms,
        });
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Url(format!("TLS cannot be set up for DATABASE_URL: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        // PostgreSQL 17's ALPN name: required for sslnegotiation=direct, harmless otherwise.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(MakeRustlsConnect::new(config))
    }

    /// A connection failure: where, why, and what to do about it.
    pub(super) fn connect_error(&self, e: &tokio_postgres::Error) -> String {
        let ports = self.config.get_ports();
        let hosts = (self.config.get_hosts().iter().enumerate()).map(|(n, host)| match host {
            Host::Tcp(name) => {
                format!("{name}:{}", ports.get(n).or(ports.first()).unwrap_or(&5432))
            }
            #[cfg(unix)]
            Host::Unix(path) => path.display().to_string(),
        });
        let at = match hosts.collect::<Vec<_>>().join(", ") {
            none if none.is_empty() => "the given address".to_owned(),
            hosts => hosts,
        };
        let cause = describe(e);
        let message = format!("could not connect to PostgreSQL at {at} (DATABASE_URL): {cause}");
        let certificate = causes(e).find_map(|cause| {
            // rustls's error reaches tokio-postgres inside an io::Error, whose `source` skips it.
            let cause: &(dyn std::error::Error + 'static) =
                match cause.downcast_ref::<std::io::Error>() {
                    Some(io) => io.get_ref()?,
                    None => cause,
                };
            match cause.downcast_ref() {
                Some(rustls::Error::InvalidCertificate(certificate)) => Some(certificate),
                _ => None,
            }
        });
        let hint = match (certificate, &self.roots) {
            (Some(CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }), _) => {
                "the server's certificate is not issued for that host name: connect by the name on \
                 the certificate, or use sslmode=verify-ca to check the chain only".to_owned()
            }
            (Some(_), Some(Roots::File(path))) => format!(
                "the server's certificate was not accepted with the CA in sslrootcert={}: is it the \
                 right CA file ({SUPABASE_CA})?",
                path.display()
            ),
            (Some(_), _) => "the server's certificate is not signed by a public CA: give its CA as \
                 sslrootcert=/path/to/ca.pem".to_owned(),
            (None, _) if cause.contains("server does not support TLS") => {
                "this sslmode needs TLS, which the server does not offer: use sslmode=prefer or \
                 sslmode=disable for a server without TLS".to_owned()
            }
            (None, _) if cause.contains("password authentication failed") => {
                format!("check the user and password in DATABASE_URL (in a URL, {ENCODE_PASSWORD})")
            }
            (None, _) => return message,
        };
        format!("{message}; {hint}")
    }
}

/// An `sslmode` no row of [`MODES`] has. The value is shown only when it reads as a mistyped
/// mode, never a pasted secret.
fn unknown_mode(name: &str) -> Error {
    let mistyped = name.len() <= 12
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b"-_".contains(&b));
    let shown = if mistyped {
        format!("sslmode={name:?}")
    } else {
        "its sslmode".to_owned()
    };
    Error::Url(format!(
        "DATABASE_URL: {shown} is not a mode PostgreSQL knows: use disable, prefer, require, \
         verify-ca or verify-full (Supabase: sslmode=verify-full with \
         sslrootcert=/path/to/the-project-ca.crt, or sslmode=require)"
    ))
}

/// The connection string without `sslmode` and `sslrootcert`, and their values. A URL's query is
/// split at `&`; `key=value` pairs are read as tokio-postgres reads them and written back quoted.
fn split(url: &str) -> Result<(String, Option<String>, Option<String>)> {
    let (mut sslmode, mut sslrootcert) = (None, None);
    // Whether the pair is one of those two, and so taken out.
    let mut take = |key: &str, value: String| {
        let slot = match key {
            "sslmode" => &mut sslmode,
            "sslrootcert" => &mut sslrootcert,
            _ => return false,
        };
        *slot = Some(value);
        true
    };
    let rest = if let Some(body) = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
    {
        // tokio-postgres ends the credentials at the first `@`, then the hosts at `/` or `?`.
        let (credentials, hosts) = body.split_once('@').unwrap_or(("", body));
        let hosts = hosts.split(['/', '?']).next().unwrap_or_default();
        if credentials.contains(['#', '/', '?']) || hosts.contains('@') {
            return Err(Error::Url(format!(
                "DATABASE_URL would be misread: a character of its password ends the password \
                 early, and the rest would be taken for the host or the database; \
                 {ENCODE_PASSWORD}"
            )));
        }
        // With no `?` among the credentials and the hosts, the first is the query's.
        let Some((base, query)) = url.split_once('?') else {
            return Ok((url.to_owned(), None, None));
        };
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        let kept: Vec<&str> = query
            .split('&')
            .filter(|pair| {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                !take(&decode(key), decode(value))
            })
            .collect();
        if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        }
    } else {
        // Text that does not read goes to tokio-postgres whole, for its error.
        let Some(pairs) = key_values(url) else {
            return Ok((url.to_owned(), None, None));
        };
        let kept: Vec<String> = pairs
            .into_iter()
            .filter(|(key, value)| !take(key, value.clone()))
            .map(|(key, value)| {
                let value = value.replace('\\', "\\\\").replace('\'', "\\'");
                format!("{key}='{value}'")
            })
            .collect();
        kept.join(" ")
    };
    Ok((rest, sslmode, sslrootcert))
}

/// The `key = value` pairs of a libpq keyword/value string, as tokio-postgres reads them: a value
/// bare or in single quotes, `\` escaping the next character. `None` when the text is not one.
fn key_values(text: &str) -> Option<Vec<(String, String)>> {
    let mut chars = text.chars().peekable();
    let mut pairs = Vec::new();
    let spaces = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
    };
    loop {
        spaces(&mut chars);
        if chars.peek().is_none() {
            return Some(pairs);
        }
        let key: String =
            std::iter::from_fn(|| chars.next_if(|c| !c.is_whitespace() && *c != '=')).collect();
        spaces(&mut chars);
        chars.next_if_eq(&'=')?;
        spaces(&mut chars);
        let quoted = chars.next_if_eq(&'\'').is_some();
        let mut value = String::new();
        loop {
            match chars.next() {
                None if quoted => return None,
                Some('\'') if quoted => break,
                None => break,
                Some(c) if !quoted && c.is_whitespace() => break,
                Some('\\') => value.extend(chars.next()),
                Some(c) => value.push(c),
            }
        }
        if key.is_empty() || (!quoted && value.is_empty()) {
            return None;
        }
        pairs.push((key, value));
    }
}

/// The trusted CAs: Mozilla's list, or the certificates of a PEM (or DER) file.
fn root_store(roots: &Roots) -> Result<Arc<RootCertStore>> {
    let Roots::File(path) = roots else {
        let roots = webpki_roots::TLS_SERVER_ROOTS.to_vec();
        return Ok(Arc::new(RootCertStore { roots }));
    };
    let shown = path.display();
    let bytes = std::fs::read(path).map_err(|e| {
        Error::Url(format!(
            "DATABASE_URL: sslrootcert={shown} cannot be read: {e}"
        ))
    })?;
    let mut certificates: Vec<_> = CertificateDer::pem_slice_iter(&bytes).flatten().collect();
    if certificates.is_empty() && bytes.first() == Some(&0x30) {
        // One DER certificate (an ASN.1 SEQUENCE), as some CA downloads are.
        certificates.push(CertificateDer::from(bytes));
    }
    let mut store = RootCertStore::empty();
    if store.add_parsable_certificates(certificates).0 == 0 {
        return Err(Error::Url(format!(
            "DATABASE_URL: sslrootcert={shown} holds no certificate that can be a CA (expected PEM: \
             -----BEGIN CERTIFICATE-----, or DER)"
        )));
    }
    Ok(Arc::new(store))
}

/// The certificate check of every mode: none without a `chain` verifier (`require` and `prefer`
/// without a CA: encrypted, any certificate taken), the chain only (`verify-ca`), or the chain
/// and the host name (`verify-full`). The handshake's signatures are always checked.
#[derive(Debug)]
struct Verifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
    host: bool,
    signatures: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        // webpki checks the name last: a name error means the chain was good.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.host => Ok(ServerCertVerified::assertion()),
            verified => verified,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.signatures)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.signatures)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.signatures.supported_schemes()
    }
}

/// A server on another machine reached without its certificate checked: spec §2's warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unchecked {
    /// The first host that is not this machine.
    pub host: String,
    /// `sslmode` (`prefer` when it is not written).
    pub sslmode: &'static str,
    /// What that mode does.
    pub exposure: &'static str,
}

/// How DATABASE_URL reaches a server on another machine, when that is without a checked
/// certificate: `sslmode` other than `verify-full` or `verify-ca` (or `require` with an
/// `sslrootcert`, which checks the chain as `verify-ca` does). Without both encryption and a
/// checked certificate, whoever sits on the path can pose as the database. `None` for a string
/// that does not parse: connecting says what is wrong with it.
pub fn unchecked(database_url: &str) -> Option<Unchecked> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let settings = ConnectSettings::parse(database_url, home.as_deref()).ok()?;
    let exposure = match settings.mode.tls {
        SslMode::Disable => "it sends everything unencrypted",
        SslMode::Prefer => {
            "it falls back to an unencrypted connection whenever the server, or whoever sits in \
             between, offers no TLS"
        }
        _ if settings.roots.is_none() => {
            "it encrypts, but takes any certificate, so whoever sits in between can pose as the server"
        }
        _ => return None,
    };
    // A `hostaddr` is where libpq connects, its `host` then only the name on the certificate: a
    // tunnel's local end is this machine.
    let (hosts, addresses) = (settings.config.get_hosts(), settings.config.get_hostaddrs());
    let host = (0..hosts.len().max(addresses.len())).find_map(|n| {
        let host = match (addresses.get(n), hosts.get(n)) {
            (Some(address), _) => address.to_string(),
            (None, Some(Host::Tcp(name))) => name.clone(),
            _ => return None,
        };
        let bare = host.trim_matches(['[', ']']).to_ascii_lowercase();
        let local = bare == "localhost"
            || bare.ends_with(".localhost")
            || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
        (!local).then_some(host)
    })?;
    Some(Unchecked {
        host,
        sslmode: settings.mode.name,
        exposure,
    })
}

#[cfg(test)]
mod tests {
    use super::super::Database;
    use super::*;

    const PASSWORD: &str = "Zq8-unusual-Passw0rd";

    fn parse(url: &str) -> Result<ConnectSettings> {
        ConnectSettings::parse(url, None)
    }

    /// The error parsing gives, as it would print; `None` when the string parses.
    fn refused(url: &str) -> Option<String> {
        parse(url).err().map(|e| e.to_string())
    }

    /// The mode and the CAs the chain is checked against.
    fn tls(url: &str) -> (&'static str, Option<Roots>) {
        match parse(url) {
            Ok(settings) => (settings.mode.name, settings.roots),
            Err(e) => panic!("{url}: {e}"),
        }
    }

    fn file(path: &str) -> Option<Roots> {
        Some(Roots::File(PathBuf::from(path)))
    }

    #[test]
    fn each_url_form_gives_its_tls_mode() {
        let base = format!("postgres://postgres.abc:{PASSWORD}@db.example.com:6543/postgres");
        let cases = [
            (base.clone(), ("prefer", None)),
            (format!("{base}?sslmode=disable"), ("disable", None)),
            (format!("{base}?sslmode=prefer"), ("prefer", None)),
            (format!("{base}?sslmode=allow"), ("allow", None)),
            (format!("{base}?sslmode=require"), ("require", None)),
            (format!("{base}?sslmode=REQUIRE"), ("require", None)),
            (
                format!("{base}?sslmode=require&sslrootcert=/etc/ca.pem"),
                ("require", file("/etc/ca.pem")),
            ),
            (
                format!("{base}?sslrootcert=/etc/ca.pem"),
                ("prefer", file("/etc/ca.pem")),
            ),
            (
                format!("{base}?sslmode=verify-ca&sslrootcert=%2Fetc%2Fmy%20ca.pem"),
                ("verify-ca", file("/etc/my ca.pem")),
            ),
            (
                format!("{base}?connect_timeout=5&sslrootcert=ca.pem&sslmode=verify-full"),
                ("verify-full", file("ca.pem")),
            ),
            (
                format!("{base}?sslrootcert=system"),
                ("verify-full", Some(Roots::System)),
            ),
            (
                format!("postgresql://u:{PASSWORD}@h/db?sslmode=disable&sslrootcert=/x.pem"),
                ("disable", None),
            ),
            (
                format!(
                    "host=db.example.com port=5432 user=postgres password='{PASSWORD}' \
                     dbname=postgres sslmode=verify-full sslrootcert='/etc/my ca.pem'"
                ),
                ("verify-full", file("/etc/my ca.pem")),
            ),
            (
                "host=h sslmode = require sslrootcert=/a\\ b.pem".to_owned(),
                ("require", file("/a b.pem")),
            ),
            ("host=h user=u".to_owned(), ("prefer", None)),
        ];
        for (url, expected) in cases {
            assert_eq!(tls(&url), expected, "{url}");
        }
        // What tokio-postgres does with the socket, from the same table.
        for (mode, socket) in [
            ("disable", SslMode::Disable),
            ("allow", SslMode::Prefer),
            ("verify-ca", SslMode::Require),
        ] {
            let settings = parse(&format!(
                "postgres://h/db?sslmode={mode}&sslrootcert=/ca.pem"
            ))
            .unwrap();
            assert_eq!(settings.config.get_ssl_mode(), socket, "{mode}");
        }
    }

    #[test]
    fn a_bad_sslmode_is_a_clear_error() {
        for url in [
            format!("postgres://u:{PASSWORD}@h/db?sslmode=verify_full"),
            format!("host=h password={PASSWORD} sslmode=verify_full"),
        ] {
            let err = refused(&url).expect("a bad sslmode is refused");
            assert!(err.contains("sslmode=\"verify_full\""), "{err}");
            assert!(err.contains("verify-full"), "{err}");
            assert!(!err.contains(PASSWORD), "{err}");
        }
    }

    #[test]
    fn verification_without_a_ca_says_what_to_add() {
        let err = refused("postgres://u@h/db?sslmode=verify-full").unwrap();
        assert!(err.contains("sslrootcert"), "{err}");
        let err = refused("postgres://u@h/db?sslmode=verify-ca").unwrap();
        assert!(err.contains("sslrootcert"), "{err}");
        let err = refused("postgres://u@h/db?sslmode=require&sslrootcert=system").unwrap();
        assert!(err.contains("verify-full"), "{err}");

        // libpq's default CA file, when it exists.
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join(".postgresql")).unwrap();
        let default = home.path().join(".postgresql").join("root.crt");
        std::fs::write(&default, "x").unwrap();
        let settings =
            ConnectSettings::parse("postgres://u@h/db?sslmode=verify-ca", Some(home.path()))
                .unwrap();
        assert_eq!(
            (settings.mode.name, settings.roots),
            ("verify-ca", Some(Roots::File(default)))
        );
    }

    #[test]
    fn tokio_postgres_gets_the_rest_and_the_mode() {
        let settings = parse(&format!(
            "postgres://postgres.abc:{PASSWORD}@db.example.com:6543/postgres?sslmode=verify-full&sslrootcert=/ca.pem&application_name=x"
        ))
        .unwrap();
        assert_eq!(settings.config.get_ssl_mode(), SslMode::Require);
        assert_eq!(settings.config.get_user(), Some("postgres.abc"));
        assert_eq!(settings.config.get_password(), Some(PASSWORD.as_bytes()));
        assert_eq!(settings.config.get_dbname(), Some("postgres"));
        assert_eq!(settings.config.get_ports(), &[6543]);
        assert_eq!(settings.config.get_application_name(), Some("x"));

        // A `''` is no escape in libpq: this is `'it'` then `'s …`, which does not read.
        assert!(parse(
            "host=localhost user=me password='it''s \\'quoted\\'' sslmode=disable dbname=d"
        )
        .is_err());

        let settings = parse(
            "host=localhost user=me password='it\\'s spaced' sslmode=prefer dbname=d sslrootcert=/r.pem",
        )
        .unwrap();
        assert_eq!(
            settings.config.get_password(),
            Some("it's spaced".as_bytes())
        );
        assert_eq!(settings.config.get_dbname(), Some("d"));
        assert_eq!(settings.config.get_ssl_mode(), SslMode::Prefer);
        assert_eq!(settings.config.get_application_name(), Some("rowbranch"));

        let settings = parse("postgres://h/db?sslmode=disable").unwrap();
        assert_eq!(settings.config.get_ssl_mode(), SslMode::Disable);
    }

    #[test]
    fn the_password_never_appears_in_an_error() {
        let urls = [
            format!("postgres://user:{PASSWORD}@host:notaport/db"),
            format!("postgres://user:{PASSWORD}@host/db?nosuchoption=1"),
            format!("postgres://user:{PASSWORD}@host/db?sslmode={PASSWORD}"),
            format!("postgres://user@host/db?password={PASSWORD}&port=x"),
            format!("host=h password={PASSWORD} nosuchoption=1"),
            format!("host=h password='{PASSWORD}' port=x"),
            format!("host=h password={PASSWORD} sslmode=verify-full"),
            format!("user=u password={PASSWORD}"),
        ];
        for url in urls {
            let err = refused(&url).unwrap_or_else(|| panic!("{url} parsed"));
            assert!(!err.contains(PASSWORD), "{url}: {err}");
        }
        let err = refused("postgres://user:p%40ss%3Aword@h:x/db").unwrap();
        assert!(
            !err.contains("p@ss:word") && !err.contains("p%40ss"),
            "{err}"
        );
    }

    #[test]
    fn a_password_the_url_would_misread_gets_the_fix_alone() {
        for password in ["QxZ7Kw@VbN4Jy", "Xy7#kP@q2", "ab/cd@ef", "pq?rs", "a#b"] {
            let url = format!("postgres://rb:{password}@127.0.0.1:5432/app");
            let err = refused(&url).unwrap_or_else(|| panic!("{url} parsed"));
            assert!(err.contains("percent-encode each of @ # / ? :"), "{err}");
            assert!(unchecked(&url).is_none(), "{url}");
            let chars: Vec<char> = password.chars().collect();
            for window in chars.windows(3) {
                let window: String = window.iter().collect();
                assert!(
                    !err.contains(&window),
                    "{window:?} of {password:?} in {err}"
                );
            }
        }
        // A colon reads as part of the password, as in libpq; encoded characters read as such.
        for url in [
            "postgres://rb:a:b@h/app",
            "postgres://rb:Xy7%23kP%40q2@h/app",
        ] {
            assert!(parse(url).is_ok(), "{url}");
        }
    }

    #[test]
    fn other_mistakes_are_named() {
        let err = refused("https://abc.supabase.co").unwrap();
        assert!(err.contains("web address"), "{err}");
        let err = refused("").unwrap();
        assert!(err.contains("empty"), "{err}");
        let err = refused("postgres://h/db?nosuchoption=1").unwrap();
        assert!(err.contains("nosuchoption"), "{err}");
        let err = refused("dbname=x").unwrap();
        assert!(err.contains("no host"), "{err}");
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_named() {
        let connector = |url: &str| parse(url).unwrap().connector().err().map(|e| e.to_string());
        let err = connector("postgres://h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem")
            .unwrap();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("ca.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let err = connector(&format!(
            "postgres://h/db?sslmode=verify-ca&sslrootcert={}",
            junk.display()
        ))
        .unwrap();
        assert!(err.contains("no certificate"), "{err}");
        // System roots load.
        assert_eq!(connector("postgres://h/db?sslrootcert=system"), None);
    }

    #[tokio::test]
    async fn a_refused_connection_names_the_host_not_the_password() {
        // Port 1 on the loopback: nothing listens there.
        let err = Database::connect(&format!("postgres://u:{PASSWORD}@127.0.0.1:1/db"))
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("127.0.0.1:1"), "{err}");
        assert!(!err.contains(PASSWORD), "{err}");
    }

    #[test]
    fn a_remote_server_without_a_checked_certificate_is_named_with_its_mode() {
        let remote = "postgres://u:p@db.abc.supabase.co:5432/postgres";
        let found = unchecked(remote).unwrap();
        assert_eq!(found.host, "db.abc.supabase.co");
        assert_eq!(found.sslmode, "prefer");
        assert!(found.exposure.contains("falls back"));
        for (mode, says) in [
            ("require", "takes any certificate"),
            ("disable", "unencrypted"),
        ] {
            let found = unchecked(&format!("{remote}?sslmode={mode}")).unwrap();
            assert_eq!(found.sslmode, mode);
            assert!(found.exposure.contains(says), "{mode}: {}", found.exposure);
        }
        let pairs = "host=10.0.0.7 user=u dbname=x sslmode=Require";
        assert_eq!(unchecked(pairs).unwrap().sslmode, "require");
    }

    #[test]
    fn a_checked_certificate_or_this_machine_is_fine() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "").unwrap();
        let ca = ca.display();
        for url in [
            format!("postgres://u@db.example.com/x?sslmode=verify-full&sslrootcert={ca}"),
            format!("postgres://u@db.example.com/x?sslmode=verify-ca&sslrootcert={ca}"),
            format!("postgres://u@db.example.com/x?sslmode=require&sslrootcert={ca}"),
            "postgres://u@db.example.com/x?sslrootcert=system".to_owned(),
            "postgres://u@localhost/x?sslmode=disable".to_owned(),
            "postgres://u@127.0.0.1:5432/x".to_owned(),
            "postgres://u@[::1]:5432/x?sslmode=require".to_owned(),
            "host=/var/run/postgresql user=u dbname=x".to_owned(),
            "host=db.example.com hostaddr=127.0.0.1 user=u dbname=x".to_owned(),
        ] {
            assert_eq!(unchecked(&url), None, "{url}");
        }
    }
}
