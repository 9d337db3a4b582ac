//! The table's shape: the route's table and columns as the catalog has it (one read, which
//! [`visibility`](super::visibility) shares), the statements that read its rows and how a
//! result row decodes; how names show in messages.

use chrono::DateTime;
use serde_json::Value;
use tokio_postgres::types::Json;
use tokio_postgres::Client;

use crate::config::Route;

use super::{quote_ident, quote_relation, Error, Result};

/// The types a created column may have (or its domain's base type): `timestamp with time zone`,
/// `timestamp` (read as UTC, Supabase's time zone) and `date` (a day starts at its midnight).
const TIME_TYPES: [u32; 3] = [1184, 1114, 1082];

/// The schemas named as the route's but for case, each with its tables named so but for case
/// (so that a near miss can be named), read from the catalog, which every role may read
/// (unlike `information_schema`, which shows only what the role has rights on). For each table:
/// 2, its columns ([`Column`]); 3, 4, its name and DATABASE_URL's role, quoted as SQL wants
/// them; 5–8, how row level security stands for the role (enabled, forced, active, whether the
/// role has the owner's privileges); 9, the policies for reading that apply to the role, as
/// PostgreSQL picks them: (name, restrictive, condition).
const CATALOG: &str = "select n.nspname::text, c.relname::text, \
        (select coalesce(json_agg(json_build_object('name', a.attname, \
                  'type_sql', pg_catalog.format_type(a.atttypid, a.atttypmod), \
                  'base_type', case when t.typtype = 'd' then t.typbasetype else a.atttypid end::bigint) \
                  order by a.attnum), '[]') \
         from pg_catalog.pg_attribute a join pg_catalog.pg_type t on t.oid = a.atttypid \
         where a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped), \
        quote_ident(n.nspname) || '.' || quote_ident(c.relname), quote_ident(current_user), \
        c.relrowsecurity, c.relforcerowsecurity, row_security_active(c.oid::regclass), \
        pg_has_role(current_user, c.relowner, 'USAGE'), \
        (select coalesce(json_agg(json_build_array(quote_ident(p.polname), not p.polpermissive, \
                  pg_catalog.pg_get_expr(p.polqual, p.polrelid)) order by p.polname), '[]') \
         from pg_catalog.pg_policy p \
         where p.polrelid = c.oid and p.polcmd in ('r', '*') \
           and exists (select from unnest(p.polroles) as r(oid) \
                       where case when r.oid = 0 then true \
                             else pg_has_role(current_user, r.oid, 'USAGE') end)) \
    from pg_catalog.pg_namespace n \
    left join pg_catalog.pg_class c on c.relnamespace = n.oid \
      and lower(c.relname) = lower($2) and c.relkind in ('r', 'p', 'v', 'm', 'f') \
    where lower(n.nspname) = lower($1)";

/// The first tables of a schema by name, one more than a message lists (so it can say there
/// are more), from the catalog, which shows the tables the role cannot read too.
const TABLES_OF: &str = "select c.relname::text from pg_catalog.pg_class c \
    join pg_catalog.pg_namespace n on n.oid = c.relnamespace \
    where n.nspname = $1 and c.relkind in ('r', 'p', 'v', 'm', 'f') order by 1 limit 11";

/// The rows of [`CATALOG`] for the route's table, and the one that is it exactly, if any.
pub(super) async fn lookup(
    client: &Client,
    route: &Route,
) -> Result<(Vec<tokio_postgres::Row>, Option<usize>), tokio_postgres::Error> {
    let found = super::query(client, CATALOG, &[&route.schema, &route.table]).await?;
    let exact = found.iter().position(|r| {
        r.get::<_, &str>(0) == route.schema
            && r.get::<_, Option<&str>>(1) == Some(route.table.as_str())
    });
    Ok((found, exact))
}

#[derive(serde::Deserialize)]
struct Column {
    name: String,
    /// The type as SQL spells it (`bigint`, `uuid`, `character varying(40)`, `public.my_domain`).
    type_sql: String,
    /// The type's oid, or for a domain its base type's.
    base_type: u32,
}

/// What the queries need to know about a route's table.
pub(super) struct Shape {
    /// `schema.table` for messages.
    pub(super) name: String,
    /// `"schema"."table"`.
    pub(super) relation: String,
    /// The quoted id and created columns, and their types as SQL spells them: values cross as
    /// text and are cast to these, so that each compares in its own type. The created column is
    /// empty in a shape read for writes.
    pub(super) id: String,
    pub(super) id_type: String,
    pub(super) created: String,
    pub(super) created_type: String,
    /// The gate's quoted column and its value as JSON text, for a route with `run_when`.
    pub(super) gate: Option<(String, String)>,
}

