//! Reading a route's table from PostgreSQL: the rows of a window for the reconcile sweep (§6), one
//! row by its id for `redo` (§5).
//!
//! **Connecting.** `DATABASE_URL` is a libpq connection string, as Supabase shows it: a
//! `postgres://` / `postgresql://` URL or `key=value` pairs. `sslmode` and `sslrootcert` mean what
//! they mean to libpq (tokio-postgres alone knows neither `verify-*` nor `sslrootcert`, so they are
//! taken out of the string here and applied with rustls):
//!
//! | sslmode | TLS | certificate checked |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default), `allow` | when the server offers it | only with `sslrootcert`: the chain |
//! | `require` | always | only with `sslrootcert`: the chain |
//! | `verify-ca` | always | the chain |
//! | `verify-full` | always | the chain and the host name |
//!
//! `sslrootcert` is a PEM (or DER) file of the CA to trust, e.g. Supabase's, whose server
//! certificates chain to its own CA; `sslrootcert=system` trusts the public CAs (Mozilla's list)
//! and, as in libpq, needs `verify-full` (the default with it). `verify-*` without `sslrootcert`
//! uses `~/.postgresql/root.crt` when it exists, like libpq, and otherwise is refused with what to
//! add. Unlike libpq, `prefer` falls back to plain TCP only when the server offers no TLS, not
//! after a failed handshake; the `PGSSLMODE`/`PGSSLROOTCERT` environment variables are not read.
//! No message ever holds the password.
//!
//! Every statement goes out unprepared (`query_typed`: parse, bind and execute in one round trip,
//! no named statements), so Supabase's transaction-mode pooler (port 6543) works as well as a
//! direct or session-mode connection.
//!
//! **Reading.** A row is `to_jsonb(row)`, the shape Supabase's webhook carries (numbers stay
//! numbers, uuids and timestamps are strings). The sweep pages with a keyset on
//! `(created_column, id_column)`, so a table of millions streams in bounded memory and rows
//! inserted during the sweep neither shift nor repeat a page. The cursor is compared in the
//! columns' own types: the created value is bound in its own type, and the id is bound as text and
//! cast to the id column's type as the catalog spells it (`format_type`), so an integer id orders
//! as a number (`9 < 10`), a uuid as a uuid, a text id by the column's collation. An index on
//! `(created_column, id_column)` (or on `created_column`) makes each page an index range scan;
//! without one each page is a scan of the table.
//!
//! Identifiers from the config are always quoted (`"` doubled), so any schema, table or column
//! name works, whatever its case or characters.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde_json::{Map, Value};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::Route;

/// A connection to the database that holds the routes' tables.
pub struct Rows {
    client: tokio_postgres::Client,
    /// Drives the connection; it ends by itself once `client` is dropped.
    _connection: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Rows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rows")
            .field("closed", &self.client.is_closed())
            .finish()
    }
}

/// One row: the whole row as JSON (as the webhook would carry it: `to_jsonb`), and when it was
/// created.
#[derive(Debug, Clone)]
pub struct Row {
    pub record: Map<String, Value>,
    pub created_at: DateTime<Utc>,
}

