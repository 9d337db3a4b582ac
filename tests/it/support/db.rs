//! The one way a test gets PostgreSQL: `DATABASE_URL` (`eval "$(scripts/test-postgres.sh)"`
//! starts a throwaway server and exports it, with the template databases pgmq is installed in),
//! a database or a schema of the test's own that is dropped when the test ends, passed or not,
//! and the quoting the tests write SQL with, kept apart from the code under test.
//!
//! Without `DATABASE_URL` (or the template a test needs) the test says why and passes, except
//! under `CI=true`, where it fails.

use std::future::Future;
use std::ops::Deref;
use std::str::FromStr;

use tokio_postgres::types::FromSqlOwned;
use tokio_postgres::{Client, Config, NoTls, Row};

use super::random::random_hex;

const HINT: &str = "run `eval \"$(scripts/test-postgres.sh)\"` first: it starts a throwaway \
                    PostgreSQL with pgmq installed both ways";

/// The two ways pgmq is installed, each in its template database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Install {
    Sql,
    Extension,
}

impl Install {
    pub const BOTH: [Install; 2] = [Install::Sql, Install::Extension];

    fn variable(self) -> &'static str {
        match self {
            Install::Sql => "PGMQ_SQL_TEMPLATE",
            Install::Extension => "PGMQ_EXTENSION_TEMPLATE",
        }
    }
}

/// What a test's database is copied from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Template {
    /// PostgreSQL's default: an empty database.
    Plain,
    /// The template database with pgmq installed this way.
    Pgmq(Install),
    /// `template0`, on a server that has this template (and so pgmq's files, for `create
    /// extension`).
    WithoutPgmq(Install),
}

impl Template {
    fn install(self) -> Option<Install> {
        match self {
            Template::Plain => None,
            Template::Pgmq(install) | Template::WithoutPgmq(install) => Some(install),
        }
    }
}

/// The value of `name` unless it is unset or blank; otherwise `None` after saying why the test
/// is skipped, or under `CI=true` a panic.
fn required(name: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => Some(value),
        _ if std::env::var("CI").is_ok_and(|ci| ci == "true") => {
            panic!("{name} is not set, and CI=true: the PostgreSQL tests must run; {HINT}")
        }
        _ => {
            eprintln!("skipping a PostgreSQL test: {name} is not set; {HINT}");
            None
        }
    }
}

/// `DATABASE_URL`, or `None` after saying why the test is skipped; under `CI=true`, a panic.
pub fn database_url() -> Option<String> {
    required("DATABASE_URL")
}

/// `DATABASE_URL`, parsed.
pub fn admin_config(url: &str) -> Config {
    Config::from_str(url)
        .unwrap_or_else(|e| panic!("DATABASE_URL is not a PostgreSQL connection string: {e}"))
}

