//! The pure half of the pipeline: from a database event and the config to what would be done.
//! No I/O, so `preview` can print it and tests can table it.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::config::{Config, Route};
use crate::forge::Base;
use crate::identity::{BranchName, IdError, RowId, Slug};
use crate::templates::{cut_text, PayloadContext, PayloadError, MAX_TEXT_JSON_BYTES};

/// A database change as the webhook carried it, already checked for shape.
#[derive(Debug, Clone)]
pub struct RowEvent {
    /// `INSERT`, `UPDATE` or `DELETE`.
    pub kind: String,
    pub schema: String,
    pub table: String,
    /// The row: `record`, or `old_record` for a DELETE.
    pub record: Map<String, Value>,
}

/// What to do with an event.
#[derive(Debug)]
pub enum Planned {
    /// No route takes it; the text says why.
    Ignored(String),
    Run(Plan),
}

/// One row's work: the branch to claim and what to dispatch.
#[derive(Debug, Clone)]
pub struct Plan {
    pub route: Arc<Route>,
    pub id: RowId,
    pub branch: BranchName,
    /// The row's text, if the route names a text column and the row has one.
    pub text: Option<String>,
    pub record: Map<String, Value>,
}

/// Why an event that a route takes cannot be planned; the text is the 422 message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the row has no `{column}` column, which the route for {table} uses as its id")]
    NoId { column: String, table: String },
    #[error("the row's `{column}` is not a usable id: {source}")]
    BadId {
        column: String,
        #[source]
        source: IdError,
    },
}

/// Decides what an event means under `config`.
pub fn plan(config: &Config, event: RowEvent) -> Result<Planned, PlanError> {
    let Some(route) = config.route(&event.schema, &event.table) else {
        return Ok(Planned::Ignored(format!(
            "no route for table {}.{}",
            event.schema, event.table
        )));
    };
    if !route.events.iter().any(|e| e.as_str() == event.kind) {
        return Ok(Planned::Ignored(format!(
            "the route for {}.{} does not take {} events",
            event.schema, event.table, event.kind
        )));
    }
    plan_row(route, event.record).map(Planned::Run)
}

/// Plans one row of a route's table: the pipeline's input from the webhook, the sweep and redo.
pub fn plan_row(route: &Arc<Route>, record: Map<String, Value>) -> Result<Plan, PlanError> {
    let raw_id = record
        .get(&route.id_column)
        .ok_or_else(|| PlanError::NoId {
            column: route.id_column.clone(),
            table: format!("{}.{}", route.schema, route.table),
        })?;
    let id = RowId::parse(raw_id).map_err(|source| PlanError::BadId {
        column: route.id_column.clone(),
        source,
    })?;
    let text = route
        .text_column
        .as_ref()
        .and_then(|column| record.get(column))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let slug = text
        .as_deref()
        .and_then(|t| Slug::new(t, route.slug_max_len));
    let branch = BranchName::new(&route.branch_prefix, &id, slug.as_ref());
    Ok(Plan {
        route: Arc::clone(route),
        id,
        branch,
        text,
        record,
    })
}

impl Plan {
    /// The `client_payload` to dispatch once the branch is claimed at `base`.
    pub fn client_payload(&self, base: &Base) -> Result<Map<String, Value>, PayloadError> {
        let (text, text_truncated) = match self.text.as_deref() {
            Some(t) => {
                let (kept, cut) = cut_text(t, MAX_TEXT_JSON_BYTES);
                (Some(kept), cut)
            }
            None => (None, false),
        };
        let route = &self.route;
        route.payload_template.render(&PayloadContext {
            id: self.id.as_str(),
            branch: self.branch.as_str(),
            base: &base.branch,
            base_sha: &base.sha,
            repo: route.repo.to_string(),
            schema: &route.schema,
            table: &route.table,
            event_type: &route.event_type,
            text,
            text_truncated,
            record: &self.record,
        })
    }
}