impl Rows {
    /// Connects to DATABASE_URL (a postgres:// URL or key=value string, e.g. Supabase's),
    /// honouring `sslmode` (disable, prefer, require, verify-ca, verify-full) and `sslrootcert`
    /// (a PEM file of the CA, since Supabase's certificate chains to its own CA) as libpq does:
    /// require without sslrootcert encrypts without verifying; with sslrootcert, or verify-*,
    /// the chain is verified (verify-full also the host name). Errors say what to fix and never
    /// echo the password.
    pub async fn connect(database_url: &str) -> anyhow::Result<Rows> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let target = Target::parse(database_url, home.as_deref()).map_err(anyhow::Error::msg)?;
        let tls = target.connector().map_err(anyhow::Error::msg)?;
        let (client, connection) = match target.config.connect(tls).await {
            Ok(pair) => pair,
            Err(e) => bail!(target.connect_error(&e)),
        };
        let connection = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!("the PostgreSQL connection ended: {}", describe(&e));
            }
        });
        Ok(Rows {
            client,
            _connection: connection,
        })
    }

    /// Checks that the route's table and its id, created and text columns exist; the error
    /// names the missing one (`table public.feedbacks has no column "created_at"`...).
    pub async fn check(&self, route: &Route) -> anyhow::Result<()> {
        self.shape(route).await.map(|_| ())
    }

    /// The route's rows with created_column >= since, in keyset pages of `page_size` rows ordered
    /// by (created_column, id_column) — so a table of millions streams in bounded memory.
    ///
    /// A row whose created column is NULL is outside every window (`NULL >= since` is not true),
    /// and so is a row whose id is NULL (it has no identity to claim a branch with). A
    /// `page_size` of 0 is taken as 1. Nothing is read until the first [`RowPages::next_page`],
    /// which also checks the table as [`Rows::check`] does.
    pub fn since<'a>(
        &'a self,
        route: &'a Route,
        since: DateTime<Utc>,
        page_size: usize,
    ) -> RowPages<'a> {
        RowPages {
            rows: self,
            route,
            since,
            page_size: page_size.max(1),
            plan: None,
            cursor: Cursor::First,
        }
    }

    /// One row by its id (the id as text, bound in the id column's own type), for `redo`.
    ///
    /// `Ok(None)` when no row has that id. An error when the text is no value of the column's
    /// type (`abc` for a bigint id), when two rows share the id (the id column must be unique),
    /// and when the row's created column is NULL.
    pub async fn by_id(&self, route: &Route, id: &str) -> anyhow::Result<Option<Row>> {
        let shape = self.shape(route).await?;
        let sql = shape.select(&format!(
            "where r.{} = cast($1::text as {}) limit 2",
            shape.id, shape.id_type
        ));
        let found = self
            .client
            .query_typed(&sql, &[(&id, Type::TEXT)])
            .await
            .map_err(|e| {
                let is_data_error = e.code().is_some_and(|c| c.code().starts_with("22"));
                if is_data_error {
                    anyhow!(
                        "{id:?} is not an id of table {}: its id column {} is of type {} ({})",
                        shape.name,
                        quoted_for_message(&route.id_column),
                        shape.id_type,
                        describe(&e)
                    )
                } else {
                    shape.query_error(&e)
                }
            })?;
        match found.as_slice() {
            [] => Ok(None),
            [row] => {
                let (row, created, _) = shape.decode(row)?;
                if created.is_none() {
                    bail!(
                        "row {id} of table {} has no {} (NULL): set it, e.g. `update {} set {} = now() where {} = '{}'`",
                        shape.name,
                        quoted_for_message(&route.created_column),
                        shape.relation,
                        shape.created,
                        shape.id,
                        id.replace('\'', "''")
                    );
                }
                Ok(Some(row))
            }
            _ => bail!(
                "more than one row of table {} has id {id}: the id column {} must be unique (the \
                 primary key, usually), since the id is the row's identity",
                shape.name,
                quoted_for_message(&route.id_column)
            ),
        }
    }

    /// Looks the route's table and columns up in the catalog.
    async fn shape(&self, route: &Route) -> anyhow::Result<Shape> {
        let name = table_for_message(&route.schema, &route.table);
        let lookup_error = |e: tokio_postgres::Error| {
            anyhow!(
                "could not look up table {name} in the database (DATABASE_URL): {}",
                describe(&e)
            )
        };
        // Case-insensitively, so that a near miss can be named.
        let tables = self
            .client
            .query_typed(
                "select c.oid, c.relname::text \
                 from pg_catalog.pg_class c \
                 join pg_catalog.pg_namespace n on n.oid = c.relnamespace \
                 where n.nspname = $1 and lower(c.relname) = lower($2) \
                   and c.relkind in ('r', 'p', 'v', 'm', 'f')",
                &[(&route.schema, Type::TEXT), (&route.table, Type::TEXT)],
            )
            .await
            .map_err(lookup_error)?;
        let exact = tables
            .iter()
            .find(|row| row.get::<_, String>(1) == route.table);
        let Some(table) = exact else {
            let schemas = self
                .client
                .query_typed(
                    "select nspname::text from pg_catalog.pg_namespace where lower(nspname) = lower($1)",
                    &[(&route.schema, Type::TEXT)],
                )
                .await
                .map_err(lookup_error)?;
            let schemas: Vec<String> = schemas.iter().map(|r| r.get(0)).collect();
            if !schemas.contains(&route.schema) {
                let hint = match schemas.first() {
                    Some(other) => format!(" (did you mean schema = {other:?}?)"),
                    None => String::new(),
                };
                bail!(
                    "table {name} does not exist: the database has no schema {}{hint}; check the \
                     route's `schema` in the config, and that DATABASE_URL names the right database",
                    quoted_for_message(&route.schema)
                );
            }
            let hint = match tables.first() {
                Some(other) => format!(" (did you mean table = {:?}?)", other.get::<_, String>(1)),
                None => String::new(),
            };
            bail!(
                "table {name} does not exist{hint}: check the route's `table` in the config, and \
                 that DATABASE_URL names the right database"
            );
        };
        let oid: u32 = table.get(0);

        let columns = self
            .client
            .query_typed(
                "select a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod), \
                        case when t.typtype = 'd' then t.typbasetype else a.atttypid end \
                 from pg_catalog.pg_attribute a \
                 join pg_catalog.pg_type t on t.oid = a.atttypid \
                 where a.attrelid = $1 and a.attnum > 0 and not a.attisdropped \
                 order by a.attnum",
                &[(&oid, Type::OID)],
            )
            .await
            .map_err(lookup_error)?;
        let columns: Vec<Column> = columns
            .iter()
            .map(|row| Column {
                name: row.get(0),
                type_sql: row.get(1),
                base_type: row.get(2),
            })
            .collect();
        let find = |wanted: &str, key: &str| -> anyhow::Result<&Column> {
            if let Some(column) = columns.iter().find(|c| c.name == wanted) {
                return Ok(column);
            }
            let near = columns
                .iter()
                .find(|c| c.name.to_lowercase() == wanted.to_lowercase())
                .map(|c| format!(" (did you mean {key} = {:?}?)", c.name))
                .unwrap_or_default();
            let mut names: Vec<String> = columns.iter().take(20).map(|c| c.name.clone()).collect();
            if columns.len() > 20 {
                names.push("…".into());
            }
            bail!(
                "table {name} has no column {}{near}: check the route's `{key}` in the config \
                 (the table's columns: {})",
                quoted_for_message(wanted),
                names.join(", ")
            )
        };
        let id = find(&route.id_column, "id_column")?;
        let created = find(&route.created_column, "created_column")?;
        if let Some(text) = &route.text_column {
            find(text, "text_column")?;
        }
        let created_kind = match created.base_type {
            TIMESTAMPTZ_OID => CreatedKind::Tz,
            TIMESTAMP_OID => CreatedKind::Naive,
            DATE_OID => CreatedKind::Date,
            _ => bail!(
                "column {} of table {name} is of type {}: the route's `created_column` must be \
                 a `timestamp with time zone` column (a `timestamp` is read as UTC; a `date` \
                 works too)",
                quoted_for_message(&created.name),
                created.type_sql
            ),
        };
        Ok(Shape {
            name,
            relation: format!(
                "{}.{}",
                quote_ident(&route.schema),
                quote_ident(&route.table)
            ),
            id: quote_ident(&id.name),
            id_type: id.type_sql.clone(),
            created: quote_ident(&created.name),
            created_kind,
        })
    }
}

