//! The pure half of the pipeline: from a database event and the routes to what would be done.
//! No I/O, so `preview` can print it and tests can table it.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use serde_json::{Map, Value};

use crate::config::Route;
use crate::event::RowEvent;
use crate::forge::Base;
use crate::identity::{BranchName, IdError, RowId, Slug};
use crate::templates::{
    cut_text, PayloadContext, PayloadError, PayloadTemplate, MAX_TEXT_JSON_BYTES,
};

/// The configured routes, each with its payload template compiled: what plans are made from.
pub struct Routes {
    routes: Vec<CompiledRoute>,
}

/// One configured route and its compiled payload template.
#[derive(Debug, Clone)]
pub struct CompiledRoute {
    pub route: Arc<Route>,
    pub payload: Arc<PayloadTemplate>,
}

impl Routes {
    /// Reads and compiles each route's payload template (the built-in one when none is named);
    /// the error names the file and, for a syntax error, the line.
    pub fn compile(routes: &[Arc<Route>]) -> anyhow::Result<Routes> {
        let routes = routes
            .iter()
            .map(|route| {
                let payload = match &route.payload_template {
                    Some(path) => compile_file(route, path)?,
                    None => PayloadTemplate::builtin(),
                };
                Ok(CompiledRoute {
                    route: Arc::clone(route),
                    payload: Arc::new(payload),
                })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Routes { routes })
    }

    pub fn iter(&self) -> impl Iterator<Item = &CompiledRoute> {
        self.routes.iter()
    }

    /// The route for a table, if one takes it.
    pub fn find(&self, schema: &str, table: &str) -> Option<&CompiledRoute> {
        self.routes
            .iter()
            .find(|r| r.route.schema == schema && r.route.table == table)
    }

    /// The route whose table is `table` (`schema.table` or a bare table name), for `redo`.
    pub fn for_table(&self, table: &str) -> Option<&CompiledRoute> {
        self.routes.iter().find(|r| match table.split_once('.') {
            Some((schema, name)) => r.route.schema == schema && r.route.table == name,
            None => r.route.table == table,
        })
    }

    /// Decides what an event means.
    pub fn plan(&self, event: RowEvent) -> Result<Planned, PlanError> {
        let Some(compiled) = self.find(&event.schema, &event.table) else {
            return Ok(Planned::Ignored(format!(
                "no route for table {}.{}",
                event.schema, event.table
            )));
        };
        if !compiled.route.events.contains(&event.kind) {
            return Ok(Planned::Ignored(format!(
                "the route for {}.{} does not take {} events",
                event.schema, event.table, event.kind
            )));
        }
        compiled.plan_row(event.record).map(Planned::Run)
    }
}

fn compile_file(route: &Route, path: &Path) -> anyhow::Result<PayloadTemplate> {
    PayloadTemplate::from_file(path)
        .with_context(|| format!("payload_template of the route for {}", route.table_name()))
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
    pub payload: Arc<PayloadTemplate>,
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

impl CompiledRoute {
    /// Plans one row of the route's table: the pipeline's input from the webhook, the sweep
    /// and redo.
    pub fn plan_row(&self, record: Map<String, Value>) -> Result<Plan, PlanError> {
        let route = &self.route;
        let raw_id = record
            .get(&route.id_column)
            .ok_or_else(|| PlanError::NoId {
                column: route.id_column.clone(),
                table: route.table_name(),
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
            payload: Arc::clone(&self.payload),
            id,
            branch,
            text,
            record,
        })
    }
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
        self.payload.render(&PayloadContext {
            id: self.id.as_str(),
            branch: self.branch.as_str(),
            base: &base.branch,
            base_sha: base.sha.as_str(),
            repo: route.repo.to_string(),
            schema: &route.schema,
            table: &route.table,
            event_type: route.event_type.as_str(),
            text,
            text_truncated,
            record: &self.record,
        })
    }
}

/// [`crate::config::TEST_LOCAL_CONFIG`]'s routes, compiled.
#[cfg(test)]
pub(crate) fn test_routes() -> Routes {
    let config = crate::config::Config::parse(
        crate::config::TEST_LOCAL_CONFIG,
        Path::new("rowbranch.toml"),
        &|_| None,
    )
    .expect("the test config parses");
    Routes::compile(&config.routes).expect("the built-in template compiles")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::event::EventKind;
    use crate::forge::Sha;

    fn routes() -> Routes {
        test_routes()
    }

    fn event(kind: EventKind, table: &str, record: Value) -> RowEvent {
        RowEvent {
            kind,
            schema: "public".into(),
            table: table.into(),
            record: record.as_object().unwrap().clone(),
        }
    }

    fn planned(e: RowEvent) -> Plan {
        match routes().plan(e).unwrap() {
            Planned::Run(plan) => plan,
            Planned::Ignored(why) => panic!("ignored: {why}"),
        }
    }

    #[test]
    fn an_insert_plans_its_branch_from_id_and_text() {
        let plan = planned(event(
            EventKind::Insert,
            "feedbacks",
            json!({"id": 42, "message": "Add dark mode!"}),
        ));
        assert_eq!(plan.id.as_str(), "42");
        assert_eq!(plan.branch.as_str(), "feedback/42-add-dark-mode");
        assert_eq!(plan.route.repo.to_string(), "acme/app");
    }

    #[test]
    fn a_row_without_text_gets_a_branch_without_slug() {
        for record in [
            json!({"id": 7}),
            json!({"id": 7, "message": null}),
            json!({"id": 7, "message": ""}),
        ] {
            assert_eq!(
                planned(event(EventKind::Insert, "feedbacks", record))
                    .branch
                    .as_str(),
                "feedback/7"
            );
        }
    }

    #[test]
    fn other_tables_and_events_are_ignored_with_the_reason() {
        let ignored = |e| match routes().plan(e).unwrap() {
            Planned::Ignored(why) => why,
            Planned::Run(p) => panic!("planned {}", p.branch),
        };
        assert!(
            ignored(event(EventKind::Insert, "comments", json!({"id": 1}))).contains("no route")
        );
        assert!(
            ignored(event(EventKind::Update, "feedbacks", json!({"id": 1}))).contains("UPDATE")
        );
        assert!(
            ignored(event(EventKind::Delete, "feedbacks", json!({"id": 1}))).contains("DELETE")
        );
    }

    #[test]
    fn a_row_without_a_usable_id_is_refused_with_the_column() {
        let err = routes()
            .plan(event(
                EventKind::Insert,
                "feedbacks",
                json!({"message": "x"}),
            ))
            .unwrap_err();
        assert!(err.to_string().contains("`id`"), "{err}");
        let err = routes()
            .plan(event(EventKind::Insert, "feedbacks", json!({"id": "a b"})))
            .unwrap_err();
        assert!(matches!(err, PlanError::BadId { .. }), "{err:?}");
    }

    #[test]
    fn the_payload_carries_the_row_and_its_base() {
        let plan = planned(event(
            EventKind::Insert,
            "feedbacks",
            json!({"id": "9", "message": "Hi"}),
        ));
        let base = Base {
            branch: "main".into(),
            sha: Sha::new("abc"),
        };
        let payload = plan.client_payload(&base).unwrap();
        assert_eq!(payload["id"], "9");
        assert_eq!(payload["branch"], "feedback/9-hi");
        assert_eq!(payload["base"], "main");
        assert_eq!(payload["base_sha"], "abc");
        assert_eq!(payload["table"], "feedbacks");
        assert_eq!(payload["text"], "Hi");
        assert_eq!(payload["text_truncated"], false);
    }

    #[test]
    fn a_long_text_is_cut_and_says_so() {
        let text = "word ".repeat(30_000);
        let plan = planned(event(
            EventKind::Insert,
            "feedbacks",
            json!({"id": 1, "message": text}),
        ));
        let base = Base {
            branch: "main".into(),
            sha: Sha::new("abc"),
        };
        let payload = plan.client_payload(&base).unwrap();
        assert_eq!(payload["text_truncated"], true);
        assert!(payload["text"].as_str().unwrap().len() < text.len());
    }
}
