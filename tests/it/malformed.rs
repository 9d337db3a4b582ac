//! Hostile and broken input: each gets its 4xx, nothing is written, and the server stays up.
//! Also the probes: `/healthz` and the counted answers in `/metrics`.

use serde_json::json;

use crate::support::app::{spawn_app, Options};
use crate::support::http::insert;

/// A body that is `insert(42)` with `record.id` replaced by `id` (raw JSON text).
fn with_raw_id(id: &str) -> Vec<u8> {
    format!(
        r#"{{"type":"INSERT","table":"feedbacks","schema":"public","record":{{"id":{id},"message":"x"}},"old_record":null}}"#
    )
    .into_bytes()
}

#[tokio::test]
async fn twenty_kinds_of_malformed_input_get_their_4xx_and_the_server_stays_up() {
    let app = spawn_app(Options::default()).await;
    let valid = insert(json!(42), "Add dark mode!").to_string();
    let deep = format!("{}1{}", "[".repeat(5000), "]".repeat(5000));
    let mut invalid_utf8 = valid.clone().into_bytes();
    let at = valid.find("Add").unwrap();
    invalid_utf8.splice(at..at + 1, [0xff, 0xfe]);
    let mut with_bom = vec![0xef, 0xbb, 0xbf];
    with_bom.extend_from_slice(valid.as_bytes());

    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("an empty body", vec![], 400, "not valid JSON"),
        ("plain text", b"hello".to_vec(), 400, "not valid JSON"),
        (
            "truncated JSON",
            valid[..valid.len() - 5].into(),
            400,
            "not valid JSON",
        ),
        (
            "trailing garbage",
            format!("{valid} x").into_bytes(),
            400,
            "not valid JSON",
        ),
        ("a JSON array", b"[1,2,3]".to_vec(), 400, "JSON object"),
        ("a JSON string", br#""INSERT""#.to_vec(), 400, "JSON object"),
        ("JSON null", b"null".to_vec(), 400, "JSON object"),
        ("invalid UTF-8", invalid_utf8, 400, "not valid JSON"),
        ("a byte-order mark", with_bom, 400, "not valid JSON"),
        (
            "deeply nested JSON",
            deep.into_bytes(),
            400,
            "not valid JSON",
        ),
        (
            "deeply nested JSON inside the record",
            with_raw_id(&format!(
                "1,\"x\":{}1{}",
                "{\"a\":".repeat(3000),
                "}".repeat(3000)
            )),
            400,
            "not valid JSON",
        ),
        ("NaN as the id", with_raw_id("NaN"), 400, "not valid JSON"),
        (
            "a number too large for JSON",
            with_raw_id("1e400"),
            400,
            "not valid JSON",
        ),
        (
            "a type that is a number",
            br#"{"type":1,"table":"t","schema":"s","record":{}}"#.to_vec(),
            400,
            "`type`",
        ),
        (
            "a record that is a string",
            br#"{"type":"INSERT","table":"feedbacks","schema":"public","record":"{}"}"#.to_vec(),
            400,
            "`record`",
        ),
        (
            "a huge integer id",
            with_raw_id("123456789012345678901234567890"),
            422,
            "not an integer",
        ),
        ("a float id", with_raw_id("4.2"), 422, "not an integer"),
        (
            "an id in exponent form",
            with_raw_id("42e0"),
            422,
            "not an integer",
        ),
        ("a boolean id", with_raw_id("true"), 422, "a boolean"),
        ("an array id", with_raw_id("[42]"), 422, "an array"),
        ("a negative id", with_raw_id("-5"), 422, "start with"),
        (
            "an id with a line break",
            with_raw_id(r#""4\n2""#),
            422,
            "line break",
        ),
        (
            "an id with a NUL",
            with_raw_id(r#""4\u00002""#),
            422,
            "ids may contain only",
        ),
        (
            "an id with full-width digits",
            with_raw_id("\"４２\""),
            422,
            "ids may contain only",
        ),
        (
            "an id that is a ref path",
            with_raw_id(r#""refs/heads/main""#),
            422,
            "a slash",
        ),
        (
            "a 200,000-character id",
            with_raw_id(&format!("\"{}\"", "9".repeat(200_000))),
            422,
            "at most 100",
        ),
    ];
    assert!(cases.len() >= 20);
    for (what, body, status, says) in cases {
        let reply = app.post_bytes(body).await;
        assert_eq!(reply.status, status, "{what}: {}", reply.text);
        assert_eq!(reply.outcome(), "error", "{what}: {}", reply.text);
        assert!(reply.message().contains(says), "{what}: {}", reply.text);
        assert!(
            reply.message().len() < 400,
            "{what}: the message echoes too much: {}",
            reply.text
        );
        let health = app.get("/healthz").await;
        assert_eq!(health.status, 200, "after {what}");
    }
    assert!(app.branches().await.is_empty());
    assert!(app.dispatches().is_empty());
    // And a good row still goes through.
    app.dispatched(json!(42), "Add dark mode!").await;
    app.shutdown().await;
}

#[tokio::test]
async fn the_health_probe_answers_ok() {
    let app = spawn_app(Options::default()).await;
    let reply = app.get("/healthz").await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body["status"], "ok");
    app.shutdown().await;
}

#[tokio::test]
async fn metrics_count_the_answers_by_status_outcome_and_reason() {
    let app = spawn_app(Options::default()).await;
    for (id, text) in [(1, "One"), (2, "Two")] {
        app.dispatched(json!(id), text).await;
    }
    app.duplicate(json!(1), "One", "branch_exists").await;
    app.post_insert(json!("a b"), "Bad")
        .await
        .expect(422, "error");
    app.post_raw("{}", &[("content-type", "application/json")])
        .await
        .expect(401, "error");

    let metrics = app.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    let content_type = metrics.headers["content-type"].to_str().unwrap();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = &metrics.text;
    assert!(
        text.contains("# TYPE rowbranch_deliveries_total counter"),
        "{text}"
    );
    for line in [
        r#"rowbranch_deliveries_total{route="public.feedbacks",status="200",outcome="dispatched",reason=""} 2"#,
        r#"rowbranch_deliveries_total{route="public.feedbacks",status="200",outcome="duplicate",reason="branch_exists"} 1"#,
        // The reason its log line gives, for a refusal too.
        r#"rowbranch_deliveries_total{route="public.feedbacks",status="422",outcome="error",reason="bad_id"} 1"#,
        r#"rowbranch_deliveries_total{route="none",status="401",outcome="error",reason="unauthorized"} 1"#,
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing `{line}` in:\n{text}"
        );
    }
    app.shutdown().await;
}