/// The route's rows of a window, a page at a time; see [`Rows::since`].
pub struct RowPages<'a> {
    rows: &'a Rows,
    route: &'a Route,
    since: DateTime<Utc>,
    page_size: usize,
    /// The table's shape and the two statements, made on the first page.
    plan: Option<Plan>,
    cursor: Cursor,
}

struct Plan {
    shape: Shape,
    first: String,
    next: String,
}

enum Cursor {
    First,
    /// After the last row returned: its created value (in the column's type) and its id as text.
    After {
        created: CreatedValue,
        id: String,
    },
    Done,
}

impl RowPages<'_> {
    /// The next page; empty when done. After an error, calling it again retries the same page.
    pub async fn next_page(&mut self) -> anyhow::Result<Vec<Row>> {
        if matches!(self.cursor, Cursor::Done) {
            return Ok(Vec::new());
        }
        if self.plan.is_none() {
            let shape = self.rows.shape(self.route).await?;
            self.plan = Some(Plan::new(shape));
        }
        let Some(plan) = &self.plan else {
            unreachable!("the plan was made above")
        };
        let limit = i64::try_from(self.page_size).unwrap_or(i64::MAX);
        let client = &self.rows.client;
        let found = match &self.cursor {
            Cursor::First => {
                let since = CreatedValue::bound(self.since, plan.shape.created_kind);
                let (value, ty) = since.param();
                client
                    .query_typed(&plan.first, &[(value, ty), (&limit, Type::INT8)])
                    .await
            }
            Cursor::After { created, id } => {
                let (value, ty) = created.param();
                client
                    .query_typed(
                        &plan.next,
                        &[(value, ty), (id, Type::TEXT), (&limit, Type::INT8)],
                    )
                    .await
            }
            Cursor::Done => unreachable!("returned above"),
        }
        .map_err(|e| plan.shape.query_error(&e))?;

        let mut page = Vec::with_capacity(found.len());
        let mut last = None;
        for row in &found {
            let (row, created, id) = plan.shape.decode(row)?;
            // The WHERE clause leaves out NULL created values; a NULL here would be a bug.
            let created = created.ok_or_else(|| anyhow!("a row without a created value"))?;
            last = Some((created, id));
            page.push(row);
        }
        self.cursor = match last {
            Some((created, id)) if page.len() >= self.page_size => Cursor::After { created, id },
            _ => Cursor::Done,
        };
        Ok(page)
    }
}

