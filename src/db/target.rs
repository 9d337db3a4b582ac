//! DATABASE_URL: a connection string parsed into tokio-postgres's settings and the TLS it asks
//! for, and connection errors that say what to fix without the password.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use tokio_postgres::config::{Host, SslMode};

use super::split::split_ssl_options;
use super::tls::{tls_settings, Roots, Tls, Verify};
use super::{describe, Error, Result};

/// A parsed DATABASE_URL.
pub(super) struct Target {
    /// tokio-postgres's settings, with `ssl_mode` set from [`Tls`].
    pub(super) config: tokio_postgres::Config,
    pub(super) tls: Tls,
    /// The password as written (and decoded), kept out of every message.
    pub(super) secrets: Vec<String>,
}

/// How to spell a connection string, for messages.
const URL_FORMS: &str = "postgres://USER:PASSWORD@HOST:PORT/DATABASE, or key=value pairs \
    (Supabase: Project Settings → Database → Connection string)";

impl Target {
    /// Parses a connection string; `home` is where libpq's `~/.postgresql/root.crt` would be.
    pub(super) fn parse(database_url: &str, home: Option<&Path>) -> Result<Target> {
        let url = database_url.trim();
        if url.is_empty() {
            return Err(Error::Url(format!(
                "DATABASE_URL is empty: set it to the database's connection string, {URL_FORMS}"
            )));
        }
        let lower = url.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            return Err(Error::Url(format!(
                "DATABASE_URL is a web address, not a database connection string (a Supabase \
                 project's API URL?): use {URL_FORMS}"
            )));
        }
        let split = split_ssl_options(url);
        let secrets = split.secrets;
        let redacted = |message: String| Error::Url(redact(&message, &secrets));
        let mut config: tokio_postgres::Config = split.rest.parse().map_err(|e| {
            redacted(format!(
                "DATABASE_URL is not a PostgreSQL connection string ({}): use {URL_FORMS}",
                describe(&e)
            ))
        })?;
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            return Err(Error::Url(format!(
                "DATABASE_URL names no host: use {URL_FORMS}"
            )));
        }
        let tls = tls_settings(split.sslmode.as_deref(), split.sslrootcert.as_deref(), home)
            .map_err(|e| redacted(e.to_string()))?;
        config.ssl_mode(match &tls {
            Tls::Off => SslMode::Disable,
            Tls::On {
                required: false, ..
            } => SslMode::Prefer,
            Tls::On { required: true, .. } => SslMode::Require,
        });
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(30));
        }
        if config.get_application_name().is_none() {
            config.application_name("rowbranch");
        }
        Ok(Target {
            config,
            tls,
            secrets,
        })
    }

    /// A connection failure, with what to do about it, without the password.
    pub(super) fn connect_error(&self, e: &tokio_postgres::Error) -> String {
        let hosts: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(n, host)| {
                let port = self
                    .config
                    .get_ports()
                    .get(n)
                    .or(self.config.get_ports().first())
                    .copied()
                    .unwrap_or(5432);
                match host {
                    Host::Tcp(name) => format!("{name}:{port}"),
                    #[cfg(unix)]
                    Host::Unix(path) => format!("{}", path.display()),
                }
            })
            .collect();
        let cause = describe(e);
        let mut message = format!(
            "could not connect to PostgreSQL at {} (DATABASE_URL): {cause}",
            if hosts.is_empty() {
                "the given address".to_owned()
            } else {
                hosts.join(", ")
            }
        );
        let roots = match &self.tls {
            Tls::On {
                verify: Verify::Chain(roots) | Verify::ChainAndHost(roots),
                ..
            } => Some(roots),
            _ => None,
        };
        let certificate = certificate_error(e);
        let hint = if matches!(
            certificate,
            Some(
                rustls::CertificateError::NotValidForName
                    | rustls::CertificateError::NotValidForNameContext { .. }
            )
        ) {
            Some(
                "the server's certificate is not issued for that host name: connect by the name \
                 on the certificate, or use sslmode=verify-ca to check the chain only"
                    .to_owned(),
            )
        } else if certificate.is_some() {
            Some(match roots {
                Some(Roots::File(path)) => format!(
                    "the server's certificate was not accepted with the CA in sslrootcert={}: is \
                     it the right CA file (Supabase: Project Settings → Database → SSL \
                     configuration → download the certificate)?",
                    path.display()
                ),
                Some(Roots::System) => "the server's certificate is not signed by a public CA: \
                     give its CA as sslrootcert=/path/to/ca.pem"
                    .to_owned(),
                None => "the server's certificate was refused".to_owned(),
            })
        } else if cause.contains("server does not support TLS") {
            Some(
                "this sslmode needs TLS, which the server does not offer: use sslmode=prefer or \
                 sslmode=disable for a server without TLS"
                    .to_owned(),
            )
        } else if cause.contains("password authentication failed") {
            Some(
                "check the user and password in DATABASE_URL (in a URL, percent-encode special \
                 characters of the password: @ as %40, : as %3A, / as %2F)"
                    .to_owned(),
            )
        } else {
            None
        };
        if let Some(hint) = hint {
            let _ = write!(message, "; {hint}");
        }
        redact(&message, &self.secrets)
    }
}

/// The certificate problem under a failed TLS handshake, if that is what failed.
fn certificate_error(e: &tokio_postgres::Error) -> Option<&rustls::CertificateError> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(error) = source {
        // rustls's error reaches tokio-postgres inside an io::Error.
        let inner = match error.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => Some(error),
        };
        if let Some(rustls::Error::InvalidCertificate(certificate)) =
            inner.and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(certificate);
        }
        source = error.source();
    }
    None
}

