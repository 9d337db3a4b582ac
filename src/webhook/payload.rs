//! The body Supabase's database webhooks post, parsed into a [`RowEvent`]. Every refusal says
//! which field is wrong; the text is the 400 message.

use serde_json::{Map, Value};

use crate::event::{EventKind, RowEvent};
use crate::identity::excerpt;

/// Why a body is not a database webhook.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ShapeError(String);

const EXAMPLE: &str =
    r#"{"type":"INSERT","table":"feedbacks","schema":"public","record":{...},"old_record":null}"#;

/// Parses a Supabase database-webhook body.
pub fn parse(body: &[u8]) -> Result<RowEvent, ShapeError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ShapeError(format!("the body is not valid JSON: {e}")))?;
    let Value::Object(mut body) = value else {
        return Err(ShapeError(format!(
            "the body must be a JSON object of the form {EXAMPLE}"
        )));
    };
    let kind_text = name_field(&body, "type")?;
    let Some(kind) = EventKind::parse(&kind_text) else {
        return Err(ShapeError(format!(
            "`type` is \"{}\": expected \"INSERT\", \"UPDATE\" or \"DELETE\"",
            excerpt(&kind_text)
        )));
    };
    let table = name_field(&body, "table")?;
    let schema = name_field(&body, "schema")?;
    // A DELETE carries the row that was; the others the row that is.
    let (field, other) = if kind == EventKind::Delete {
        ("old_record", "record")
    } else {
        ("record", "old_record")
    };
    let record = match body.remove(field) {
        Some(Value::Object(record)) => record,
        None => {
            return Err(ShapeError(format!(
                "`{field}` is missing: a {kind} carries the row there"
            )))
        }
        Some(v) => {
            return Err(ShapeError(format!(
                "`{field}` is {}: a {kind} carries the row there as an object",
                kind_of(&v)
            )))
        }
    };
    match body.get(other) {
        None | Some(Value::Null) | Some(Value::Object(_)) => {}
        Some(v) => {
            return Err(ShapeError(format!(
                "`{other}` is {}: expected an object or null",
                kind_of(v)
            )))
        }
    }
    Ok(RowEvent {
        kind,
        schema,
        table,
        record,
    })
}

fn name_field(body: &Map<String, Value>, field: &str) -> Result<String, ShapeError> {
    match body.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(ShapeError(format!("`{field}` is empty"))),
        None => Err(ShapeError(format!(
            "`{field}` is missing: the body must be of the form {EXAMPLE}"
        ))),
        Some(v) => Err(ShapeError(format!(
            "`{field}` is {}: expected a string",
            kind_of(v)
        ))),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUPABASE_INSERT: &str = include_str!("../../tests/fixtures/supabase-insert.json");

    #[test]
    fn the_body_supabase_posts_parses() {
        let event = parse(SUPABASE_INSERT.as_bytes()).unwrap();
        assert_eq!(event.kind, EventKind::Insert);
        assert_eq!(event.schema, "public");
        assert_eq!(event.table, "feedbacks");
        assert_eq!(event.record["id"], 1);
        assert_eq!(event.record["title"], "Button broken");
    }

    #[test]
    fn a_delete_carries_its_old_record() {
        let body = br#"{"type":"DELETE","table":"t","schema":"public","record":null,"old_record":{"id":3}}"#;
        assert_eq!(parse(body).unwrap().record["id"], 3);
    }

    #[test]
    fn each_refusal_names_its_field() {
        let cases: &[(&str, &str)] = &[
            ("not json", "not valid JSON"),
            ("[1,2]", "JSON object"),
            (
                r#"{"table":"t","schema":"s","record":{}}"#,
                "`type` is missing",
            ),
            (
                r#"{"type":"TRUNCATE","table":"t","schema":"s","record":{}}"#,
                "`type` is \"TRUNCATE\"",
            ),
            (
                r#"{"type":1,"table":"t","schema":"s","record":{}}"#,
                "`type` is a number",
            ),
            (
                r#"{"type":"INSERT","schema":"s","record":{}}"#,
                "`table` is missing",
            ),
            (
                r#"{"type":"INSERT","table":"","schema":"s","record":{}}"#,
                "`table` is empty",
            ),
            (
                r#"{"type":"INSERT","table":"t","record":{}}"#,
                "`schema` is missing",
            ),
            (
                r#"{"type":"INSERT","table":"t","schema":"s"}"#,
                "`record` is missing",
            ),
            (
                r#"{"type":"INSERT","table":"t","schema":"s","record":null}"#,
                "`record` is null",
            ),
            (
                r#"{"type":"INSERT","table":"t","schema":"s","record":[1]}"#,
                "`record` is an array",
            ),
            (
                r#"{"type":"INSERT","table":"t","schema":"s","record":{},"old_record":5}"#,
                "`old_record` is a number",
            ),
            (
                r#"{"type":"DELETE","table":"t","schema":"s","record":null}"#,
                "`old_record` is missing",
            ),
        ];
        for (body, expected) in cases {
            let err = parse(body.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(expected), "{body}: {err}");
        }
    }

    #[test]
    fn a_long_type_is_clipped_in_the_message() {
        let body = format!(
            r#"{{"type":"{}","table":"t","schema":"s","record":{{}}}}"#,
            "X".repeat(5000)
        );
        assert!(parse(body.as_bytes()).unwrap_err().to_string().len() < 200);
    }
}