impl Plan {
    fn new(shape: Shape) -> Plan {
        let (c, i) = (&shape.created, &shape.id);
        // `r.c >= $1` repeats what the row comparison implies, so that an index on the created
        // column alone can bound the scan too.
        let order = format!("order by r.{c}, r.{i}");
        let first = shape.select(&format!(
            "where r.{c} >= $1 and r.{i} is not null {order} limit $2"
        )) + " "
            + &order;
        let next = shape.select(&format!(
            "where r.{c} >= $1 and (r.{c}, r.{i}) > ($1, cast($2::text as {})) \
             and r.{i} is not null {order} limit $3",
            shape.id_type
        )) + " "
            + &order;
        Plan { shape, first, next }
    }
}

// ---- The table's shape ----------------------------------------------------------------------

const TIMESTAMPTZ_OID: u32 = 1184;
const TIMESTAMP_OID: u32 = 1114;
const DATE_OID: u32 = 1082;

struct Column {
    name: String,
    /// The type as SQL spells it (`bigint`, `uuid`, `character varying(40)`, `public.my_domain`).
    type_sql: String,
    /// The type's oid, or for a domain its base type's.
    base_type: u32,
}

/// What the queries need to know about a route's table.
struct Shape {
    /// `schema.table` for messages.
    name: String,
    /// `"schema"."table"`.
    relation: String,
    /// The quoted id column and its type.
    id: String,
    id_type: String,
    /// The quoted created column and which kind of time it holds.
    created: String,
    created_kind: CreatedKind,
}

/// The created column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CreatedKind {
    /// `timestamp with time zone`.
    Tz,
    /// `timestamp without time zone`, read as UTC (Supabase's time zone).
    Naive,
    /// `date`: the window starts at the start of its first day.
    Date,
}

/// A created value in the column's own type, so the cursor compares exactly.
#[derive(Debug, Clone)]
enum CreatedValue {
    Tz(DateTime<Utc>),
    Naive(NaiveDateTime),
    Date(NaiveDate),
}

impl CreatedValue {
    /// A window's start in the column's type.
    fn bound(since: DateTime<Utc>, kind: CreatedKind) -> CreatedValue {
        match kind {
            CreatedKind::Tz => CreatedValue::Tz(since),
            CreatedKind::Naive => CreatedValue::Naive(since.naive_utc()),
            CreatedKind::Date => CreatedValue::Date(since.date_naive()),
        }
    }

    fn param(&self) -> (&(dyn ToSql + Sync), Type) {
        match self {
            CreatedValue::Tz(v) => (v, Type::TIMESTAMPTZ),
            CreatedValue::Naive(v) => (v, Type::TIMESTAMP),
            CreatedValue::Date(v) => (v, Type::DATE),
        }
    }

    fn to_utc(&self) -> DateTime<Utc> {
        match self {
            CreatedValue::Tz(v) => *v,
            CreatedValue::Naive(v) => v.and_utc(),
            CreatedValue::Date(v) => v.and_time(chrono::NaiveTime::MIN).and_utc(),
        }
    }
}