impl Shape {
    /// Looks the route's table and columns up in the catalog: to read rows (`rows`), as
    /// [`Database::check_columns`](super::Database::check_columns) checks them, the created
    /// column included; otherwise what a write of a row's state needs, the id column and the
    /// columns written (checked to be there), whatever else the route names.
    pub(super) async fn read(client: &Client, route: &Route, rows: bool) -> Result<Shape> {
        let table = CatalogTable::read(client, route).await?;
        let (id, created) = table.columns(route, rows, rows)?;
        let (created, created_type) = created
            .map(|c| (quote_ident(&c.name), c.type_sql.clone()))
            .unwrap_or_default();
        Ok(Shape {
            name: table.name.clone(),
            relation: quote_relation(&route.schema, &route.table),
            id: quote_ident(&id.name),
            id_type: id.type_sql.clone(),
            created,
            created_type,
            gate: (route.run_when.as_ref())
                .map(|gate| (quote_ident(&gate.column), gate.equals.to_string())),
        })
    }

    /// A query of the rows that `filter` (a WHERE clause, ORDER BY, LIMIT on the table, alias
    /// `r`) picks: each as its record, its created value in the column's base type, and its id
    /// as text (for the cursor). The rows are picked in a subquery so that `to_jsonb` runs on
    /// the page's rows only, not on every row a scan without an index sorts.
    pub(super) fn select(&self, filter: &str) -> String {
        // `r.*` rather than `r`: a column named like the alias cannot stand in for the row. The
        // epoch of a `timestamp` or a `date` is counted as in UTC.
        format!(
            "select to_jsonb(r.*), (extract(epoch from r.{c}) * 1000000)::int8, \
                    coalesce((r.{c})::text, ''), (r.{i})::text \
             from (select * from {rel} as r {filter}) as r",
            c = self.created,
            i = self.id,
            rel = self.relation
        )
    }

    /// The row whose id is `$1`: the id bound as text, cast to the id column's own type.
    pub(super) fn is_id(&self) -> String {
        format!("{} = cast($1::text as {})", self.id, self.id_type)
    }

    /// A result row of [`Shape::select`]: the row, `None` when its created value is NULL. The
    /// created value and the id as text, for a cursor, are its columns 2 and 3.
    /// A row serde_json cannot take (a number past f64's range, jsonb nested deeper than 128)
    /// is an error naming the table, not a panic.
    pub(super) fn decode(&self, row: &tokio_postgres::Row) -> Result<Option<super::Row>> {
        let bad = |cause| self.unreadable(cause);
        let Value::Object(record) = row.try_get(0).map_err(bad)? else {
            return Err(Error::Row(format!(
                "to_jsonb gave no object for a row of table {}",
                self.name
            )));
        };
        let micros: Option<i64> = row.try_get(1).map_err(bad)?;
        let created_at = micros.and_then(DateTime::from_timestamp_micros);
        Ok(created_at.map(|created_at| super::Row { record, created_at }))
    }

    /// The cursor after a result row of [`Shape::select`]: its created value and its id as text.
    pub(super) fn cursor(&self, row: &tokio_postgres::Row) -> Result<(String, Option<String>)> {
        let bad = |cause| self.unreadable(cause);
        Ok((
            row.try_get(2).map_err(bad)?,
            Some(row.try_get(3).map_err(bad)?),
        ))
    }

    fn unreadable(&self, cause: tokio_postgres::Error) -> Error {
        Error::query(
            format!("could not read a row of table {}", self.name),
            cause,
        )
    }

    pub(super) fn query_error(&self, cause: tokio_postgres::Error) -> Error {
        let what = format!("could not read table {} (DATABASE_URL)", self.name);
        Error::query(what, cause)
    }
}

/// `schema.table` for a message: each name bare when it needs no quoting, quoted otherwise.
fn table_for_message(schema: &str, table: &str) -> String {
    let shown = |name: &str| {
        let plain = name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && (name.chars()).all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        match plain {
            true => name.to_owned(),
            false => quote_ident(name),
        }
    };
    format!("{}.{}", shown(schema), shown(table))
}

/// The first `max` names, then `…` when there are more.
fn first(names: impl Iterator<Item = String>, max: usize) -> Vec<String> {
    let mut names: Vec<String> = names.collect();
    if names.len() > max {
        names.truncate(max);
        names.push("…".into());
    }
    names
}

/// A hint at a name that differs from the config's only in case.
fn did_you_mean(key: &str, name: Option<&str>) -> String {
    name.map(|name| format!(" (did you mean {key} = {name:?}?)"))
        .unwrap_or_default()
}

/// A column or schema name in a message: always in double quotes.
pub(super) fn quoted_for_message(name: &str) -> String {
    format!("\"{name}\"")
}

/// A route that does not fit its table, as the catalog has it: a mistake in the config, not a
/// passing trouble. The text says what is wrong and what to change.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Misfit {
    /// No such table (or schema) in the database: its own error, since every column would be
    /// missing.
    #[error("{0}")]
    NoTable(String),
    #[error(transparent)]
    MissingColumn(#[from] MissingColumn),
    /// The created column holds no time.
    #[error("{0}")]
    CreatedType(String),
}

/// The table has no column the route names.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "table {table} has no column {quoted}{near}: check the route's `{key}` in the config (the \
     table's columns: {names})",
    quoted = quoted_for_message(.column),
    names = .columns.join(", ")
)]
pub struct MissingColumn {
    /// `schema.table`, as messages write it.
    pub table: String,
    pub column: String,
    /// The route's key that names it: `id_column`, `text_column` or `created_column`.
    pub key: &'static str,
    /// A column of the same name but for case, as a hint.
    near: String,
    /// The table's columns, the first 20 (then `…`).
    pub columns: Vec<String>,
}

