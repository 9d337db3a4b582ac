//! The user's database, the one that holds the routes' tables and the queue: connecting to it,
//! reading a route's rows ([`rows`]) and whether row level security lets it see them
//! ([`Visibility`]), and the queue's statements ([`queue`]). Every error is one [`Error`].
//!
//! **Connecting.** `DATABASE_URL` is a libpq connection string, as Supabase shows it; `sslmode`
//! and `sslrootcert` mean what they mean to libpq (`connect.rs` holds the table of the modes).
//! No message ever holds any part of the password.
//!
//! Every statement goes out unprepared ([`query`], on `query_typed`: parse, bind and execute in
//! one round trip, no named statements), so Supabase's transaction-mode pooler (port 6543) works as well as a
//! direct or session-mode connection.
//!
//! Identifiers from the config are always quoted ([`quote_ident`]), so any schema, table or
//! column name works, whatever its case or characters.

mod connect;
mod error;
pub mod queue;
mod rows;
mod shape;
pub mod status;
mod visibility;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;

use crate::config::Redacted;
use connect::ConnectSettings;
pub use connect::{unchecked, Unchecked};
pub use error::{describe, Error, Result};
pub use rows::{Row, RowPages};
pub use shape::{Misfit, MissingColumn};
pub use visibility::{Blind, Filtered, Visibility};

/// A connection to the database that holds the routes' tables and the queue.
#[derive(Debug)]
pub struct Database {
    client: tokio_postgres::Client,
}

impl Database {
    /// Connects to DATABASE_URL (a postgres:// URL or key=value string, e.g. Supabase's),
    /// honouring `sslmode` and `sslrootcert` as libpq does. Errors say what to fix and hold no
    /// part of the password.
    pub async fn connect(database_url: &str) -> Result<Database> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let settings = ConnectSettings::parse(database_url, home.as_deref())?;
        let connected = settings.config.connect(settings.connector()?).await;
        let (client, connection) = connected.map_err(|cause| Error::Query {
            message: settings.connect_error(&cause),
            cause,
        })?;
        // Drives the connection; it ends by itself once `client` is dropped.
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!("the PostgreSQL connection ended: {}", describe(&e));
            }
        });
        Ok(Database { client })
    }

    /// The connection, for statements of other modules (the doctor's), made through [`query`]
    /// and [`value`] like this module's own, so a transaction-mode pooler works.
    pub fn client(&self) -> &tokio_postgres::Client {
        &self.client
    }
}

/// Whether the database could be reached, as the last attempt found, and if not why: the text
/// `GET /readyz` shows.
#[derive(Debug, Default)]
pub struct Reachability {
    last: std::sync::Mutex<Option<std::result::Result<(), String>>>,
}

impl Reachability {
    pub fn set(&self, result: std::result::Result<(), String>) {
        *self.last.lock().expect("reachability lock poisoned") = Some(result);
    }

    /// `None` before the first attempt.
    pub fn last(&self) -> Option<std::result::Result<(), String>> {
        self.last
            .lock()
            .expect("reachability lock poisoned")
            .clone()
    }
}

/// One connection to DATABASE_URL, made when first wanted and made again once it has ended or
/// been forgotten; locked while connecting, so that two callers never open two. After a failed
/// attempt, none is made for `backoff`: meanwhile callers fail at once.
pub struct Link {
    url: Redacted,
    backoff: Duration,
    /// Told how each attempt went, and when the connection ends.
    reachability: Arc<Reachability>,
    held: tokio::sync::Mutex<Held>,
}

#[derive(Default)]
struct Held {
    database: Option<Arc<Database>>,
    /// Connections opened so far: any after the first is a reconnection.
    opened: usize,
    /// After a failed attempt: when the next may be made.
    retry_at: Option<Instant>,
}

impl Link {
    pub fn new(url: Redacted, backoff: Duration, reachability: Arc<Reachability>) -> Link {
        Link {
            url,
            backoff,
            reachability,
            held: tokio::sync::Mutex::default(),
        }
    }

    /// The connection, made when there is none (or it ended), and whether it was just made
    /// again after an earlier one.
    pub async fn get(&self) -> Result<(Arc<Database>, bool)> {
        let mut held = self.held.lock().await;
        if let Some(database) = held.database.as_ref().filter(|d| !d.client.is_closed()) {
            return Ok((Arc::clone(database), false));
        }
        held.database = None;
        if held.retry_at.is_some_and(|at| Instant::now() < at) {
            return Err(Error::Unreached);
        }
        let connected = Database::connect(self.url.expose()).await;
        let reached = connected.as_ref().map(drop);
        self.reachability.set(reached.map_err(ToString::to_string));
        held.retry_at = connected.is_err().then(|| Instant::now() + self.backoff);
        let database = Arc::new(connected?);
        held.database = Some(Arc::clone(&database));
        held.opened += 1;
        Ok((database, held.opened > 1))
    }

    /// Forgets the connection (it stopped answering): the next call makes another.
    pub async fn forget(&self) {
        self.held.lock().await.database = None;
    }

    /// After a failed statement: forgets the connection if the connection is what failed.
    pub async fn failed(&self, e: &Error) {
        let mut held = self.held.lock().await;
        if held.database.as_ref().is_some_and(|d| d.client.is_closed()) || e.is_closed() {
            held.database = None;
            let ended = format!("the database connection ended: {e}");
            self.reachability.set(Err(ended));
        }
    }
}

/// A statement's argument and the type PostgreSQL is told it has: statements go out unprepared
/// (`query_typed`), so each argument's type travels with it, and the SQL casts it (`$1::text`).
pub trait Arg: Sync {
    fn typed(&self) -> (&(dyn ToSql + Sync), Type);
}

macro_rules! arg_types {
    ($($rust:ty => $sql:ident),* $(,)?) => {$(
        impl Arg for $rust {
            fn typed(&self) -> (&(dyn ToSql + Sync), Type) {
                (self, Type::$sql)
            }
        }
    )*};
}

arg_types!(
    &str => TEXT, String => TEXT, Option<&str> => TEXT, i32 => INT4, i64 => INT8,
    Option<i64> => INT8, f64 => FLOAT8, u32 => OID, DateTime<Utc> => TIMESTAMPTZ,
    Vec<i32> => INT4_ARRAY, Vec<i64> => INT8_ARRAY, Vec<&str> => TEXT_ARRAY,
    Vec<String> => TEXT_ARRAY,
);

/// Runs one statement, unprepared, so a transaction-mode pooler works: its rows.
pub async fn query(
    client: &Client,
    sql: &str,
    args: &[&dyn Arg],
) -> std::result::Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    let args: Vec<_> = args.iter().map(|a| a.typed()).collect();
    client.query_typed(sql, &args).await
}

/// The first column of a statement's first row, if it gave one (and it is not NULL).
pub async fn value<T: tokio_postgres::types::FromSqlOwned>(
    client: &Client,
    sql: &str,
    args: &[&dyn Arg],
) -> std::result::Result<Option<T>, tokio_postgres::Error> {
    let rows = query(client, sql, args).await?;
    Ok(rows.first().and_then(|r| r.get::<_, Option<T>>(0)))
}

/// `name` as a PostgreSQL identifier: always quoted, `"` doubled.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `schema.table` as a PostgreSQL relation, each part quoted.
pub fn quote_relation(schema: &str, table: &str) -> String {
    format!("{}.{}", quote_ident(schema), quote_ident(table))
}