impl Shape {
    /// A query of the rows that `filter` (a WHERE clause, ORDER BY, LIMIT on the table, alias
    /// `r`) picks: each as its record, its created value in the column's base type, and its id
    /// as text (for the cursor). The rows are picked in a subquery so that `to_jsonb` runs on
    /// the page's rows only, not on every row a scan without an index sorts.
    fn select(&self, filter: &str) -> String {
        let kind = match self.created_kind {
            CreatedKind::Tz => "timestamptz",
            CreatedKind::Naive => "timestamp",
            CreatedKind::Date => "date",
        };
        // `r.*` rather than `r`: a column named like the alias cannot stand in for the row.
        format!(
            "select to_jsonb(r.*), (r.{c})::{kind}, (r.{i})::text \
             from (select * from {rel} as r {filter}) as r",
            c = self.created,
            i = self.id,
            rel = self.relation
        )
    }

    /// A result row: the row, its created value (NULL: `None`) and its id as text.
    fn decode(
        &self,
        row: &tokio_postgres::Row,
    ) -> anyhow::Result<(Row, Option<CreatedValue>, String)> {
        let bad = |e: tokio_postgres::Error| {
            anyhow!(
                "could not read a row of table {}: {}",
                self.name,
                describe(&e)
            )
        };
        let record = match row.try_get::<_, Value>(0).map_err(bad)? {
            Value::Object(map) => map,
            other => bail!("to_jsonb gave {other} for a row of table {}", self.name),
        };
        let created = match self.created_kind {
            CreatedKind::Tz => row
                .try_get::<_, Option<_>>(1)
                .map_err(bad)?
                .map(CreatedValue::Tz),
            CreatedKind::Naive => row
                .try_get::<_, Option<_>>(1)
                .map_err(bad)?
                .map(CreatedValue::Naive),
            CreatedKind::Date => row
                .try_get::<_, Option<_>>(1)
                .map_err(bad)?
                .map(CreatedValue::Date),
        };
        let id: String = row.try_get(2).map_err(bad)?;
        let created_at = created
            .as_ref()
            .map_or(DateTime::UNIX_EPOCH, |c| c.to_utc());
        Ok((Row { record, created_at }, created, id))
    }

    fn query_error(&self, e: &tokio_postgres::Error) -> anyhow::Error {
        anyhow!(
            "could not read table {} (DATABASE_URL): {}",
            self.name,
            describe(e)
        )
    }
}

/// `name` as a PostgreSQL identifier: always quoted, `"` doubled.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A name for a message: bare when it needs no quoting, quoted otherwise.
fn ident_for_message(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_owned()
    } else {
        quote_ident(name)
    }
}

fn table_for_message(schema: &str, table: &str) -> String {
    format!("{}.{}", ident_for_message(schema), ident_for_message(table))
}

/// A column or schema name in a message: always in double quotes.
fn quoted_for_message(name: &str) -> String {
    format!("\"{name}\"")
}

/// A tokio-postgres error with its causes (its `Display` alone says only "db error").
fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = format!("{}: {}", db.severity(), db.message());
        if let Some(detail) = db.detail() {
            let _ = write!(text, " ({detail})");
        }
        if let Some(hint) = db.hint() {
            let _ = write!(text, "; hint: {hint}");
        }
        return text;
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            let _ = write!(text, ": {cause_text}");
        }
        source = cause.source();
    }
    text
}

// ---- DATABASE_URL ---------------------------------------------------------------------------

/// What `sslmode` and `sslrootcert` ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tls {
    /// `sslmode=disable`: plain TCP.
    Off,
    /// TLS; when not `required` (`prefer`), plain TCP if the server offers no TLS.
    On { required: bool, verify: Verify },
}

/// What is checked of the server's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verify {
    /// Nothing: encrypted, but anyone in the middle could present any certificate.
    Nothing,
    /// That it chains to one of the roots.
    Chain(Roots),
    /// That it chains to one of the roots and names the host connected to.
    ChainAndHost(Roots),
}

/// The CAs trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    /// A PEM (or DER) file: `sslrootcert=PATH`.
    File(PathBuf),
    /// The public CAs: `sslrootcert=system`.
    System,
}

/// A parsed DATABASE_URL.
struct Target {
    /// tokio-postgres's settings, with `ssl_mode` set from [`Tls`].
    config: tokio_postgres::Config,
    tls: Tls,
    /// The password as written (and decoded), kept out of every message.
    secrets: Vec<String>,
}

