//! The one error of the database adapter: what went wrong with DATABASE_URL, the connection, the
//! route's table or a statement, each with a message that says what to fix (never the password)
//! and, where the server gave one, its SQLSTATE.

use std::fmt::Write as _;

use tokio_postgres::error::SqlState;

/// What the database adapter could not do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// DATABASE_URL cannot be used as written: its form, its `sslmode`, its `sslrootcert`.
    #[error("{0}")]
    Url(String),
    /// The route's table is not as the config says: missing, a column missing, or of a type
    /// that cannot serve.
    #[error(transparent)]
    Table(#[from] super::shape::Misfit),
    /// A row is not as the table's rules want it: its id not unique, its created value NULL.
    #[error("{0}")]
    Row(String),
    /// A statement failed, or the connection could not be made: the message says what was being
    /// done (on a route's table: the table, and what to do) and the server's own words.
    #[error("{message}")]
    Query {
        message: String,
        cause: tokio_postgres::Error,
    },
    /// No connection, and none tried: the last attempt failed a moment ago ([`super::Link`]).
    #[error("the database could not be reached")]
    Unreached,
}

/// A statement failed (the queue's statements): the server's own words.
impl From<tokio_postgres::Error> for Error {
    fn from(cause: tokio_postgres::Error) -> Error {
        let message = describe(&cause);
        Error::Query { message, cause }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A failed statement: what could not be done, then the server's words.
    pub(super) fn query(what: impl std::fmt::Display, cause: tokio_postgres::Error) -> Error {
        let message = format!("{what}: {}", describe(&cause));
        Error::Query { message, cause }
    }

    /// The tokio-postgres error under it, if a statement or the connection failed.
    fn postgres(&self) -> Option<&tokio_postgres::Error> {
        match self {
            Error::Query { cause, .. } => Some(cause),
            _ => None,
        }
    }

    /// The server's SQLSTATE, when the server answered with an error.
    pub fn code(&self) -> Option<&SqlState> {
        self.postgres().and_then(tokio_postgres::Error::code)
    }

    /// Whether the connection has closed under the statement.
    pub fn is_closed(&self) -> bool {
        self.postgres()
            .is_some_and(tokio_postgres::Error::is_closed)
    }

    /// Whether a statement failed for a passing reason, worth making again as it is: the
    /// connection closed or the server ended the session (SQLSTATE classes 08 and 57), a
    /// deadlock or a serialization failure (40), the server short of resources (53), a lock not
    /// available (55P03), or no answer at all — rather than for what it asked (a privilege, a
    /// missing queue). What DATABASE_URL or the table's shape is never passes by itself.
    pub fn transient(&self) -> bool {
        self.postgres()
            .is_some_and(|e| match e.code().map(SqlState::code) {
                Some(code) if !e.is_closed() => {
                    ["08", "57", "40", "53"]
                        .iter()
                        .any(|class| code.starts_with(class))
                        || code == "55P03"
                }
                // Closed, or no answer at all.
                _ => true,
            })
    }
}

/// Whether a statement failed on its data (SQLSTATE class 22): a value given as text is no
/// value of the type it is cast to.
pub(super) fn data_error(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| c.code().starts_with("22"))
}

/// A tokio-postgres error with its causes (its `Display` alone says only "db error"): for a
/// failed statement the server's severity, message, detail and hint.
pub fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let detail = db.detail().map(|d| format!(" ({d})")).unwrap_or_default();
        let hint = db
            .hint()
            .map(|h| format!("; hint: {h}"))
            .unwrap_or_default();
        return format!("{}: {}{detail}{hint}", db.severity(), db.message());
    }
    let mut text = e.to_string();
    for cause in causes(e) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            let _ = write!(text, ": {cause}");
        }
    }
    text
}

/// The errors under `e`, nearest first.
pub(super) fn causes<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(e.source(), |cause| cause.source())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_config_or_the_table_got_wrong_never_passes_by_itself() {
        for e in [
            Error::Url("DATABASE_URL is empty".into()),
            Error::Table(crate::db::Misfit::NoTable(
                "table public.x does not exist".into(),
            )),
            Error::Row("row 1 has no created_at".into()),
        ] {
            assert!(!e.transient(), "{e}");
            assert!(!e.is_closed(), "{e}");
            assert_eq!(e.code(), None, "{e}");
        }
    }
}
