//! The pure half of the pipeline: from a database event and the routes to what would be done.
//! No I/O, so `preview` can print it and tests can table it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::config::{Config, Intake, PayloadTemplateSource, Route};
use crate::event::{EventKind, RowEvent, RowState};
use crate::identity::{excerpt, BranchName, NameError, RowId, Slug};
use crate::pipeline::template::{
    cut_text, PayloadContext, PayloadError, PayloadTemplate, RecordUse, MAX_TEXT_JSON_BYTES,
};
use crate::reason::Reason;

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
    /// the error names the config file, the template's file and, for a syntax error, the line.
    pub fn compile(config: &Config) -> Result<Routes, RouteError> {
        let routes = (config.routes.iter())
            .map(|route| {
                let inline = "payload_template_inline";
                let (key, payload) = match &route.payload_template {
                    Some(PayloadTemplateSource::File(path)) => {
                        ("payload_template", PayloadTemplate::from_file(path))
                    }
                    Some(PayloadTemplateSource::Inline(text)) => {
                        (inline, PayloadTemplate::from_text(text, inline))
                    }
                    None => ("", Ok(PayloadTemplate::builtin())),
                };
                let payload = payload.map_err(|source| RouteError {
                    config: config.source.clone(),
                    key,
                    table: route.table_name(),
                    source,
                })?;
                Ok(CompiledRoute {
                    route: Arc::clone(route),
                    payload: Arc::new(payload),
                })
            })
            .collect::<Result<_, RouteError>>()?;
        Ok(Routes { routes })
    }

    pub fn iter(&self) -> impl Iterator<Item = &CompiledRoute> {
        self.routes.iter()
    }

    /// The route whose table is `table` (`schema.table` or a bare table name), for `redo`.
    pub fn for_table(&self, table: &str) -> Option<&CompiledRoute> {
        self.routes.iter().find(|r| match table.split_once('.') {
            Some((schema, name)) => r.route.schema == schema && r.route.table == name,
            None => r.route.table == table,
        })
    }

    /// The route that takes an event which came from the queue (`from_queue`) or a webhook,
    /// found once for the event's whole way: a route takes only the rows of its own intake, and
    /// the events it names.
    pub fn route(&self, from_queue: bool, event: &RowEvent) -> Result<&CompiledRoute, Ignored> {
        let table =
            |r: &&CompiledRoute| r.route.schema == event.schema && r.route.table == event.table;
        let Some(compiled) = self.routes.iter().find(table) else {
            return Err(Ignored::NoRoute {
                table: format!("{}.{}", event.schema, event.table),
            });
        };
        if compiled.route.reads_the_queue() != from_queue {
            return Err(Ignored::OtherIntake {
                route: Arc::clone(&compiled.route),
            });
        }
        let route = &compiled.route;
        if !route.events.contains(&event.kind) {
            return Err(Ignored::Event {
                route: Arc::clone(route),
                kind: event.kind,
            });
        }
        let Some(gate) = &route.run_when else {
            return Ok(compiled);
        };
        // The gate reads a few columns of each row, the record split into them once; a row
        // whose column cannot be read is held.
        let column = |fields: &HashMap<&str, &RawValue>, name: &str| -> Option<Value> {
            serde_json::from_str(fields.get(name)?.get()).ok()
        };
        let record = split(&event.record);
        let now = column(&record, &gate.column);
        if !gate.passes(now.as_ref()) {
            let found = match &now {
                Some(value) => format!("holds {}", excerpt(&value.to_string())),
                None => format!("has no `{}` column", gate.column),
            };
            let id = column(&record, &route.id_column).and_then(|id| RowId::parse(&id).ok());
            return Err(Ignored::NotReady {
                route: Arc::clone(route),
                why: format!("run_when is {gate} and the row {found}"),
                id,
            });
        }
        // An UPDATE runs the row only as it passes: the event that made it pass ran it (an
        // UPDATE without its old row is taken as passing now; the claim makes a repeat a no-op).
        let before = (event.old_record.as_deref()).map(|old| column(&split(old), &gate.column));
        // Approved again after it ran: the state rowbranch wrote says so even where its branch
        // is gone (merged, deleted) and the text was edited since (another slug).
        let ran = (route.status_column.as_deref())
            .and_then(|status| column(&record, status))
            .and_then(|state| RowState::parse(state.as_str()?))
            .is_some_and(|state| !matches!(state, RowState::Waiting | RowState::Refused));
        let passed = before.is_some_and(|v| gate.passes(v.as_ref()));
        if event.kind == EventKind::Update && (passed || ran) {
            return Err(Ignored::PassedBefore {
                route: Arc::clone(route),
                gate: gate.to_string(),
            });
        }
        Ok(compiled)
    }
}

