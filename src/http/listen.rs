//! The listener and how many connections it may serve: the socket bound with a backlog of
//! [`LISTEN_BACKLOG`] on the config's `listen` (with errors that name the setting to change),
//! and the connection cap — `max_connections`, or fewer when the process's open-files limit
//! less a reserve for what is not a served connection is lower.

use std::collections::BTreeSet;
use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

use crate::config::{Config, ForgeSettings, ListenHost, ListenOrigin};

/// Connections beyond the connection cap wait in the listen backlog; `TcpListener::bind`
/// would ask for 128, a flood of idle sockets fills that, and then a delivery cannot even
/// connect until they are cut.
const LISTEN_BACKLOG: u32 = 1024;
/// File descriptors kept for the process itself whatever the config: the standard streams,
/// the listener, the runtime's own, the log, DNS lookups, a git or `on_dispatch` process or two.
const BASE_RESERVE: u64 = 32;
/// For the local forge, which runs git (two pipes a command) and `on_dispatch` per row.
const LOCAL_FORGE_RESERVE: u64 = 16;
/// For each job that holds a PostgreSQL connection (the queue's consumer, the scheduled
/// sweep): its connection, and the next one while it reconnects.
const DATABASE_RESERVE: u64 = 2;

/// Why the server could not listen, or has no room to serve.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// The address could not be bound; `fix` names the setting to change (empty for a free
    /// port, which no setting chose). The cause is part of the message, before the fix.
    #[error("could not listen on {addr}: {cause}{fix}")]
    Bind {
        addr: SocketAddr,
        cause: io::Error,
        fix: String,
    },
    /// The host name of the listen address does not resolve: the config's to fix.
    #[error("{setting}: the host name `{host}` does not resolve ({cause}): use a name this machine resolves, or an address such as 127.0.0.1:{port} or 0.0.0.0:{port}")]
    Resolve {
        /// The setting as written: `ROWBRANCH_LISTEN=`…``, or `listen = "…"` in its file.
        setting: String,
        host: String,
        port: u16,
        cause: io::Error,
    },
    #[error(
        "the open-files limit ({limit}) leaves no room for connections beyond the {reserve} \
         file descriptors kept for GitHub, git and the database: raise it (`ulimit -n`, \
         LimitNOFILE=) or lower [github] max_concurrent_requests"
    )]
    NoRoomForConnections { limit: u64, reserve: u64 },
}

/// How many connections to serve at once for `config` under the open-files limit `open_files`
/// (`None`: unlimited): `max_connections`, or the limit less the reserve when that is lower;
/// logged with what it was made from. An error when the limit leaves no room beyond the
/// reserve.
pub fn connection_cap(config: &Config, open_files: Option<u64>) -> Result<usize, ListenError> {
    let reserve = reserve(config);
    let max = config.webhook.max_connections;
    let cap = match open_files {
        None => max,
        Some(limit) => match usize::try_from(limit.saturating_sub(reserve)) {
            Ok(0) => return Err(ListenError::NoRoomForConnections { limit, reserve }),
            Ok(room) => max.min(room),
            Err(_) => max,
        },
    };
    tracing::info!(
        connections = cap,
        max_connections = max,
        open_files_limit = open_files.map_or_else(|| "unlimited".to_owned(), |l| l.to_string()),
        reserve,
        "serving at most this many connections at once"
    );
    Ok(cap)
}

/// File descriptors kept back from the open-files limit for what is not a served connection:
/// [`BASE_RESERVE`]; the forge's connections (GitHub: `max_concurrent_requests` for each
/// installation — at most one per account owning a route's repository — and as many again for
/// the App's own requests; with a token, `max_concurrent_requests` once); and
/// [`DATABASE_RESERVE`] for each job that reads the database.
fn reserve(config: &Config) -> u64 {
    let forge = match &config.forge {
        ForgeSettings::Github(github) => {
            let concurrent = github.max_concurrent_requests as u64;
            let owners: BTreeSet<String> = (config.routes.iter())
                .map(|route| route.repo.owner().to_ascii_lowercase())
                .collect();
            match github.token() {
                Some(_) => concurrent,
                None => concurrent.saturating_mul(owners.len() as u64 + 1),
            }
        }
        ForgeSettings::Local(_) => LOCAL_FORGE_RESERVE,
    };
    let database_jobs = match config.database_url {
        Some(_) => {
            u64::from(config.reads_the_queue()) + u64::from(config.reconcile.every.is_some())
        }
        None => 0,
    };
    BASE_RESERVE
        .saturating_add(forge)
        .saturating_add(database_jobs * DATABASE_RESERVE)
}

