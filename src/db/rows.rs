//! Reading a route's table: the rows of a window for the reconcile sweep (§6), one row by its id
//! for `redo` (§5) and `explain` (§1).
//!
//! A row is `to_jsonb(row)`, the shape Supabase's webhook carries (numbers stay
//! numbers, uuids and timestamps are strings). The sweep pages with a keyset on
//! `(created_column, id_column)`, so a table of millions streams in bounded memory and rows
//! inserted during the sweep neither shift nor repeat a page. The cursor is compared in the
//! columns' own types: the created value is bound in its own type, and the id is bound as text and
//! cast to the id column's type as the catalog spells it (`format_type`), so an integer id orders
//! as a number (`9 < 10`), a uuid as a uuid, a text id by the column's collation. An index on
//! `(created_column, id_column)` (or on `created_column`) makes each page an index range scan;
//! without one each page is a scan of the table.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use tokio_postgres::types::Type;

use super::shape::{quoted_for_message, CreatedValue, Shape};
use super::{describe, Database, Error, Result};
use crate::config::Route;

/// One row: the whole row as JSON (as the webhook would carry it: `to_jsonb`), and when it was
/// created.
#[derive(Debug, Clone)]
pub struct Row {
    pub record: Map<String, Value>,
    pub created_at: DateTime<Utc>,
}

impl Database {
    /// Checks that the route's table and its id, created and text columns exist; the error
    /// names the missing one (`table public.feedbacks has no column "created_at"`...).
    pub async fn check(&self, route: &Route) -> Result<()> {
        Shape::read(&self.client, route).await.map(|_| ())
    }

    /// Checks that the route fits its table: the table exists, with the route's id and text
    /// columns, and with `created` its created column, of a time type. A [`Misfit`] in the
    /// error's chain says the config is wrong; any other error, that the catalog could not be
    /// read.
    pub async fn check_columns(&self, route: &Route, created: bool) -> Result<()> {
        super::shape::check(&self.client, route, created).await
    }

    /// The route's rows with created_column >= since, in keyset pages of `page_size` rows ordered
    /// by (created_column, id_column) — so a table of millions streams in bounded memory.
    ///
    /// A row whose created column is NULL is outside every window (`NULL >= since` is not true),
    /// and so is a row whose id is NULL (it has no identity to claim a branch with). A
    /// `page_size` of 0 is taken as 1. Nothing is read until the first [`RowPages::next_page`],
    /// which also checks the table as [`Database::check`] does.
    pub fn since<'a>(
        &'a self,
        route: &'a Route,
        since: DateTime<Utc>,
        page_size: usize,
    ) -> RowPages<'a> {
        RowPages {
            database: self,
            route,
            since,
            page_size: page_size.max(1),
            plan: None,
            cursor: Cursor::First,
        }
    }

    /// The id as the table's id column holds it, in the JSON `to_jsonb` gives (so as a webhook
    /// would carry it): `042` is `42` for a bigint column, a uuid in its canonical spelling.
    /// `Ok(None)` when the text is no value of the column's type (`abc` for a bigint id).
    /// For `explain`, to name a row's branch without the row.
    pub async fn typed_id(&self, route: &Route, id: &str) -> Result<Option<Value>> {
        let shape = Shape::read(&self.client, route).await?;
        let sql = format!("select to_jsonb(cast($1::text as {}))", shape.id_type);
        match self.client.query_typed(&sql, &[(&id, Type::TEXT)]).await {
            Ok(rows) => Ok(rows.first().and_then(|r| r.get::<_, Option<Value>>(0))),
            Err(e) if e.code().is_some_and(|c| c.code().starts_with("22")) => Ok(None),
            Err(e) => Err(shape.query_error(e)),
        }
    }

    /// One row by its id (the id as text, bound in the id column's own type), for `redo`.
    ///
    /// `Ok(None)` when no row has that id. An error when the text is no value of the column's
    /// type (`abc` for a bigint id), when two rows share the id (the id column must be unique),
    /// and when the row's created column is NULL.
    pub async fn by_id(&self, route: &Route, id: &str) -> Result<Option<Row>> {
        let shape = Shape::read(&self.client, route).await?;
        let sql = shape.select(&format!(
            "where r.{} = cast($1::text as {}) limit 2",
            shape.id, shape.id_type
        ));
        let found = self
            .client
            .query_typed(&sql, &[(&id, Type::TEXT)])
            .await
            .map_err(|cause| {
                let is_data_error = cause.code().is_some_and(|c| c.code().starts_with("22"));
                if is_data_error {
                    Error::Query {
                        message: format!(
                            "{id:?} is not an id of table {}: its id column {} is of type {} ({})",
                            shape.name,
                            quoted_for_message(&route.id_column),
                            shape.id_type,
                            describe(&cause)
                        ),
                        cause,
                    }
                } else {
                    shape.query_error(cause)
                }
            })?;
        match found.as_slice() {
            [] => Ok(None),
            [row] => {
                let (row, created, _) = shape.decode(row)?;
                if created.is_none() {
                    return Err(Error::Row(format!(
                        "row {id} of table {} has no {} (NULL): set it, e.g. `update {} set {} = now() where {} = '{}'`",
                        shape.name,
                        quoted_for_message(&route.created_column),
                        shape.relation,
                        shape.created,
                        shape.id,
                        id.replace('\'', "''")
                    )));
                }
                Ok(Some(row))
            }
            _ => Err(Error::Row(format!(
                "more than one row of table {} has id {id}: the id column {} must be unique (the \
                 primary key, usually), since the id is the row's identity",
                shape.name,
                quoted_for_message(&route.id_column)
            ))),
        }
    }
}

/// The route's rows of a window, a page at a time; see [`Database::since`].
pub struct RowPages<'a> {
    database: &'a Database,
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
    pub async fn next_page(&mut self) -> Result<Vec<Row>> {
        if matches!(self.cursor, Cursor::Done) {
            return Ok(Vec::new());
        }
        if self.plan.is_none() {
            let shape = Shape::read(&self.database.client, self.route).await?;
            self.plan = Some(Plan::new(shape));
        }
        let Some(plan) = &self.plan else {
            unreachable!("the plan was made above")
        };
        let limit = i64::try_from(self.page_size).unwrap_or(i64::MAX);
        let client = &self.database.client;
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
        .map_err(|e| plan.shape.query_error(e))?;

        let mut page = Vec::with_capacity(found.len());
        let mut last = None;
        for row in &found {
            let (row, created, id) = plan.shape.decode(row)?;
            // The WHERE clause leaves out NULL created values; a NULL here would be a bug.
            let created =
                created.ok_or_else(|| Error::Row("a row without a created value".to_owned()))?;
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