/// A record's columns, each still JSON text (none when it is not an object).
fn split(record: &RawValue) -> HashMap<&str, &RawValue> {
    serde_json::from_str(record.get()).unwrap_or_default()
}

/// A route whose payload template could not be used: the config file, the key and the route,
/// then the template and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {key} of the route for {table}", config.display())]
pub struct RouteError {
    config: PathBuf,
    /// `payload_template` or `payload_template_inline`.
    key: &'static str,
    table: String,
    /// The template's file (or where in the config it is) and what is wrong with it.
    source: anyhow::Error,
}

/// Why an event is no work; the text is the `ignored` answer's message.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Ignored {
    /// No route for the table (`schema.table`).
    #[error("no route for table {table}")]
    NoRoute { table: String },
    /// The route does not take this kind of event.
    #[error("the route for {} does not take {kind} events", route.table_name())]
    Event {
        route: Arc<Route>,
        kind: crate::event::EventKind,
    },
    /// The route reads its rows another way (a webhook delivery for a route that reads the
    /// queue, or a queue message for a webhook route).
    #[error(
        "the route for {} reads its rows from {}, not from here",
        route.table_name(),
        match route.intake {
            Intake::Pgmq { .. } => "the queue (intake = \"pgmq\")",
            Intake::Webhook => "webhook deliveries (intake = \"webhook\")",
        }
    )]
    OtherIntake { route: Arc<Route> },
    /// The row does not pass the route's gate (`run_when`): `why` says what the gate wants and
    /// what the row holds.
    #[error("the row is held at the gate: {why}")]
    NotReady {
        route: Arc<Route>,
        why: String,
        /// The row's id, when it is one rowbranch can use.
        id: Option<RowId>,
    },
    /// An UPDATE of a row that passed the gate before it.
    #[error("the row passed the gate ({gate}) before this update, and ran then")]
    PassedBefore { route: Arc<Route>, gate: String },
}

impl Ignored {
    /// The answer's `reason`.
    pub fn reason(&self) -> Reason {
        match self {
            Ignored::NoRoute { .. } => Reason::NoRoute,
            Ignored::Event { .. } => Reason::Event,
            Ignored::NotReady { .. } => Reason::NotReady,
            Ignored::PassedBefore { .. } => Reason::PassedBefore,
            Ignored::OtherIntake { route } => match route.intake {
                Intake::Pgmq { .. } => Reason::PgmqIntake,
                Intake::Webhook => Reason::WebhookIntake,
            },
        }
    }

    /// The route it concerns, if one.
    pub fn route(&self) -> Option<&Arc<Route>> {
        match self {
            Ignored::NoRoute { .. } => None,
            Ignored::Event { route, .. }
            | Ignored::OtherIntake { route }
            | Ignored::NotReady { route, .. }
            | Ignored::PassedBefore { route, .. } => Some(route),
        }
    }
}