/// A route's table as the catalog has it: its name for messages and its columns.
struct CatalogTable {
    name: String,
    columns: Vec<Column>,
}

impl CatalogTable {
    async fn read(client: &Client, route: &Route) -> Result<CatalogTable> {
        let name = table_for_message(&route.schema, &route.table);
        let what = format!("could not look up table {name} in the database (DATABASE_URL)");
        let (found, exact) = lookup(client, route)
            .await
            .map_err(|e| Error::query(&what, e))?;
        let Some(table) = exact.map(|n| &found[n]) else {
            let in_schema: Vec<_> = found
                .iter()
                .filter(|r| r.get::<_, &str>(0) == route.schema)
                .collect();
            if in_schema.is_empty() {
                let hint = did_you_mean("schema", found.first().map(|r| r.get(0)));
                return Err(Error::Table(Misfit::NoTable(format!(
                    "table {name} does not exist: the database has no schema {}{hint}; check the \
                     route's `schema` in the config, and that DATABASE_URL names the right database",
                    quoted_for_message(&route.schema)
                ))));
            }
            let hint = did_you_mean("table", in_schema.iter().find_map(|r| r.get(1)));
            let tables = super::query(client, TABLES_OF, &[&route.schema])
                .await
                .map_err(|e| Error::query(&what, e))?;
            let tables = first(tables.iter().map(|r| r.get(0)), 10).join(", ");
            let listed = match tables.is_empty() {
                true => format!("schema {} has no table", route.schema),
                false => format!("the tables of schema {}: {tables}", route.schema),
            };
            return Err(Error::Table(Misfit::NoTable(format!(
                "table {name} does not exist{hint}: check the route's `table` in the config, and \
                 that DATABASE_URL names the right database ({listed})"
            ))));
        };
        let Json(columns) = table.try_get(2).map_err(|e| Error::query(&what, e))?;
        Ok(CatalogTable { name, columns })
    }

    fn find(&self, wanted: &str, key: &'static str) -> Result<&Column, Misfit> {
        if let Some(column) = self.columns.iter().find(|c| c.name == wanted) {
            return Ok(column);
        }
        let near = (self.columns.iter())
            .find(|c| c.name.to_lowercase() == wanted.to_lowercase())
            .map(|c| c.name.as_str());
        Err(Misfit::MissingColumn(MissingColumn {
            table: self.name.clone(),
            column: wanted.to_owned(),
            key,
            near: did_you_mean(key, near),
            columns: first(self.columns.iter().map(|c| c.name.clone()), 20),
        }))
    }

    /// The route's id column and, with `created`, its created column, of a time type; checked
    /// with the others it names: for reading rows (`rows`) all of them, otherwise the columns a
    /// write of a row's state writes.
    fn columns(
        &self,
        route: &Route,
        rows: bool,
        created: bool,
    ) -> Result<(&Column, Option<&Column>), Misfit> {
        let id = self.find(&route.id_column, "id_column")?;
        let gate = route.run_when.as_ref().map(|gate| gate.column.as_str());
        let named = [
            (route.text_column.as_deref().filter(|_| rows), "text_column"),
            (gate.filter(|_| rows), "run_when"),
            (route.status_column.as_deref(), "status_column"),
            (route.pull_request_column.as_deref(), "pull_request_column"),
        ];
        for (column, key) in named {
            if let Some(column) = column {
                self.find(column, key)?;
            }
        }
        if !created {
            return Ok((id, None));
        }
        let created = self.find(&route.created_column, "created_column")?;
        if !TIME_TYPES.contains(&created.base_type) {
            return Err(Misfit::CreatedType(format!(
                "column {} of table {} is of type {}: the route's `created_column` must be a \
                 `timestamp with time zone` column (a `timestamp` is read as UTC; a `date` works too)",
                quoted_for_message(&created.name),
                self.name,
                created.type_sql
            )));
        }
        Ok((id, Some(created)))
    }
}

impl super::Database {
    /// Checks that the route fits its table: the table exists, with the route's id and text
    /// columns, and with `created` its created column, of a time type. A [`Misfit`] in the
    /// error's chain says the config is wrong; any other error, that the catalog could not be
    /// read.
    pub async fn check_columns(&self, route: &Route, created: bool) -> Result<()> {
        let table = CatalogTable::read(&self.client, route).await?;
        table.columns(route, true, created)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("feedbacks"), "\"feedbacks\"");
        assert_eq!(quote_ident("Say \"what\""), "\"Say \"\"what\"\"\"");
        assert_eq!(
            quote_relation("my-app", "Feedback Items"),
            "\"my-app\".\"Feedback Items\""
        );
        assert_eq!(table_for_message("public", "feedbacks"), "public.feedbacks");
        assert_eq!(
            table_for_message("my-app", "Feedback Items"),
            "\"my-app\".\"Feedback Items\""
        );
    }
}
