//! The user's database, the one that holds the routes' tables and the queue: connecting to it,
//! reading a route's rows ([`rows`]) and whether row level security lets it see them
//! ([`Visibility`]), and the queue's statements ([`queue`]). Every error is one [`Error`].
//!
//! **Connecting.** `DATABASE_URL` is a libpq connection string, as Supabase shows it; `sslmode`
//! and `sslrootcert` mean what they mean to libpq (`connect.rs` holds the table of the modes).
//! No message ever holds any part of the password.
//!
//! Every statement goes out unprepared (`query_typed`: parse, bind and execute in one round trip,
//! no named statements), so Supabase's transaction-mode pooler (port 6543) works as well as a
//! direct or session-mode connection.
//!
//! Identifiers from the config are always quoted ([`quote_ident`]), so any schema, table or
//! column name works, whatever its case or characters.

mod connect;
mod error;
pub mod queue;
mod rows;
mod shape;
mod visibility;

use std::path::PathBuf;

use connect::ConnectSettings;
pub use connect::{unchecked, Unchecked};
pub use error::{describe, Error, Result};
pub use rows::{Row, RowPages};
pub use shape::{Misfit, MissingColumn};
pub use visibility::{Blind, Filtered, Visibility};

/// A connection to the database that holds the routes' tables and the queue.
pub struct Database {
    client: tokio_postgres::Client,
    /// Drives the connection; it ends by itself once `client` is dropped.
    _connection: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("closed", &self.client.is_closed())
            .finish()
    }
}

impl Database {
    /// Connects to DATABASE_URL (a postgres:// URL or key=value string, e.g. Supabase's),
    /// honouring `sslmode` and `sslrootcert` as libpq does. Errors say what to fix and hold no
    /// part of the password.
    pub async fn connect(database_url: &str) -> Result<Database> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let settings = ConnectSettings::parse(database_url, home.as_deref())?;
        let (client, connection) = match settings.config.connect(settings.connector()?).await {
            Ok(pair) => pair,
            Err(cause) => {
                return Err(Error::Connect {
                    message: settings.connect_error(&cause),
                    cause,
                })
            }
        };
        let connection = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!("the PostgreSQL connection ended: {}", describe(&e));
            }
        });
        Ok(Database {
            client,
            _connection: connection,
        })
    }

    /// The connection, for statements of other modules (the doctor's); unprepared
    /// (`query_typed`) like this module's own, so a transaction-mode pooler works.
    pub fn client(&self) -> &tokio_postgres::Client {
        &self.client
    }

    /// Whether the connection has ended (the server went away, or closed it).
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }
}

/// Why the database could not be reached, as the last attempt found: the text `/readyz` shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unreachable(pub String);

/// Whether the database could be reached, as the last attempt found; for `GET /readyz`.
#[derive(Debug, Default)]
pub struct Reachability {
    last: std::sync::Mutex<Option<std::result::Result<(), Unreachable>>>,
}

impl Reachability {
    pub fn set(&self, result: std::result::Result<(), Unreachable>) {
        *self.last.lock().expect("reachability lock poisoned") = Some(result);
    }

    /// `None` before the first attempt.
    pub fn last(&self) -> Option<std::result::Result<(), Unreachable>> {
        self.last
            .lock()
            .expect("reachability lock poisoned")
            .clone()
    }
}

/// `name` as a PostgreSQL identifier: always quoted, `"` doubled.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `schema.table` as a PostgreSQL relation, each part quoted.
pub fn quote_relation(schema: &str, table: &str) -> String {
    format!("{}.{}", quote_ident(schema), quote_ident(table))
}