/// One row's work: the branch to claim and what to dispatch. It keeps only what its payload
/// needs of the row (the text, cut to what the payload can carry; the columns the template
/// reads), so that a row waiting its turn costs little memory however large the row is.
#[derive(Debug, Clone)]
pub struct Plan {
    pub route: Arc<Route>,
    pub payload: Arc<PayloadTemplate>,
    pub id: RowId,
    pub branch: BranchName,
    /// The row's text, if the route names a text column and the row has one, cut on a
    /// character boundary to what the payload can carry.
    pub text: Option<String>,
    /// Whether `text` was cut.
    pub text_truncated: bool,
    /// What the payload template reads of the row, as JSON text: the columns it names, or the
    /// whole record when it reads it some other way; parsed when rendered.
    record: Box<RawValue>,
}

/// Why an event that a route takes cannot be planned; the text is the 422 message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The record lacks a column the route names (absent, not null). Supabase's webhook and the
    /// queue's trigger carry every column of the row, so the route names a column its table
    /// does not have: a mistake in the config, which a redelivery cannot mend.
    #[error(
        "the row has no `{column}` column, which the route for {table} uses as its {use_}; the \
         row's columns: {columns}. Set {key} to one of them{or_none}",
        use_ = if *.key == "id_column" { "id" } else { "text" },
        or_none = if *.key == "text_column" { " (or \"\" for no text)" } else { "" }
    )]
    MissingColumn {
        /// The route's `schema.table`.
        table: String,
        column: String,
        /// The route's key that names it: `id_column` or `text_column`.
        key: &'static str,
        /// The record's columns, sorted, as the message lists them: at most [`LISTED_NAMES`],
        /// each cut to a few dozen characters and with its control characters escaped.
        columns: String,
        /// The row's id, when the id column was there to give it.
        id: Option<String>,
    },
    #[error("the row's `{column}` is not a usable id: {source}")]
    BadId {
        column: String,
        /// The id as it came, as JSON, cut to a few dozen characters.
        received: String,
        /// The id whole, as text, when it came as a string or a number: what a refused row's
        /// state is written under.
        whole: Option<String>,
        #[source]
        source: NameError,
    },
    #[error("the row is not a JSON object of columns: {detail}")]
    NotAnObject { detail: String },
    /// A column the plan reads is no JSON value serde_json can hold: the body's fault (400).
    #[error("the body is not valid JSON: {detail}")]
    NotJson { detail: String },
}

impl PlanError {
    /// Why, as answers, log lines and dead letters name it: `malformed` when the row's JSON
    /// itself is at fault (answered 400), else its id or the route's columns (422).
    pub fn reason(&self) -> Reason {
        match self {
            PlanError::MissingColumn { .. } => Reason::MissingColumn,
            PlanError::BadId { .. } => Reason::BadId,
            PlanError::NotAnObject { .. } | PlanError::NotJson { .. } => Reason::Malformed,
        }
    }

    /// The column at fault, when one is, and the row's id as far as it is known: the id itself,
    /// or an excerpt of an unusable one as it came.
    pub fn column_and_id(&self) -> Option<(&str, Option<String>)> {
        match self {
            PlanError::MissingColumn { column, id, .. } => Some((column, id.clone())),
            PlanError::BadId {
                column, received, ..
            } => Some((column, Some(received.clone()))),
            PlanError::NotAnObject { .. } | PlanError::NotJson { .. } => None,
        }
    }

    /// The id of a row refused for good that can still be named in its table: one whose id
    /// rowbranch refuses, or that lacks the text column (SPEC §2, the state `refused`).
    pub fn refused_id(&self) -> Option<&str> {
        match self {
            PlanError::MissingColumn {
                key: "text_column",
                id,
                ..
            } => id.as_deref(),
            PlanError::BadId { whole, .. } => whole.as_deref(),
            _ => None,
        }
    }
}

/// How many of a record's column names a message lists.
const LISTED_NAMES: usize = 20;

