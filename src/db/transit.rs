//! Whether DATABASE_URL protects its connection in transit when the server is on another
//! machine: encrypted, and the server's certificate checked. Without both, whoever sits on the
//! path can pose as the database — read what rowbranch reads, and hand it rows and queue
//! messages of their own, which become work.

use std::net::IpAddr;
use std::path::PathBuf;

use tokio_postgres::config::Host;

use super::split::split_ssl_options;
use super::target::Target;
use super::tls::{Tls, Verify};

/// A server on another machine reached without its certificate checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unchecked {
    /// The first host that is not this machine.
    pub host: String,
    /// `sslmode` as written, or `prefer` when it is not.
    pub sslmode: String,
    /// What that mode does.
    pub exposure: &'static str,
}

/// How DATABASE_URL reaches a server on another machine, when that is without a checked
/// certificate: `sslmode` other than `verify-full` or `verify-ca` (or `require` with an
/// `sslrootcert`, which checks the chain as `verify-ca` does). `None` for a string that does
/// not parse: connecting says what is wrong with it.
pub fn unchecked(database_url: &str) -> Option<Unchecked> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let target = Target::parse(database_url, home.as_deref()).ok()?;
    let host = remote_host(&target.config)?;
    let exposure = match &target.tls {
        Tls::Off => "it sends everything unencrypted",
        Tls::On {
            required: false, ..
        } => {
            "it falls back to an unencrypted connection whenever the server, or whoever sits in \
             between, offers no TLS"
        }
        Tls::On {
            verify: Verify::Nothing,
            ..
        } => "it encrypts, but takes any certificate, so whoever sits in between can pose as the server",
        Tls::On { .. } => return None,
    };
    let sslmode = split_ssl_options(database_url.trim())
        .sslmode
        .map_or_else(|| "prefer".to_owned(), |m| m.trim().to_ascii_lowercase());
    Some(Unchecked {
        host,
        sslmode,
        exposure,
    })
}

/// The first host of `config` that is not this machine (a Unix socket, `localhost`, a loopback
/// address). A `hostaddr` is where libpq connects, its `host` then only the name on the
/// certificate: a tunnel's local end is this machine.
fn remote_host(config: &tokio_postgres::Config) -> Option<String> {
    let (hosts, addresses) = (config.get_hosts(), config.get_hostaddrs());
    (0..hosts.len().max(addresses.len())).find_map(|n| {
        let host = match (addresses.get(n), hosts.get(n)) {
            (Some(address), _) => address.to_string(),
            (None, Some(Host::Tcp(name))) => name.clone(),
            #[cfg(unix)]
            (None, Some(Host::Unix(_))) => return None,
            (None, None) => return None,
        };
        (!loopback(&host)).then_some(host)
    })
}

fn loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.to_ascii_lowercase().ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

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