/// A listener on the config's `listen` — the address, or the first address its host name
/// resolves to that can be bound (as `TcpListener::bind` tries them) — or, with `free_port`,
/// on a port of 127.0.0.1 the system picks. A refusal names the setting that chose the
/// address, to change.
pub async fn listen(config: &Config, free_port: bool) -> Result<TcpListener, ListenError> {
    let at = &config.listen;
    let addrs = match &at.host {
        _ if free_port => vec![SocketAddr::from(([127, 0, 0, 1], 0))],
        ListenHost::Ip(ip) => vec![SocketAddr::new(*ip, at.port)],
        ListenHost::Name(name) => {
            let found = tokio::net::lookup_host((name.as_str(), at.port))
                .await
                .map(Iterator::collect::<Vec<SocketAddr>>);
            match found {
                Ok(found) if !found.is_empty() => found,
                failed => {
                    return Err(ListenError::Resolve {
                        setting: match at.origin {
                            ListenOrigin::File => {
                                format!("{}: listen = \"{at}\"", config.source.display())
                            }
                            origin => format!("{origin}=`{at}`"),
                        },
                        host: name.clone(),
                        port: at.port,
                        cause: failed.err().unwrap_or_else(|| {
                            io::Error::new(io::ErrorKind::NotFound, "no address")
                        }),
                    })
                }
            }
        }
    };
    let mut last = None;
    for addr in addrs {
        match bind(addr) {
            Ok(listener) => return Ok(listener),
            Err(cause) => last = Some((addr, cause)),
        }
    }
    let (addr, cause) = last.expect("at least one address was tried");
    let change = match at.origin {
        ListenOrigin::Listen => format!("set {} to a free HOST:PORT", ListenOrigin::Listen),
        ListenOrigin::Port => format!(
            "set {} to a free port ({} wins over it)",
            ListenOrigin::Port,
            ListenOrigin::Listen
        ),
        ListenOrigin::File => format!(
            "change listen in {} to a free HOST:PORT (or set {})",
            config.source.display(),
            ListenOrigin::Listen
        ),
    };
    // A free port is no setting's choice: nothing to change.
    let fix = match cause.kind() {
        _ if free_port => String::new(),
        io::ErrorKind::AddrInUse => {
            format!("; another process is listening there: stop it, or {change}")
        }
        _ => format!("; {change}"),
    };
    Err(ListenError::Bind { addr, cause, fix })
}

/// A listener on `addr` with a backlog of [`LISTEN_BACKLOG`].
fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As `TcpListener::bind` does: a restart need not wait out the old sockets' TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn config(text: &str, env: &[(&str, &str)]) -> Config {
        let env = |key: &str| {
            env.iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (*v).to_owned())
        };
        Config::parse(text, Path::new("/etc/rowbranch/rowbranch.toml"), &env).unwrap()
    }

    fn github(routes: &[&str], extra: &str) -> String {
        let mut text = format!("[github]\napp_id = 1\nprivate_key_path = \"app.pem\"\n{extra}\n");
        for (n, repo) in routes.iter().enumerate() {
            text.push_str(&format!(
                "[[routes]]\ntable = \"t{n}\"\nrepo = \"{repo}\"\nbranch_prefix = \"b\"\nevent_type = \"e\"\n"
            ));
        }
        text
    }

    #[test]
    fn the_reserve_grows_with_the_concurrent_requests_and_the_installations() {
        // One installation and the App's own requests, 16 each: 32 + 32.
        assert_eq!(reserve(&config(&github(&["acme/app"], ""), &[])), 64);
        // Three accounts (two repositories of acme share its installation): 32 + 16 × 4.
        let three = github(&["acme/app", "acme/web", "Globex/api", "initech/ops"], "");
        assert_eq!(reserve(&config(&three, &[])), 96);
        let wide = github(&["acme/app", "globex/api"], "max_concurrent_requests = 50");
        assert_eq!(reserve(&config(&wide, &[])), 32 + 50 * 3);
    }

    #[test]
    fn the_reserve_counts_the_jobs_that_hold_a_database_connection() {
        let url = [("DATABASE_URL", "postgres://u@db/x")];
        let sweeping = github(&["acme/app"], "");
        let sweeping = format!("reconcile_every = \"5m\"\n{sweeping}");
        assert_eq!(reserve(&config(&sweeping, &url)), 64 + 2);
        // Without DATABASE_URL the sweep does not run.
        assert_eq!(reserve(&config(&sweeping, &[])), 64);
        // With DATABASE_URL the sweep is on unless the config turns it off.
        let local = crate::config::TEST_LOCAL_CONFIG;
        assert_eq!(reserve(&config(local, &url)), 32 + 16 + 2);
        let off = format!("reconcile_every = \"off\"\n{local}");
        assert_eq!(reserve(&config(&off, &url)), 32 + 16);
    }

    #[test]
    fn the_cap_never_exceeds_the_limit_less_the_reserve() {
        // The reserve of one GitHub installation is 64; of four accounts, 96.
        let one = config(&github(&["acme/app"], ""), &[]);
        let four = config(&github(&["acme/app", "globex/api", "initech/ops"], ""), &[]);
        let cap = connection_cap;
        assert_eq!(cap(&one, None).unwrap(), 512);
        assert_eq!(cap(&one, Some(1 << 20)).unwrap(), 512);
        assert_eq!(cap(&one, Some(256)).unwrap(), 192);
        assert_eq!(cap(&four, Some(100)).unwrap(), 4);
        let three = config(
            &github(&["acme/app"], "")
                .replace("[github]", "[webhook]\nmax_connections = 3\n[github]"),
            &[],
        );
        assert_eq!(cap(&three, Some(100)).unwrap(), 3);
        let none = cap(&four, Some(96)).unwrap_err().to_string();
        assert!(none.contains("(96)") && none.contains("ulimit"), "{none}");
        assert!(cap(&four, Some(20)).is_err());
    }
}