impl CompiledRoute {
    /// Plans a row: `record` is a JSON object (a webhook's or a queue message's, which the
    /// body's parser has checked, or a row the table gave), of which only the columns the plan
    /// needs are parsed.
    pub fn plan_json(&self, record: &RawValue) -> Result<Plan, PlanError> {
        let fields: HashMap<String, &RawValue> =
            serde_json::from_str(record.get()).map_err(|e| PlanError::NotAnObject {
                detail: e.to_string(),
            })?;
        // A column's value; `None` when the row has no such column; `NotJson` when its text is
        // no JSON value serde_json can hold (a number out of range, say).
        let column = |name: &str| -> Result<Option<Value>, PlanError> {
            fields
                .get(name)
                .map(|raw| serde_json::from_str(raw.get()))
                .transpose()
                .map_err(|e| PlanError::NotJson {
                    detail: format!("`{name}`: {e}"),
                })
        };
        let route = &self.route;
        // The route names a column its table lacks: the row has every column (SPEC §4).
        let missing = |name: &str, key, id: Option<&RowId>| {
            let mut names: Vec<&String> = fields.keys().collect();
            names.sort_unstable();
            let mut columns: Vec<String> = (names.iter().take(LISTED_NAMES))
                .map(|n| excerpt(&n.escape_debug().to_string()))
                .collect();
            if names.len() > LISTED_NAMES {
                columns.push(format!("and {} more", names.len() - LISTED_NAMES));
            }
            PlanError::MissingColumn {
                table: route.table_name(),
                column: name.to_owned(),
                key,
                columns: match columns.is_empty() {
                    true => "none".to_owned(),
                    false => columns.join(", "),
                },
                id: id.map(ToString::to_string),
            }
        };
        let raw_id = column(&route.id_column)?
            .ok_or_else(|| missing(&route.id_column, "id_column", None))?;
        let id = RowId::parse(&raw_id).map_err(|source| PlanError::BadId {
            column: route.id_column.clone(),
            received: excerpt(&raw_id.to_string()),
            whole: id_text(&raw_id),
            source,
        })?;
        // Null or empty text gives no slug; a text column the row lacks is refused.
        let mut text = match &route.text_column {
            Some(name) => match column(name)? {
                Some(Value::String(text)) => Some(text),
                Some(_) => None,
                None => return Err(missing(name, "text_column", Some(&id))),
            },
            None => None,
        };
        // The slug is made from the whole text; the plan keeps what the payload can carry.
        let slug = text
            .as_deref()
            .and_then(|t| Slug::new(t, route.slug_max_len));
        let branch = BranchName::new(&route.branch_prefix, &id, slug.as_ref());
        let text_truncated = (text.as_mut()).is_some_and(|t| cut_text(t, MAX_TEXT_JSON_BYTES));
        let record = match &self.payload.record_use {
            RecordUse::Whole => record.to_owned(),
            RecordUse::Columns(names) => {
                let mut kept = Map::new();
                for name in names {
                    if let Some(value) = column(name)? {
                        kept.insert(name.clone(), value);
                    }
                }
                serde_json::value::to_raw_value(&kept).expect("a JSON map serializes")
            }
        };
        Ok(Plan {
            route: Arc::clone(route),
            payload: Arc::clone(&self.payload),
            id,
            branch,
            text,
            text_truncated,
            record,
        })
    }

    /// Plans a row read from the table (the sweep, redo, explain) the same way, from its text.
    pub fn plan_row(&self, record: &Map<String, Value>) -> Result<Plan, PlanError> {
        let text = serde_json::value::to_raw_value(record).expect("a JSON map serializes");
        self.plan_json(&text)
    }
}

/// A JSON id as text, as the queue's `->>` gives it: a string as it is, a number in its
/// digits; `None` for anything else.
pub fn id_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