/// `message` with every occurrence of each secret replaced.
fn redact(message: &str, secrets: &[String]) -> String {
    let mut message = message.to_owned();
    for secret in secrets {
        if !secret.is_empty() {
            message = message.replace(secret.as_str(), "[password]");
        }
    }
    message
}

#[cfg(test)]
mod tests {
    use super::super::Database;
    use super::*;

    const PASSWORD: &str = "Zq8-unusual-Passw0rd";

    /// Parses as the binary does.
    fn parse(url: &str) -> Result<Target> {
        Target::parse(url, None)
    }

    /// The error parsing gives, as it would print; `None` when the string parses.
    fn refused(url: &str) -> Option<String> {
        parse(url).err().map(|e| e.to_string())
    }

    fn tls(url: &str) -> Tls {
        match parse(url) {
            Ok(target) => target.tls,
            Err(e) => panic!("{url}: {e}"),
        }
    }

    fn file(path: &str) -> Roots {
        Roots::File(std::path::PathBuf::from(path))
    }

    #[test]
    fn each_url_form_gives_its_tls_mode() {
        let base = format!("postgres://postgres.abc:{PASSWORD}@db.example.com:6543/postgres");
        let unverified = |required| Tls::On {
            required,
            verify: Verify::Nothing,
        };
        let cases = [
            (base.clone(), unverified(false)),
            (format!("{base}?sslmode=disable"), Tls::Off),
            (format!("{base}?sslmode=prefer"), unverified(false)),
            (format!("{base}?sslmode=allow"), unverified(false)),
            (format!("{base}?sslmode=require"), unverified(true)),
            (format!("{base}?sslmode=REQUIRE"), unverified(true)),
            (
                format!("{base}?sslmode=require&sslrootcert=/etc/ca.pem"),
                Tls::On {
                    required: true,
                    verify: Verify::Chain(file("/etc/ca.pem")),
                },
            ),
            (
                format!("{base}?sslrootcert=/etc/ca.pem"),
                Tls::On {
                    required: false,
                    verify: Verify::Chain(file("/etc/ca.pem")),
                },
            ),
            (
                format!("{base}?sslmode=verify-ca&sslrootcert=%2Fetc%2Fmy%20ca.pem"),
                Tls::On {
                    required: true,
                    verify: Verify::Chain(file("/etc/my ca.pem")),
                },
            ),
            (
                format!("{base}?connect_timeout=5&sslrootcert=ca.pem&sslmode=verify-full"),
                Tls::On {
                    required: true,
                    verify: Verify::ChainAndHost(file("ca.pem")),
                },
            ),
            (
                format!("{base}?sslrootcert=system"),
                Tls::On {
                    required: true,
                    verify: Verify::ChainAndHost(Roots::System),
                },
            ),
            (
                format!("postgresql://u:{PASSWORD}@h/db?sslmode=disable&sslrootcert=/x.pem"),
                Tls::Off,
            ),
            (
                format!(
                    "host=db.example.com port=5432 user=postgres password='{PASSWORD}' \
                     dbname=postgres sslmode=verify-full sslrootcert='/etc/my ca.pem'"
                ),
                Tls::On {
                    required: true,
                    verify: Verify::ChainAndHost(file("/etc/my ca.pem")),
                },
            ),
            (
                "host=h sslmode = require sslrootcert=/a\\ b.pem".to_owned(),
                Tls::On {
                    required: true,
                    verify: Verify::Chain(file("/a b.pem")),
                },
            ),
            ("host=h user=u".to_owned(), unverified(false)),
        ];
        for (url, expected) in cases {
            assert_eq!(tls(&url), expected, "{url}");
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
        let target =
            Target::parse("postgres://u@h/db?sslmode=verify-ca", Some(home.path())).unwrap();
        assert_eq!(
            target.tls,
            Tls::On {
                required: true,
                verify: Verify::Chain(Roots::File(default))
            }
        );
    }

    #[test]
    fn tokio_postgres_gets_the_rest_and_the_mode() {
        let target = parse(&format!(
            "postgres://postgres.abc:{PASSWORD}@db.example.com:6543/postgres?sslmode=verify-full&sslrootcert=/ca.pem&application_name=x"
        ))
        .unwrap();
        assert_eq!(target.config.get_ssl_mode(), SslMode::Require);
        assert_eq!(target.config.get_user(), Some("postgres.abc"));
        assert_eq!(target.config.get_password(), Some(PASSWORD.as_bytes()));
        assert_eq!(target.config.get_dbname(), Some("postgres"));
        assert_eq!(target.config.get_ports(), &[6543]);
        assert_eq!(target.config.get_application_name(), Some("x"));

        let target =
            parse("host=localhost user=me password='it''s \\'quoted\\'' sslmode=disable dbname=d");
        // A `''` is no escape in libpq: this is `'it'` then `'s …`, which does not read.
        assert!(target.is_err());

        let target = parse(
            "host=localhost user=me password='it\\'s spaced' sslmode=prefer dbname=d sslrootcert=/r.pem",
        )
        .unwrap();
        assert_eq!(target.config.get_password(), Some("it's spaced".as_bytes()));
        assert_eq!(target.config.get_dbname(), Some("d"));
        assert_eq!(target.config.get_ssl_mode(), SslMode::Prefer);
        assert_eq!(target.config.get_application_name(), Some("rowbranch"));
        assert!(target.secrets.contains(&"it's spaced".to_owned()));

        assert_eq!(
            parse("postgres://h/db?sslmode=disable")
                .unwrap()
                .config
                .get_ssl_mode(),
            SslMode::Disable
        );
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
        assert_eq!(
            redact(&format!("a {PASSWORD} b"), &[PASSWORD.to_owned()]),
            "a [password] b"
        );
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
}