/// How to spell a connection string, for messages.
const URL_FORMS: &str = "postgres://USER:PASSWORD@HOST:PORT/DATABASE, or key=value pairs \
    (Supabase: Project Settings → Database → Connection string)";

impl Target {
    /// Parses a connection string; `home` is where libpq's `~/.postgresql/root.crt` would be.
    fn parse(database_url: &str, home: Option<&Path>) -> Result<Target, String> {
        let url = database_url.trim();
        if url.is_empty() {
            return Err(format!(
                "DATABASE_URL is empty: set it to the database's connection string, {URL_FORMS}"
            ));
        }
        let lower = url.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            return Err(format!(
                "DATABASE_URL is a web address, not a database connection string (a Supabase \
                 project's API URL?): use {URL_FORMS}"
            ));
        }
        let split = split_ssl_options(url);
        let secrets = split.secrets;
        let redacted = |message: String| redact(&message, &secrets);
        let mut config: tokio_postgres::Config = split.rest.parse().map_err(|e| {
            redacted(format!(
                "DATABASE_URL is not a PostgreSQL connection string ({}): use {URL_FORMS}",
                describe(&e)
            ))
        })?;
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            return Err(format!("DATABASE_URL names no host: use {URL_FORMS}"));
        }
        let tls = tls_settings(split.sslmode.as_deref(), split.sslrootcert.as_deref(), home)
            .map_err(redacted)?;
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

    /// The TLS connector for [`Tls`]: reads the root certificates.
    fn connector(&self) -> Result<MakeRustlsConnect, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup failed: {e}"))?;
        let verify = match &self.tls {
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

    /// A connection failure, with what to do about it, without the password.
    fn connect_error(&self, e: &tokio_postgres::Error) -> String {
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

/// A connection string with `sslmode` and `sslrootcert` taken out.
#[derive(Debug, Default, PartialEq, Eq)]
struct SplitUrl {
    /// The rest, for tokio-postgres.
    rest: String,
    sslmode: Option<String>,
    sslrootcert: Option<String>,
    /// The password as written, and percent-decoded.
    secrets: Vec<String>,
}

fn split_ssl_options(url: &str) -> SplitUrl {
    for scheme in ["postgres://", "postgresql://"] {
        if url.len() >= scheme.len() && url[..scheme.len()].eq_ignore_ascii_case(scheme) {
            return split_url(url, scheme.len());
        }
    }
    split_key_values(url)
}

fn percent_decoded(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

fn add_secret(secrets: &mut Vec<String>, raw: &str) {
    for secret in [raw.to_owned(), percent_decoded(raw)] {
        if !secret.is_empty() && !secrets.contains(&secret) {
            secrets.push(secret);
        }
    }
}

/// `postgres://[user[:password]@][hosts][/db][?k=v&…]`, read the way libpq and tokio-postgres
/// read it: the credentials end at the first `@`, the parameters start at the next `?`.
fn split_url(url: &str, body_start: usize) -> SplitUrl {
    let mut split = SplitUrl::default();
    let body = &url[body_start..];
    let at = body.find('@');
    if let Some(at) = at {
        if let Some((_, password)) = body[..at].split_once(':') {
            add_secret(&mut split.secrets, password);
        }
    }
    let after_credentials = at.map_or(0, |at| at + 1);
    let Some(question) = body[after_credentials..].find('?') else {
        split.rest = url.to_owned();
        return split;
    };
    let question = body_start + after_credentials + question;
    let (base, query) = (&url[..question], &url[question + 1..]);
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, value) = match pair.split_once('=') {
            Some((key, value)) => (percent_decoded(key), Some(value)),
            None => (String::new(), None),
        };
        match (key.as_str(), value) {
            ("sslmode", Some(value)) => split.sslmode = Some(percent_decoded(value)),
            ("sslrootcert", Some(value)) => split.sslrootcert = Some(percent_decoded(value)),
            ("password", Some(value)) => {
                add_secret(&mut split.secrets, value);
                kept.push(pair);
            }
            _ => kept.push(pair),
        }
    }
    split.rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    split
}

/// `key=value key='quoted value' …`, read the way libpq reads it. When the text does not read,
/// it goes to tokio-postgres whole, for its error.
fn split_key_values(text: &str) -> SplitUrl {
    let mut split = SplitUrl {
        rest: text.to_owned(),
        ..SplitUrl::default()
    };
    let Some(params) = key_values(text) else {
        return split;
    };
    let mut rest = String::new();
    let mut copied_to = 0;
    for (key, value, span) in params {
        match key {
            "sslmode" | "sslrootcert" => {
                rest.push_str(&text[copied_to..span.start]);
                copied_to = span.end;
                if key == "sslmode" {
                    split.sslmode = Some(value);
                } else {
                    split.sslrootcert = Some(value);
                }
            }
            "password" => add_secret(&mut split.secrets, &value),
            _ => {}
        }
    }
    rest.push_str(&text[copied_to..]);
    split.rest = rest;
    split
}

/// The `key=value` pairs of a libpq keyword/value string, each with its span; `None` when the
/// text is not one.
fn key_values(text: &str) -> Option<Vec<(&str, String, std::ops::Range<usize>)>> {
    let mut chars = text.char_indices().peekable();
    let mut params = Vec::new();
    let skip_spaces = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
    };
    loop {
        skip_spaces(&mut chars);
        let Some(&(start, _)) = chars.peek() else {
            return Some(params);
        };
        let mut key_end = start;
        while let Some((i, c)) = chars.next_if(|(_, c)| !c.is_whitespace() && *c != '=') {
            key_end = i + c.len_utf8();
        }
        if key_end == start {
            return None;
        }
        skip_spaces(&mut chars);
        chars.next_if(|(_, c)| *c == '=')?;
        skip_spaces(&mut chars);
        let mut value = String::new();
        let end;
        if chars.next_if(|(_, c)| *c == '\'').is_some() {
            loop {
                match chars.next()? {
                    (i, '\'') => {
                        end = i + 1;
                        break;
                    }
                    (_, '\\') => value.push(chars.next()?.1),
                    (_, c) => value.push(c),
                }
            }
        } else {
            let mut last = None;
            while let Some((i, c)) = chars.next_if(|(_, c)| !c.is_whitespace()) {
                last = Some(i + c.len_utf8());
                if c == '\\' {
                    if let Some((j, escaped)) = chars.next() {
                        value.push(escaped);
                        last = Some(j + escaped.len_utf8());
                    }
                } else {
                    value.push(c);
                }
            }
            end = last?;
        }
        params.push((&text[start..key_end], value, start..end));
    }
}