impl Plan {
    /// What this plan holds in memory, in bytes, as `queue_bytes` counts it: the plan itself,
    /// its strings' buffers (the text above all, up to 48 KiB), what it keeps of the row for
    /// the template, and [`RUN_BYTES`] for the run that carries it.
    pub fn held_bytes(&self) -> usize {
        std::mem::size_of::<Plan>()
            + RUN_BYTES
            + self.id.as_str().len()
            + self.branch.as_str().len()
            + self.text.as_ref().map_or(0, String::capacity)
            + self.record.get().len()
    }

    /// The same work on another branch of the row (a redo's, or a dead claim's as it is).
    pub fn on_branch(self, branch: BranchName) -> Plan {
        Plan { branch, ..self }
    }

    /// The `client_payload` to dispatch once the branch is claimed at `base` (its name and
    /// commit; `preview` gives placeholders, since it knows none).
    pub fn render(&self, base: &str, base_sha: &str) -> Result<Map<String, Value>, PayloadError> {
        let record = serde_json::from_str(self.record.get()).unwrap_or_default();
        let route = &self.route;
        self.payload.render(&PayloadContext {
            id: self.id.as_str(),
            branch: self.branch.as_str(),
            base,
            base_sha,
            repo: route.repo.to_string(),
            schema: &route.schema,
            table: &route.table,
            event_type: route.event_type.as_str(),
            text: self.text.as_deref(),
            text_truncated: self.text_truncated,
            record: &record,
        })
    }
}

/// What the run of a waiting row holds besides its plan, in bytes: its task and the futures
/// of its requests to the forge, its shared result, its place in the map of runs, its span.
/// Measured with the release build: 6,000 rows of 20 bytes of text, each waiting for its turn
/// to claim, took 45 MB beyond the process at rest, 7.6 KB each.
pub const RUN_BYTES: usize = 8 << 10;

