//! The body Supabase's database webhooks post, parsed into a [`RowEvent`]. Every refusal says
//! which field is wrong; the text is the 400 message. The row itself is checked to be an object
//! and kept as its JSON text: a row of megabytes is never turned into a tree of values here.

use std::collections::HashMap;

use serde_json::error::Category;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::event::{EventKind, RowEvent};
use crate::identity::excerpt;

/// Why a body is not a database webhook.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ShapeError(String);

const EXAMPLE: &str =
    r#"{"type":"INSERT","table":"feedbacks","schema":"public","record":{...},"old_record":null}"#;

/// The body's top-level fields, each still JSON text.
type Fields<'a> = HashMap<String, &'a RawValue>;

/// Parses a Supabase database-webhook body.
pub fn parse(body: &[u8]) -> Result<RowEvent, ShapeError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ShapeError(format!("the body is not valid JSON: it is not UTF-8 ({e})")))?;
    check_depth(text)?;
    // Valid JSON of another type than an object is a `Data` error.
    let body: Fields = serde_json::from_str(text).map_err(|e| match e.classify() {
        Category::Data => ShapeError(format!(
            "the body must be a JSON object of the form {EXAMPLE}"
        )),
        _ => ShapeError(format!("the body is not valid JSON: {e}")),
    })?;
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
    // A field with what kind of JSON value it is.
    let typed = |field| body.get(field).map(|&raw| (kind_of(raw), raw));
    let record = match typed(field) {
        Some(("an object", raw)) => raw.to_owned(),
        None => {
            return Err(ShapeError(format!(
                "`{field}` is missing: a {kind} carries the row there"
            )))
        }
        Some((is, _)) => {
            return Err(ShapeError(format!(
                "`{field}` is {is}: a {kind} carries the row there as an object"
            )))
        }
    };
    let old_record = match typed(other) {
        None | Some(("null", _)) => None,
        Some(("an object", raw)) => Some(raw.to_owned()).filter(|_| kind == EventKind::Update),
        Some((is, _)) => {
            return Err(ShapeError(format!(
                "`{other}` is {is}: expected an object or null"
            )))
        }
    };
    Ok(RowEvent {
        kind,
        schema,
        table,
        record,
        old_record,
    })
}

fn name_field(body: &Fields, field: &str) -> Result<String, ShapeError> {
    let Some(raw) = body.get(field) else {
        return Err(ShapeError(format!(
            "`{field}` is missing: the body must be of the form {EXAMPLE}"
        )));
    };
    match serde_json::from_str::<Value>(raw.get()) {
        Ok(Value::String(s)) if !s.is_empty() => Ok(s),
        Ok(Value::String(_)) => Err(ShapeError(format!("`{field}` is empty"))),
        _ => Err(ShapeError(format!(
            "`{field}` is {}: expected a string",
            kind_of(raw)
        ))),
    }
}

/// How deep arrays and objects may nest: serde_json's own limit when it builds values, kept for
/// every part of the body, since the row's columns are parsed later, one at a time.
const MAX_DEPTH: usize = 128;

/// Refuses a body nested deeper than [`MAX_DEPTH`], counting brackets outside strings.
fn check_depth(text: &str) -> Result<(), ShapeError> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for byte in text.bytes() {
        match (in_string, byte) {
            (true, _) if escaped => escaped = false,
            (true, b'\\') => escaped = true,
            (true, b'"') => in_string = false,
            (true, _) => {}
            (false, b'"') => in_string = true,
            (false, b'[' | b'{') => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(ShapeError(format!(
                        "the body is not valid JSON: it nests more than {MAX_DEPTH} levels deep"
                    )));
                }
            }
            (false, b']' | b'}') => depth = depth.saturating_sub(1),
            (false, _) => {}
        }
    }
    Ok(())
}

/// What kind of JSON value `raw` is, from its first character (serde_json has checked the rest).
fn kind_of(raw: &RawValue) -> &'static str {
    match raw.get().trim_start().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
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
        let record: Value = serde_json::from_str(event.record.get()).unwrap();
        assert_eq!(record["id"], 1);
        assert_eq!(record["title"], "Button broken");
    }

    #[test]
    fn a_delete_carries_its_old_record() {
        let body = br#"{"type":"DELETE","table":"t","schema":"public","record":null,"old_record":{"id":3}}"#;
        let record: Value = serde_json::from_str(parse(body).unwrap().record.get()).unwrap();
        assert_eq!(record["id"], 3);
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