/// The TLS settings `sslmode` and `sslrootcert` ask for, as libpq reads them.
fn tls_settings(
    sslmode: Option<&str>,
    sslrootcert: Option<&str>,
    home: Option<&Path>,
) -> Result<Tls, String> {
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
        return Err(format!(
            "DATABASE_URL: sslmode={mode:?} is not a mode PostgreSQL knows: use disable, prefer, \
             require, verify-ca or verify-full (Supabase: sslmode=verify-full with \
             sslrootcert=/path/to/the-project-ca.crt, or sslmode=require)"
        ));
    }
    if roots == Some(Roots::System) && mode != "verify-full" {
        return Err(format!(
            "DATABASE_URL: sslrootcert=system trusts every public CA, so it needs \
             sslmode=verify-full (which checks the host name too), not sslmode={mode}"
        ));
    }
    // verify-* without sslrootcert: libpq's default file, when it exists.
    let required_roots = |mode: &str| -> Result<Roots, String> {
        if let Some(roots) = &roots {
            return Ok(roots.clone());
        }
        if let Some(default) = home.map(|h| h.join(".postgresql").join("root.crt")) {
            if default.is_file() {
                return Ok(Roots::File(default));
            }
        }
        Err(format!(
            "DATABASE_URL: sslmode={mode} checks the server's certificate against a CA, but no \
             sslrootcert was given (nor is there ~/.postgresql/root.crt): add \
             sslrootcert=/path/to/ca.pem (Supabase: Project Settings → Database → SSL \
             configuration → download the certificate), or sslrootcert=system for a server with \
             a certificate from a public CA, or use sslmode=require to encrypt without checking"
        ))
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

/// The trusted CAs: Mozilla's list, or the certificates of a PEM (or DER) file.
fn load_roots(roots: &Roots) -> Result<RootCertStore, String> {
    let path = match roots {
        Roots::System => {
            return Ok(RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            })
        }
        Roots::File(path) => path,
    };
    let shown = path.display();
    let bytes = std::fs::read(path)
        .map_err(|e| format!("DATABASE_URL: sslrootcert={shown} cannot be read: {e}"))?;
    let mut certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("DATABASE_URL: sslrootcert={shown} is not a PEM file: {e}"))?;
    if certificates.is_empty() && bytes.first() == Some(&0x30) {
        // One DER certificate (an ASN.1 SEQUENCE), as some CA downloads are.
        certificates.push(CertificateDer::from(bytes.clone()));
    }
    if certificates.is_empty() {
        return Err(format!(
            "DATABASE_URL: sslrootcert={shown} holds no certificate (expected PEM: -----BEGIN \
             CERTIFICATE-----)"
        ));
    }
    let mut store = RootCertStore::empty();
    for certificate in certificates {
        store.add(certificate).map_err(|e| {
            format!(
                "DATABASE_URL: sslrootcert={shown} holds a certificate that cannot be a CA: {e}"
            )
        })?;
    }
    Ok(store)
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

    const PASSWORD: &str = "Zq8-unusual-Passw0rd";

    fn parse(url: &str) -> Result<Target, String> {
        Target::parse(url, None)
    }

    fn tls(url: &str) -> Tls {
        match parse(url) {
            Ok(target) => target.tls,
            Err(e) => panic!("{url}: {e}"),
        }
    }

    fn file(path: &str) -> Roots {
        Roots::File(PathBuf::from(path))
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
    fn a_bad_sslmode_is_a_clear_error() {
        for url in [
            format!("postgres://u:{PASSWORD}@h/db?sslmode=verify_full"),
            format!("host=h password={PASSWORD} sslmode=verify_full"),
        ] {
            let err = parse(&url).err().expect("a bad sslmode is refused");
            assert!(err.contains("sslmode=\"verify_full\""), "{err}");
            assert!(err.contains("verify-full"), "{err}");
            assert!(!err.contains(PASSWORD), "{err}");
        }
    }

    #[test]
    fn verification_without_a_ca_says_what_to_add() {
        let err = parse("postgres://u@h/db?sslmode=verify-full")
            .err()
            .unwrap();
        assert!(err.contains("sslrootcert"), "{err}");
        let err = parse("postgres://u@h/db?sslmode=verify-ca").err().unwrap();
        assert!(err.contains("sslrootcert"), "{err}");
        let err = parse("postgres://u@h/db?sslmode=require&sslrootcert=system")
            .err()
            .unwrap();
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
            let err = parse(&url).err().unwrap_or_else(|| panic!("{url} parsed"));
            assert!(!err.contains(PASSWORD), "{url}: {err}");
        }
        let err = parse("postgres://user:p%40ss%3Aword@h:x/db").err().unwrap();
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
        let err = parse("https://abc.supabase.co").err().unwrap();
        assert!(err.contains("web address"), "{err}");
        let err = parse("").err().unwrap();
        assert!(err.contains("empty"), "{err}");
        let err = parse("postgres://h/db?nosuchoption=1").err().unwrap();
        assert!(err.contains("nosuchoption"), "{err}");
        let err = parse("dbname=x").err().unwrap();
        assert!(err.contains("no host"), "{err}");
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let target =
            parse("postgres://u@h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem").unwrap();
        let err = target.connector().err().unwrap();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("ca.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let target = parse(&format!(
            "postgres://u@h/db?sslmode=verify-ca&sslrootcert={}",
            junk.display()
        ))
        .unwrap();
        let err = target.connector().err().unwrap();
        assert!(err.contains("no certificate"), "{err}");
        // System roots load.
        assert!(parse("postgres://u@h/db?sslrootcert=system")
            .unwrap()
            .connector()
            .is_ok());
    }

    #[tokio::test]
    async fn a_refused_connection_names_the_host_not_the_password() {
        // Port 1 on the loopback: nothing listens there.
        let err = Rows::connect(&format!("postgres://u:{PASSWORD}@127.0.0.1:1/db"))
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("127.0.0.1:1"), "{err}");
        assert!(!err.contains(PASSWORD), "{err}");
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("feedbacks"), "\"feedbacks\"");
        assert_eq!(quote_ident("Say \"what\""), "\"Say \"\"what\"\"\"");
        assert_eq!(table_for_message("public", "feedbacks"), "public.feedbacks");
        assert_eq!(
            table_for_message("my-app", "Feedback Items"),
            "\"my-app\".\"Feedback Items\""
        );
    }
}