/// [`crate::config::TEST_LOCAL_CONFIG`]'s routes, compiled.
#[cfg(test)]
pub(crate) fn test_routes() -> Routes {
    let config = crate::config::Config::parse(
        crate::config::TEST_LOCAL_CONFIG,
        std::path::Path::new("rowbranch.toml"),
        &|_| None,
    )
    .expect("the test config parses");
    Routes::compile(&config).expect("the built-in template compiles")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;
    use crate::event::EventKind;
    use crate::forge::{Base, Sha};
    use crate::identity::RefName;

    fn routes() -> Routes {
        test_routes()
    }

    fn event(kind: EventKind, table: &str, record: Value) -> RowEvent {
        RowEvent {
            kind,
            schema: "public".into(),
            table: table.into(),
            record: serde_json::value::to_raw_value(&record).unwrap(),
            old_record: None,
        }
    }

    /// The plan of an event the test route takes, or why it cannot be planned.
    fn plan(e: RowEvent) -> Result<Plan, PlanError> {
        let routes = routes();
        let compiled = routes
            .route(false, &e)
            .unwrap_or_else(|why| panic!("ignored: {why}"));
        compiled.plan_json(&e.record)
    }

    fn planned(e: RowEvent) -> Plan {
        plan(e).unwrap()
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
    fn a_row_that_lacks_the_text_column_is_refused_naming_the_columns_it_has() {
        let err = plan(event(
            EventKind::Insert,
            "feedbacks",
            json!({"id": 7, "title": "Button broken", "body": "Nothing happens"}),
        ))
        .unwrap_err();
        assert_eq!(err.reason(), Reason::MissingColumn);
        assert_eq!(err.column_and_id(), Some(("message", Some("7".to_owned()))));
        let text = err.to_string();
        for part in [
            "no `message` column",
            "public.feedbacks",
            "body, id, title",
            "text_column",
            "\"\" for no text",
        ] {
            assert!(text.contains(part), "{part:?} in: {text}");
        }
        // The row's values are not in it.
        assert!(!text.contains("Button broken"), "{text}");
    }

    #[test]
    fn a_row_that_lacks_the_id_column_is_a_missing_column_too() {
        let err = plan(event(
            EventKind::Insert,
            "feedbacks",
            json!({"uid": 7, "message": "x"}),
        ))
        .unwrap_err();
        assert_eq!(err.reason(), Reason::MissingColumn);
        assert_eq!(err.column_and_id(), Some(("id", None)));
        assert!(err.to_string().contains("no `id` column"), "{err}");
        assert!(err.to_string().contains("message, uid"), "{err}");
    }

    #[test]
    fn a_route_without_a_text_column_needs_none() {
        let config = crate::config::Config::parse(
            &crate::config::TEST_LOCAL_CONFIG.replace(
                "event_type = \"feedback\"",
                "event_type = \"feedback\"\n    text_column = \"\"",
            ),
            Path::new("rowbranch.toml"),
            &|_| None,
        )
        .unwrap();
        let routes = Routes::compile(&config).unwrap();
        let e = event(
            EventKind::Insert,
            "feedbacks",
            json!({"id": 7, "title": "t"}),
        );
        let plan = routes
            .route(false, &e)
            .unwrap()
            .plan_json(&e.record)
            .unwrap();
        assert_eq!(plan.branch.as_str(), "feedback/7");
        assert_eq!(plan.text, None);
    }

    #[test]
    fn a_long_list_of_columns_is_cut() {
        let mut record = Map::new();
        record.insert("id".into(), json!(1));
        for n in 0..50 {
            record.insert(format!("c{n:02}_{}", "x".repeat(100)), json!(n));
        }
        let err = plan(event(EventKind::Insert, "feedbacks", Value::Object(record))).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("and 31 more"), "{text}");
        assert!(text.len() < 2000, "{} bytes", text.len());
    }

    #[test]
    fn an_unusable_id_is_kept_as_it_came_cut_short() {
        let err = plan(event(
            EventKind::Insert,
            "feedbacks",
            json!({"id": format!("a b{}", "c".repeat(500)), "message": "x"}),
        ))
        .unwrap_err();
        assert_eq!(err.reason(), Reason::BadId);
        let (column, received) = err.column_and_id().unwrap();
        let received = received.unwrap();
        assert!(received.starts_with("\"a b"), "{received}");
        assert!(received.chars().count() <= 41, "{received}");
        assert_eq!(column, "id");
    }

    #[test]
    fn other_tables_and_events_are_ignored_with_the_reason() {
        let ignored = |e: RowEvent| routes().route(false, &e).expect_err("ignored").to_string();
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

    /// The test route with a gate on `status` (or `approved`, a boolean), taking UPDATEs.
    fn gated(equals: &str) -> Routes {
        let text = format!(
            "{}events = [\"INSERT\", \"UPDATE\"]\nrun_when = {{ column = \"status\", equals = {equals} }}\n",
            crate::config::TEST_LOCAL_CONFIG
        );
        let config =
            crate::config::Config::parse(&text, Path::new("rowbranch.toml"), &|_| None).unwrap();
        Routes::compile(&config).unwrap()
    }

    fn update(old: Value, new: Value) -> RowEvent {
        let mut e = event(EventKind::Update, "feedbacks", new);
        e.old_record = Some(serde_json::value::to_raw_value(&old).unwrap());
        e
    }

    #[test]
    fn a_gated_route_runs_a_row_only_as_it_passes() {
        let routes = gated("\"approved\"");
        let reason = |e: RowEvent| match routes.route(false, &e) {
            Ok(_) => "run".to_owned(),
            Err(why) => format!("{}: {why}", why.reason()),
        };
        let row = |status: Value| json!({"id": 1, "message": "m", "status": status});
        // An INSERT runs when the record passes, and is held otherwise, saying what it holds.
        assert_eq!(
            reason(event(
                EventKind::Insert,
                "feedbacks",
                row(json!("approved"))
            )),
            "run"
        );
        let held = reason(event(EventKind::Insert, "feedbacks", row(json!("new"))));
        assert!(held.starts_with("not_ready: "), "{held}");
        assert!(
            held.contains(r#"status = "approved""#) && held.contains(r#""new""#),
            "{held}"
        );
        let null = reason(event(EventKind::Insert, "feedbacks", row(Value::Null)));
        assert!(null.starts_with("not_ready"), "{null}");
        let absent = reason(event(EventKind::Insert, "feedbacks", json!({"id": 1})));
        assert!(absent.contains("has no `status` column"), "{absent}");
        // An UPDATE runs only from failing to passing.
        assert_eq!(
            reason(update(row(json!("new")), row(json!("approved")))),
            "run"
        );
        assert_eq!(
            reason(update(row(Value::Null), row(json!("approved")))),
            "run"
        );
        let again = reason(update(row(json!("approved")), row(json!("approved"))));
        assert!(again.starts_with("passed_before"), "{again}");
        let unapproved = reason(update(row(json!("approved")), row(json!("new"))));
        assert!(unapproved.starts_with("not_ready"), "{unapproved}");
        // Without its old row, an UPDATE that passes is run (the claim makes a repeat a no-op).
        let mut bare = update(row(json!("new")), row(json!("approved")));
        bare.old_record = None;
        assert_eq!(reason(bare), "run");
        // Approved again after it ran: the state written back says so, whatever its branch.
        let text = format!(
            "{}events = [\"INSERT\", \"UPDATE\"]\nrun_when = {{ column = \"status\", equals = \"approved\" }}\nstatus_column = \"state\"\n",
            crate::config::TEST_LOCAL_CONFIG
        );
        let config =
            crate::config::Config::parse(&text, Path::new("rowbranch.toml"), &|_| None).unwrap();
        let written = Routes::compile(&config).unwrap();
        let again = |state: &str| {
            let row =
                |status: &str| json!({"id": 1, "message": "m", "status": status, "state": state});
            let e = update(row("new"), row("approved"));
            written
                .route(false, &e)
                .err()
                .map(|why| why.reason().as_str())
        };
        assert_eq!(again("merged"), Some("passed_before"));
        assert_eq!(again("dispatched"), Some("passed_before"));
        assert_eq!(again("waiting"), None);
        assert_eq!(again("new"), None);
        // A wrong kind of value does not pass: "true" is not true, 1 is 1.0.
        let routes = gated("true");
        let pass = |v: Value| {
            routes
                .route(false, &event(EventKind::Insert, "feedbacks", row(v)))
                .is_ok()
        };
        assert!(pass(json!(true)) && !pass(json!("true")) && !pass(json!(1)));
        let routes = gated("1");
        let pass = |v: Value| {
            routes
                .route(false, &event(EventKind::Insert, "feedbacks", row(v)))
                .is_ok()
        };
        assert!(pass(json!(1)) && pass(json!(1.0)) && !pass(json!(2)) && !pass(json!("1")));
    }

    #[test]
    fn a_row_without_a_usable_id_is_refused_with_the_column() {
        let err = plan(event(
            EventKind::Insert,
            "feedbacks",
            json!({"message": "x"}),
        ))
        .unwrap_err();
        assert!(err.to_string().contains("`id`"), "{err}");
        let err = plan(event(EventKind::Insert, "feedbacks", json!({"id": "a b"}))).unwrap_err();
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
            branch: RefName::parse("main").unwrap(),
            sha: Sha::new("abc"),
        };
        let payload = plan
            .render(base.branch.as_str(), base.sha.as_str())
            .unwrap();
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
            branch: RefName::parse("main").unwrap(),
            sha: Sha::new("abc"),
        };
        let payload = plan
            .render(base.branch.as_str(), base.sha.as_str())
            .unwrap();
        assert_eq!(payload["text_truncated"], true);
        assert!(payload["text"].as_str().unwrap().len() < text.len());
    }
}