pub async fn connect(config: &Config) -> Client {
    let (client, connection) = config
        .connect(NoTls)
        .await
        .unwrap_or_else(|e| panic!("could not connect to the test PostgreSQL (DATABASE_URL): {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// `name` as a PostgreSQL quoted identifier; written here independently of the code under test.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `text` as a standard string literal.
pub fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The database's error message, with its detail, for assertions and panics.
pub fn db_message(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.detail().unwrap_or_default()),
        None => error.to_string(),
    }
}

/// The one value `sql` selects, which must succeed.
pub async fn scalar<T: FromSqlOwned>(client: &Client, sql: &str) -> T {
    client
        .query_one(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", db_message(&e)))
        .get(0)
}

/// Every row `sql` selects, which must succeed.
pub async fn rows(client: &Client, sql: &str) -> Vec<Row> {
    client
        .query(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", db_message(&e)))
}

/// The first column of every row `sql` selects, which must succeed.
pub async fn column<T: FromSqlOwned>(client: &Client, sql: &str) -> Vec<T> {
    rows(client, sql)
        .await
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Runs `sql`, which must succeed.
pub async fn execute(client: &Client, sql: &str) {
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", db_message(&e)));
}

/// A test's own database. Dropping it drops the database and every role named after it
/// ([`TestDb::role`]).
pub struct TestDb {
    pub client: Client,
    /// A connection string for this database: `DATABASE_URL` with the database replaced.
    pub url: String,
    /// The database's name.
    pub name: String,
    /// Unique to this database: in its name and in those of its roles.
    pub tag: String,
    /// How the database got pgmq, if it has it.
    pub install: Option<Install>,
    admin: Config,
}

impl TestDb {
    /// A new database copied from `template`, or `None` (after saying why) when `DATABASE_URL`
    /// or the template is not there; under `CI=true`, a panic.
    pub async fn create(template: Template) -> Option<TestDb> {
        let url = database_url()?;
        let from = match template {
            Template::Plain => String::new(),
            Template::Pgmq(install) => {
                format!(" template {}", ident(&required(install.variable())?))
            }
            Template::WithoutPgmq(install) => {
                required(install.variable())?;
                " template template0".to_owned()
            }
        };
        let admin = admin_config(&url);
        let tag = random_hex(4);
        let name = format!("rowbranch_test_{tag}");
        connect(&admin)
            .await
            .batch_execute(&format!("create database {}{from}", ident(&name)))
            .await
            .unwrap_or_else(|e| panic!("could not create the test database {name}{from}: {e}"));
        let mut config = admin.clone();
        config.dbname(&name);
        Some(TestDb {
            client: connect(&config).await,
            url: with_database(&url, &name),
            name,
            tag,
            install: template.install(),
            admin,
        })
    }

    /// Runs `sql`, which must succeed.
    pub async fn execute(&self, sql: &str) {
        execute(&self.client, sql).await;
    }

    /// A role name that is the test's own, `rb_{tag}_{name}`: dropped with the database.
    pub fn role(&self, name: &str) -> String {
        format!("rb_{}_{name}", self.tag)
    }
}

/// The database's client, as a pooled connection derefs to its connection.
impl Deref for TestDb {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin, name, roles) = (self.admin.clone(), self.name.clone(), self.role(""));
        clean_up(move || async move {
            let admin = connect(&admin).await;
            let drop_database = format!("drop database if exists {} with (force)", ident(&name));
            admin
                .batch_execute(&drop_database)
                .await
                .map_err(|e| format!("could not drop the test database {name}: {e}"))?;
            let roles = admin
                .query(
                    "select rolname::text from pg_roles where starts_with(rolname, $1)",
                    &[&roles],
                )
                .await
                .map_err(|e| format!("could not list the test's roles: {e}"))?;
            for role in roles {
                let role: String = role.get(0);
                admin
                    .batch_execute(&format!("drop role {}", ident(&role)))
                    .await
                    .map_err(|e| format!("could not drop the test role {role}: {e}"))?;
            }
            Ok(())
        });
    }
}

/// A test's own schema in the `DATABASE_URL` database; dropped with everything in it when the
/// value is dropped, as [`TestDb`] is.
pub struct TestSchema {
    pub client: Client,
    /// `DATABASE_URL`.
    pub url: String,
    /// The schema's name.
    pub name: String,
}

impl TestSchema {
    /// A new schema named `{prefix}{random}`, or `None` (after saying why) without
    /// `DATABASE_URL`; under `CI=true`, a panic.
    pub async fn create(prefix: &str) -> Option<TestSchema> {
        let url = database_url()?;
        let name = format!("{prefix}{}", random_hex(6));
        let client = connect(&admin_config(&url)).await;
        client
            .batch_execute(&format!("create schema {}", ident(&name)))
            .await
            .unwrap_or_else(|e| panic!("could not create the test schema {name}: {e}"));
        Some(TestSchema { client, url, name })
    }

    /// `"schema"."name"`.
    pub fn table(&self, name: &str) -> String {
        format!("{}.{}", ident(&self.name), ident(name))
    }

    /// Runs `sql`, which must succeed.
    pub async fn execute(&self, sql: &str) {
        execute(&self.client, sql).await;
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        clean_up(move || async move {
            connect(&admin_config(&url))
                .await
                .batch_execute(&format!("drop schema {} cascade", ident(&name)))
                .await
                .map_err(|e| format!("could not drop the test schema {name}: {e}"))
        });
    }
}

/// Runs `cleanup` to its end on a thread and a runtime of its own: a value is dropped where its
/// test's runtime may be gone, or unwinding a panic. A failed cleanup fails a test that passed; a
/// failing test keeps its own panic.
fn clean_up<F, Fut>(cleanup: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), String>>,
{
    let outcome = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the cleanup")
            .block_on(cleanup())
    })
    .join()
    .unwrap_or_else(|_| Err("the cleanup panicked".to_owned()));
    if let Err(e) = outcome {
        if !std::thread::panicking() {
            panic!("{e}");
        }
    }
}

/// `url` with its database replaced by `name` (a URL, or key=value pairs).
fn with_database(url: &str, name: &str) -> String {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let (base, query) = url
            .split_once('?')
            .map_or((url, None), |(b, q)| (b, Some(q)));
        let after_scheme = base.find("://").expect("a scheme") + 3;
        let path = base[after_scheme..].find('/').map(|i| i + after_scheme);
        let host_part = &base[..path.unwrap_or(base.len())];
        match query {
            Some(q) => format!("{host_part}/{name}?{q}"),
            None => format!("{host_part}/{name}"),
        }
    } else {
        format!("{url} dbname={name}")
    }
}
