//! Reading a route's table: the rows of a window for the reconcile sweep (§6), one row by its id
//! for `redo` (§5) and `explain` (§1).
//!
//! A gated route's scheduled sweep also reads, at any age from `sweep_from`, the rows that
//! pass and have not started by their state ([`Database::unstarted`]), keyset-paged the same
//! way.
//!
//! A row is `to_jsonb(row)`, the shape Supabase's webhook carries (numbers stay
//! numbers, uuids and timestamps are strings). The sweep pages with a keyset on
//! `(created_column, id_column)`, so a table of millions streams in bounded memory and rows
//! inserted during the sweep neither shift nor repeat a page. The cursor is compared in the
//! columns' own types: both are bound as text and cast to their columns' types as the catalog
//! spells them (`format_type`), so a created value compares exactly and an integer id orders
//! as a number (`9 < 10`), a uuid as a uuid, a text id by the column's collation. An index on
//! `(created_column, id_column)` (or on `created_column`) makes each page an index range scan;
//! without one each page is a scan of the table.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value};

use super::error::data_error;
use super::shape::{quoted_for_message, Shape};
use super::status::{states_but, RowState};
use super::{quote_ident, Database, Error, Result};
use crate::config::Route;

/// One row: the whole row as JSON (as the webhook would carry it: `to_jsonb`), and when it was
/// created.
#[derive(Debug, Clone)]
pub struct Row {
    pub record: Map<String, Value>,
    pub created_at: DateTime<Utc>,
}

impl Database {
    /// The route's rows with created_column >= since, in keyset pages of `page_size` rows ordered
    /// by (created_column, id_column) — so a table of millions streams in bounded memory.
    ///
    /// A row whose created column is NULL is outside every window (`NULL >= since` is not true),
    /// and so is a row whose id is NULL (it has no identity to claim a branch with). A
    /// `page_size` of 0 is taken as 1. Nothing is read until the first [`RowPages::next_page`],
    /// which also checks the table as [`Database::check_columns`] does.
    pub fn since<'a>(
        &'a self,
        route: &'a Route,
        since: DateTime<Utc>,
        page_size: usize,
    ) -> RowPages<'a> {
        RowPages {
            database: self,
            route,
            page_size: page_size.max(1),
            shape: None,
            cursor: Some((since.to_rfc3339_opts(SecondsFormat::Micros, true), None)),
            unstarted: None,
        }
    }

    /// [`Database::since`] from `from` and before `before`, of the rows whose `status_column`
    /// says they never started: NULL, `waiting`, or a value rowbranch does not know (a
    /// column default such as `'new'`). For a gated route, whose rows that pass the gate are
    /// the ones read: an approval whose delivery was lost, whatever the row's age.
    pub fn unstarted<'a>(
        &'a self,
        route: &'a Route,
        status_column: &str,
        from: DateTime<Utc>,
        before: DateTime<Utc>,
        page_size: usize,
    ) -> RowPages<'a> {
        RowPages {
            unstarted: Some((
                quote_ident(status_column),
                before.to_rfc3339_opts(SecondsFormat::Micros, true),
            )),
            ..self.since(route, from, page_size)
        }
    }

    /// The id as the table's id column holds it, in the JSON `to_jsonb` gives (so as a webhook
    /// would carry it): `042` is `42` for a bigint column, a uuid in its canonical spelling.
    /// `Ok(None)` when the text is no value of the column's type (`abc` for a bigint id).
    /// For `explain`, to name a row's branch without the row.
    pub async fn typed_id(&self, route: &Route, id: &str) -> Result<Option<Value>> {
        let shape = Shape::read(&self.client, route, true).await?;
        let sql = format!("select to_jsonb(cast($1::text as {}))", shape.id_type);
        match super::value(&self.client, &sql, &[&id]).await {
            Err(e) if data_error(&e) => Ok(None),
            found => found.map_err(|e| shape.query_error(e)),
        }
    }

    /// One row by its id (the id as text, bound in the id column's own type), for `redo`.
    ///
    /// `Ok(None)` when no row has that id. An error when the text is no value of the column's
    /// type (`abc` for a bigint id), when two rows share the id (the id column must be unique),
    /// and when the row's created column is NULL.
    pub async fn by_id(&self, route: &Route, id: &str) -> Result<Option<Row>> {
        let shape = Shape::read(&self.client, route, true).await?;
        let sql = shape.select(&format!("where {} limit 2", shape.is_id()));
        let found = super::query(&self.client, &sql, &[&id]).await;
        let found = found.map_err(|cause| {
            if !data_error(&cause) {
                return shape.query_error(cause);
            }
            let what = format!(
                "{id:?} is not an id of table {}: its id column {} is of type {}",
                shape.name,
                quoted_for_message(&route.id_column),
                shape.id_type,
            );
            Error::query(what, cause)
        })?;
        let row = match found.as_slice() {
            [] => return Ok(None),
            [row] => row,
            _ => {
                return Err(Error::Row(format!(
                    "more than one row of table {} has id {id}: the id column {} must be unique \
                     (the primary key, usually), since the id is the row's identity",
                    shape.name,
                    quoted_for_message(&route.id_column)
                )))
            }
        };
        let Some(row) = shape.decode(row)? else {
            return Err(Error::Row(format!(
                "row {id} of table {} has no {} (NULL): set it, e.g. `update {} set {} = now() where {} = '{}'`",
                shape.name,
                quoted_for_message(&route.created_column),
                shape.relation,
                shape.created,
                shape.id,
                id.replace('\'', "''")
            )));
        };
        Ok(Some(row))
    }
}

