//! The `client_payload` template: rendered with minijinja from the row and its identity, then
//! checked against GitHub's limits for `repository_dispatch` before anything is sent.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context as _;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Serialize;
use serde_json::{Map, Value};

/// The default template, shipped in `templates/`.
pub const BUILTIN_PAYLOAD: &str = include_str!("../../templates/payload.json.j2");

/// GitHub's limit on `client_payload`'s top-level keys.
pub const MAX_KEYS: usize = 10;
/// GitHub documents `client_payload` as "less than 64KB"
/// (https://docs.github.com/en/rest/repos/repos#create-a-repository-dispatch-event); rowbranch
/// keeps the whole request body, `{"event_type":…,"client_payload":…}`, under 64,000 bytes, the
/// strictest reading of that (SPEC §5).
pub const MAX_DISPATCH_BODY_BYTES: usize = 64_000;
/// How much of the row's text travels, as JSON: room is left for the rest of the payload.
pub const MAX_TEXT_JSON_BYTES: usize = 48 * 1024;

const NAME: &str = "payload.json";

/// A compiled payload template.
pub struct PayloadTemplate {
    body: Body,
    origin: String,
    /// Which of the row's columns it reads, so that a waiting row keeps only those.
    pub(super) record_use: RecordUse,
}

/// Which of the row's columns a template reads through `record`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordUse {
    /// Only these columns, by name (`record.title`, `record.meta.owner` → `title`, `meta`).
    Columns(BTreeSet<String>),
    /// The record some other way (`record["x"]`, a loop, a filter, `{{ record }}` itself): all
    /// of it.
    Whole,
}

/// How a payload is made.
enum Body {
    /// The shipped default, made directly: the object its template renders (a test holds the
    /// two to the same output), without a template run and a JSON parse for every row.
    Builtin,
    /// A user's template.
    Template(Box<Environment<'static>>),
}

impl std::fmt::Debug for PayloadTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PayloadTemplate({})", self.origin)
    }
}

/// What a template can use.
#[derive(Debug, Serialize)]
pub struct PayloadContext<'a> {
    pub id: &'a str,
    pub branch: &'a str,
    pub base: &'a str,
    pub base_sha: &'a str,
    pub repo: String,
    pub schema: &'a str,
    pub table: &'a str,
    pub event_type: &'a str,
    pub text: Option<&'a str>,
    pub text_truncated: bool,
    pub record: &'a Map<String, Value>,
}

/// Why a payload cannot be sent; the text is the 422 message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("the payload template failed{}: {detail}", line.map(|l| format!(" at line {l}")).unwrap_or_default())]
    Render { line: Option<usize>, detail: String },
    #[error("the payload template did not render JSON ({0}): values print JSON-escaped, so write {{{{ text }}}}, not \"{{{{ text }}}}\"")]
    NotJson(String),
    #[error("the payload template rendered a JSON {0}; client_payload must be an object")]
    NotAnObject(&'static str),
    #[error("the payload has {0} top-level keys; GitHub allows at most {MAX_KEYS}")]
    TooManyKeys(usize),
    #[error("the dispatch would be {0} bytes; GitHub allows a payload of less than 64 KB, and rowbranch sends less than {MAX_DISPATCH_BODY_BYTES} bytes in all")]
    TooLarge(usize),
}

impl PayloadTemplate {
    /// The shipped default.
    pub fn builtin() -> PayloadTemplate {
        let compiled = PayloadTemplate::from_text(BUILTIN_PAYLOAD, "built-in payload.json.j2")
            .expect("the built-in payload template compiles");
        PayloadTemplate {
            body: Body::Builtin,
            ..compiled
        }
    }

    /// Reads and compiles a user's template; the message names the file, and the line of a
    /// syntax error.
    pub fn from_file(path: &Path) -> anyhow::Result<PayloadTemplate> {
        let source = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        PayloadTemplate::from_text(&source, &path.display().to_string())
    }

    /// Compiles a template from its text (a file's, or one carried in the config itself,
    /// `payload_template_inline`); the message names `origin`, and the line of a syntax error.
    pub fn from_text(source: &str, origin: &str) -> anyhow::Result<PayloadTemplate> {
        let mut env = Environment::new();
        // Every printed value is JSON-encoded, so row text cannot break out of its string.
        env.set_auto_escape_callback(|_| AutoEscape::Json);
        // A misspelt variable is an error, not an empty string.
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        let compiled = (env.add_template_owned(NAME, source.to_owned()))
            .and_then(|()| env.get_template(NAME).map(|template| record_use(&template)));
        let record_use = (compiled.map_err(render_error)).with_context(|| origin.to_owned())?;
        Ok(PayloadTemplate {
            body: Body::Template(Box::new(env)),
            origin: origin.to_owned(),
            record_use,
        })
    }

    /// Renders and checks the payload.
    pub fn render(&self, ctx: &PayloadContext<'_>) -> Result<Map<String, Value>, PayloadError> {
        let value = match &self.body {
            Body::Builtin => builtin_payload(ctx),
            Body::Template(env) => {
                let text = env
                    .get_template(NAME)
                    .and_then(|t| t.render(ctx))
                    .map_err(render_error)?;
                serde_json::from_str(&text).map_err(|e| PayloadError::NotJson(e.to_string()))?
            }
        };
        let object = match value {
            Value::Object(map) => map,
            Value::Array(_) => return Err(PayloadError::NotAnObject("array")),
            Value::String(_) => return Err(PayloadError::NotAnObject("string")),
            Value::Number(_) => return Err(PayloadError::NotAnObject("number")),
            Value::Bool(_) => return Err(PayloadError::NotAnObject("boolean")),
            Value::Null => return Err(PayloadError::NotAnObject("null")),
        };
        if object.len() > MAX_KEYS {
            return Err(PayloadError::TooManyKeys(object.len()));
        }
        let size = dispatch_body_len(ctx.event_type, &object);
        if size >= MAX_DISPATCH_BODY_BYTES {
            return Err(PayloadError::TooLarge(size));
        }
        Ok(object)
    }
}

/// What the built-in template (templates/payload.json.j2) renders.
fn builtin_payload(ctx: &PayloadContext<'_>) -> Value {
    serde_json::json!({
        "id": ctx.id,
        "branch": ctx.branch,
        "base": ctx.base,
        "base_sha": ctx.base_sha,
        "repo": ctx.repo,
        "table": ctx.table,
        "text": ctx.text,
        "text_truncated": ctx.text_truncated,
    })
}

/// What a template reads of `record`, from the variables it looks up: `record.col…` names a
/// column; a bare `record` (a subscript, an alias, a loop, a filter) may read any of them.
/// (https://docs.rs/minijinja/2/minijinja/struct.Template.html#method.undeclared_variables)
fn record_use(template: &minijinja::Template<'_, '_>) -> RecordUse {
    let mut columns = BTreeSet::new();
    for name in template.undeclared_variables(true) {
        if name == "record" {
            return RecordUse::Whole;
        }
        if let Some(path) = name.strip_prefix("record.") {
            let column = path.split('.').next().unwrap_or(path);
            columns.insert(column.to_owned());
        }
    }
    RecordUse::Columns(columns)
}

/// The length of the dispatch's request body as it is sent, compact JSON:
/// `{"event_type":…,"client_payload":…}`.
fn dispatch_body_len(event_type: &str, payload: &Map<String, Value>) -> usize {
    let around = r#"{"event_type":,"client_payload":}"#.len();
    match (serde_json::to_vec(event_type), serde_json::to_vec(payload)) {
        (Ok(event_type), Ok(payload)) => around + event_type.len() + payload.len(),
        _ => usize::MAX,
    }
}

fn render_error(e: minijinja::Error) -> PayloadError {
    PayloadError::Render {
        line: e.line(),
        detail: e
            .detail()
            .map(str::to_owned)
            .unwrap_or_else(|| e.kind().to_string()),
    }
}