/// The route's rows of a window, a page at a time; see [`Database::since`].
pub struct RowPages<'a> {
    database: &'a Database,
    route: &'a Route,
    page_size: usize,
    /// The table's shape, read for the first page.
    shape: Option<Shape>,
    /// Where the next page starts, `None` when done: the window's start as text (RFC 3339),
    /// or past the last row returned, its created value and its id, as text in their columns'
    /// types.
    cursor: Option<(String, Option<String>)>,
    /// For [`Database::unstarted`]: the quoted status column, and the end of the read as text.
    unstarted: Option<(String, String)>,
}

impl RowPages<'_> {
    /// The next page; empty when done. After an error, calling it again retries the same page.
    pub async fn next_page(&mut self) -> Result<Vec<Row>> {
        let Some((from, id)) = &self.cursor else {
            return Ok(Vec::new());
        };
        let shape = match &mut self.shape {
            Some(shape) => shape,
            empty => empty.insert(Shape::read(&self.database.client, self.route, true).await?),
        };
        let (c, i) = (&shape.created, &shape.id);
        let (ct, it) = (&shape.created_type, &shape.id_type);
        // From `since`, or past the cursor: `r.c >= $1` repeats what the row comparison implies,
        // so that an index on the created column alone can bound the scan too.
        let order = format!("order by r.{c}, r.{i}");
        // A gated route's rows that pass, compared as JSON as the webhook's rows are (so `1`
        // is `1.0` and `"true"` is not `true`).
        let id = id.as_deref();
        let limit = i64::try_from(self.page_size).unwrap_or(i64::MAX);
        let mut params: Vec<&dyn super::Arg> = vec![from, &id, &limit];
        let gate = match &shape.gate {
            Some((column, equals)) => {
                params.push(equals);
                format!("and to_jsonb(r.{column}) = ${}::text::jsonb", params.len())
            }
            None => String::new(),
        };
        let unstarted = match &self.unstarted {
            Some((status, before)) => {
                params.push(before);
                // rowbranch's states from `dispatched` on: the row has started.
                format!(
                    "and r.{c} < cast(${}::text as {ct}) \
                     and coalesce(r.{status}::text, '') not in ({})",
                    params.len(),
                    states_but(|s| *s == RowState::Waiting)
                )
            }
            None => String::new(),
        };
        let sql = shape.select(&format!(
            "where r.{c} >= cast($1::text as {ct}) and r.{i} is not null {gate} {unstarted} \
             and ($2::text is null or (r.{c}, r.{i}) > (cast($1::text as {ct}), cast($2::text as {it}))) \
             {order} limit $3"
        )) + " "
            + &order;
        let found = super::query(&self.database.client, &sql, &params)
            .await
            .map_err(|e| shape.query_error(e))?;
        let mut page = Vec::with_capacity(found.len());
        for row in &found {
            // The WHERE clause leaves out NULL created values; a NULL here would be a bug.
            let Some(row) = shape.decode(row)? else {
                return Err(Error::Row("a row without a created value".to_owned()));
            };
            page.push(row);
        }
        self.cursor = match found.last() {
            Some(last) if page.len() >= self.page_size => Some(shape.cursor(last)?),
            _ => None,
        };
        Ok(page)
    }
}