/// Cuts `text` on a character boundary so that its JSON encoding fits in `budget` bytes, and
/// gives back the memory of the part cut. Returns whether anything was cut.
pub fn cut_text(text: &mut String, budget: usize) -> bool {
    let mut used = 2; // the quotes
    for (at, ch) in text.char_indices() {
        used += match ch {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{08}' | '\u{0c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        };
        if used > budget {
            text.truncate(at);
            text.shrink_to_fit();
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context<'a>(record: &'a Map<String, Value>, text: Option<&'a str>) -> PayloadContext<'a> {
        PayloadContext {
            id: "42",
            branch: "feedback/42-add-dark-mode",
            base: "main",
            base_sha: "0123456789abcdef0123456789abcdef01234567",
            repo: "acme/app".into(),
            schema: "public",
            table: "feedbacks",
            event_type: "feedback",
            text,
            text_truncated: false,
            record,
        }
    }

    #[test]
    fn the_builtin_template_renders_the_documented_keys() {
        let record = Map::new();
        let payload = PayloadTemplate::builtin()
            .render(&context(&record, Some("Add \"dark\" mode\n")))
            .unwrap();
        for key in ["id", "branch", "base", "base_sha", "repo", "table", "text"] {
            assert!(payload.contains_key(key), "{key} missing from {payload:?}");
        }
        assert_eq!(payload["text"], "Add \"dark\" mode\n");
        assert_eq!(payload["branch"], "feedback/42-add-dark-mode");
        assert!(payload.len() <= MAX_KEYS);
    }

    #[test]
    fn the_builtin_payload_is_what_its_template_renders() {
        let record = Map::new();
        let template = PayloadTemplate::from_text(BUILTIN_PAYLOAD, "test").unwrap();
        assert!(matches!(template.body, Body::Template(_)));
        let builtin = PayloadTemplate::builtin();
        assert_eq!(builtin.record_use, template.record_use);
        let long = "ü\"\\\u{2028}<>&".repeat(50);
        for text in [
            None,
            Some(""),
            Some("Add dark mode"),
            Some("日本語 \n\t\"x\""),
            Some(&long),
        ] {
            for truncated in [false, true] {
                let ctx = PayloadContext {
                    text_truncated: truncated,
                    ..context(&record, text)
                };
                assert_eq!(
                    builtin.render(&ctx).unwrap(),
                    template.render(&ctx).unwrap(),
                    "{text:?}"
                );
            }
        }
    }

    #[test]
    fn missing_text_renders_as_null() {
        let record = Map::new();
        let payload = PayloadTemplate::builtin()
            .render(&context(&record, None))
            .unwrap();
        assert_eq!(payload["text"], Value::Null);
    }

    #[test]
    fn a_misspelt_variable_names_the_line() {
        let t = PayloadTemplate::from_text("{\n \"a\": {{ idd }}\n}", "t").unwrap();
        let record = Map::new();
        let err = t.render(&context(&record, None)).unwrap_err();
        assert!(
            matches!(err, PayloadError::Render { line: Some(2), .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("line 2"), "{err}");
    }

    #[test]
    fn quoting_a_value_by_hand_is_explained() {
        let t = PayloadTemplate::from_text("{\"text\": \"{{ text }}\"}", "t").unwrap();
        let record = Map::new();
        let err = t.render(&context(&record, Some("hi"))).unwrap_err();
        assert!(matches!(err, PayloadError::NotJson(_)), "{err:?}");
    }

    #[test]
    fn more_than_ten_keys_are_refused() {
        let body: Vec<String> = (0..11).map(|i| format!("\"k{i}\": {i}")).collect();
        let t = PayloadTemplate::from_text(&format!("{{{}}}", body.join(",")), "t").unwrap();
        let record = Map::new();
        assert_eq!(
            t.render(&context(&record, None)).unwrap_err(),
            PayloadError::TooManyKeys(11)
        );
    }

    #[test]
    fn an_array_is_not_a_payload() {
        let t = PayloadTemplate::from_text("[1]", "t").unwrap();
        let record = Map::new();
        assert_eq!(
            t.render(&context(&record, None)).unwrap_err(),
            PayloadError::NotAnObject("array")
        );
    }

    #[test]
    fn the_whole_dispatch_body_stays_under_64000_bytes() {
        let t = PayloadTemplate::from_text("{\"r\": {{ record.big }}}", "t").unwrap();
        let body_with = |n: usize| {
            let mut record = Map::new();
            record.insert("big".into(), Value::String("x".repeat(n)));
            record
        };
        // `{"event_type":"feedback","client_payload":{"r":"…"}}` around the string.
        let around = serde_json::to_vec(
            &serde_json::json!({"event_type": "feedback", "client_payload": {"r": ""}}),
        )
        .unwrap()
        .len();
        let fits = body_with(MAX_DISPATCH_BODY_BYTES - 1 - around);
        assert!(t.render(&context(&fits, None)).is_ok());
        let over = body_with(MAX_DISPATCH_BODY_BYTES - around);
        assert_eq!(
            t.render(&context(&over, None)).unwrap_err(),
            PayloadError::TooLarge(MAX_DISPATCH_BODY_BYTES)
        );
    }

    #[test]
    fn long_text_is_cut_on_a_character_boundary_within_budget() {
        let mut kept = "é\"ü\n".repeat(50_000);
        assert!(cut_text(&mut kept, MAX_TEXT_JSON_BYTES));
        assert!(serde_json::to_string(&kept).unwrap().len() <= MAX_TEXT_JSON_BYTES);
        assert!(serde_json::to_string(&kept).unwrap().len() > MAX_TEXT_JSON_BYTES - 8);
        let mut short = "short".to_owned();
        assert!(!cut_text(&mut short, MAX_TEXT_JSON_BYTES));
        assert_eq!(short, "short");
    }

    #[test]
    fn control_characters_count_as_their_escapes() {
        let mut kept = "\u{01}".repeat(10);
        assert!(cut_text(&mut kept, 2 + 6 * 4));
        assert_eq!(kept.len(), 4);
        assert_eq!(serde_json::to_string(&kept).unwrap().len(), 2 + 6 * 4);
    }

    #[test]
    fn a_template_reads_only_the_columns_it_names() {
        let compile = |source: &str| PayloadTemplate::from_text(source, "t").unwrap();
        assert_eq!(
            PayloadTemplate::builtin().record_use,
            RecordUse::Columns(BTreeSet::new())
        );
        let named =
            compile(r#"{"t": {{ record.title }}, "o": {{ record.meta.owner }}, "i": {{ id }}}"#);
        assert_eq!(
            named.record_use,
            RecordUse::Columns(["meta".to_owned(), "title".to_owned()].into())
        );
        for whole in [
            r#"{"r": {{ record }}}"#,
            r#"{"x": {{ record["x-y"] }}}"#,
            r#"{% set r = record %}{"t": {{ r.title }}}"#,
            r#"{"n": {{ record | length }}}"#,
        ] {
            assert_eq!(compile(whole).record_use, RecordUse::Whole, "{whole}");
        }
    }
}
