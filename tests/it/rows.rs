//! `rowbranch::db` against a real PostgreSQL: keyset pages in the columns' own types, names that
//! need quoting, errors that name what is missing, `by_id`, the record's JSON, a 200,000-row
//! table, and TLS with a CA of our own.
//!
//! Needs `DATABASE_URL` (`eval "$(scripts/test-postgres.sh)"` starts a throwaway server); without
//! it each test says why and passes, except under `CI=true`, where it fails. Each test works in a
//! new schema with a random name, dropped at the end whether it passed or not, so the tests run
//! concurrently without seeing each other's tables.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use rowbranch::config::{Config, Route};
use rowbranch::db::{Database as Rows, Row};
use serde_json::{json, Value};

use crate::support::db::{admin_config, column, connect, TestSchema};
use crate::support::or_skip;
use crate::support::random::random_hex;
use crate::support::tools::checked;

/// `Rows` on the test's database, as `reconcile` connects.
async fn rows_of(schema: &TestSchema) -> Rows {
    Rows::connect(&schema.url)
        .await
        .unwrap_or_else(|e| panic!("Rows::connect: {e:#}"))
}

/// A route as the config file would give it.
fn route(
    schema: &str,
    table: &str,
    id_column: &str,
    text_column: Option<&str>,
    created_column: &str,
) -> Arc<Route> {
    let q = |s: &str| serde_json::to_string(s).unwrap();
    let toml = format!(
        "[forge]\nkind = \"local\"\npath = \"repo.git\"\n\n[[routes]]\nschema = {}\ntable = {}\n\
         repo = \"acme/app\"\nbranch_prefix = \"feedback\"\nevent_type = \"feedback\"\n\
         id_column = {}\ntext_column = {}\ncreated_column = {}\n",
        q(schema),
        q(table),
        q(id_column),
        q(text_column.unwrap_or("")),
        q(created_column)
    );
    let config = Config::parse(&toml, Path::new("/rowbranch-test/rowbranch.toml"), &|_| {
        None
    })
    .unwrap_or_else(|e| panic!("{e}"));
    config.routes[0].clone()
}

fn feedbacks_route(scratch: &TestSchema) -> Arc<Route> {
    route(
        &scratch.name,
        "feedbacks",
        "id",
        Some("message"),
        "created_at",
    )
}

fn at(seconds: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::seconds(seconds)
}

/// Long before any test row.
fn long_ago() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap()
}

/// Every page of a sweep; checks each is at most `page_size` and that done stays done.
async fn sweep_pages(
    rows: &Rows,
    route: &Route,
    since: DateTime<Utc>,
    page_size: usize,
) -> Vec<Vec<Row>> {
    let mut sweep = rows.since(route, since, page_size);
    let mut pages = Vec::new();
    loop {
        let page = sweep.next_page().await.unwrap_or_else(|e| panic!("{e:#}"));
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= page_size, "a page of {} rows", page.len());
        pages.push(page);
        assert!(pages.len() < 10_000, "the sweep does not end");
    }
    assert!(
        sweep.next_page().await.unwrap().is_empty(),
        "done stays done"
    );
    pages
}

/// Every row of a sweep, in order: [`sweep_pages`], flattened.
async fn swept(rows: &Rows, route: &Route, since: DateTime<Utc>, page_size: usize) -> Vec<Row> {
    let pages = sweep_pages(rows, route, since, page_size).await;
    pages.into_iter().flatten().collect()
}

fn int_ids(rows: &[Row]) -> Vec<i64> {
    rows.iter()
        .map(|r| {
            r.record["id"]
                .as_i64()
                .unwrap_or_else(|| panic!("id {} is not a number", r.record["id"]))
        })
        .collect()
}

/// `feedbacks`: ids 1..=25 created a minute apart (inserted in random order), and row 26 with
/// no created time.
fn feedbacks_table(t: &str) -> String {
    format!(
        "create table {t} (id bigint primary key, message text, score integer, \
             ratio numeric, ok boolean, tags text[], meta jsonb, created_at timestamptz);
         insert into {t} (id, message, score, ratio, ok, tags, meta, created_at)
           select i, 'message ' || i, i * 10, i / 4.0, i % 2 = 0, array['a', 'b'],
                  jsonb_build_object('n', i),
                  timestamptz '2024-01-01 00:00:00+00' + i * interval '1 minute'
           from generate_series(1, 25) i order by random();
         insert into {t} (id, message) values (26, 'no time');"
    )
}

/// A fresh schema named from `prefix`, with a `feedbacks` table that the SQL `make` gives
/// (passed the table's quoted name); `Rows` on it, and the feedbacks route.
async fn feedbacks_from(
    prefix: &str,
    make: impl FnOnce(&str) -> String,
) -> Option<(TestSchema, Rows, Arc<Route>)> {
    let s = TestSchema::create(prefix).await?;
    s.execute(&make(&s.table("feedbacks"))).await;
    let rows = rows_of(&s).await;
    let route = feedbacks_route(&s);
    Some((s, rows, route))
}

#[tokio::test]
async fn pages_of_seven_give_all_25_rows_in_order_once() {
    let (_s, rows, route) = or_skip!(feedbacks_from("rows_pages_", feedbacks_table).await);
    rows.check_columns(&route, true).await.unwrap();

    let pages = sweep_pages(&rows, &route, long_ago(), 7).await;
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![7, 7, 7, 4]);
    let all: Vec<Row> = pages.into_iter().flatten().collect();
    assert_eq!(
        int_ids(&all),
        (1..=25).collect::<Vec<_>>(),
        "row 26 has no created time: outside every window"
    );
    for row in &all {
        let id = row.record["id"].as_i64().unwrap();
        assert_eq!(row.created_at, at(id * 60));
    }

    // The window from row 11's creation on.
    let window = sweep_pages(&rows, &route, at(11 * 60), 7).await;
    let ids = int_ids(&window.into_iter().flatten().collect::<Vec<_>>());
    assert_eq!(ids, (11..=25).collect::<Vec<_>>());

    // A window after every row, and a page bigger than the table.
    assert!(sweep_pages(&rows, &route, at(26 * 60), 7).await.is_empty());
    let one = sweep_pages(&rows, &route, long_ago(), 100).await;
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].len(), 25);
}

#[tokio::test]
async fn integer_ids_page_as_numbers_with_ties_broken_by_id() {
    // Rows 6..=12 share one created time, so the keyset runs on the id across 9 → 10,
    // where text would put "10" before "9".
    let made = feedbacks_from("rows_ties_", |t| {
        format!(
        "create table {t} (id integer primary key, message text, created_at timestamptz not null);
         insert into {t} select i, 'm' || i,
             timestamptz '2024-01-01 00:00:00+00'
               + (case when i between 6 and 12 then 6 else i end) * interval '1 second'
           from generate_series(1, 12) i order by random();"
        )
    });
    let (_s, rows, route) = or_skip!(made.await);
    for page_size in 1..=13 {
        let pages = sweep_pages(&rows, &route, long_ago(), page_size).await;
        let all: Vec<Row> = pages.iter().flatten().cloned().collect();
        assert_eq!(
            int_ids(&all),
            (1..=12).collect::<Vec<_>>(),
            "page size {page_size}"
        );
        assert_eq!(
            pages.len(),
            12usize.div_ceil(page_size),
            "page size {page_size}"
        );
    }
    let three = sweep_pages(&rows, &route, long_ago(), 3).await;
    assert_eq!(int_ids(&three[2]), vec![7, 8, 9]);
    assert_eq!(int_ids(&three[3]), vec![10, 11, 12]);
    // A window that starts on the tie takes all of it.
    let tie = sweep_pages(&rows, &route, at(6), 2).await;
    assert_eq!(
        int_ids(&tie.into_iter().flatten().collect::<Vec<_>>()),
        (6..=12).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn uuid_ids_page_in_uuid_order() {
    let made = feedbacks_from("rows_uuid_", |t| {
        format!(
            "create table {t} (id uuid primary key default gen_random_uuid(), message text,
                           created_at timestamptz not null);
         insert into {t} (message, created_at)
           select 'm' || i, timestamptz '2024-01-01 00:00:00+00' + (i / 5) * interval '1 second'
           from generate_series(1, 23) i;"
        )
    });
    let (s, rows, route) = or_skip!(made.await);
    let t = s.table("feedbacks");
    let by_keyset = format!("select id::text from {t} order by created_at, id");
    let expected: Vec<String> = column(&s.client, &by_keyset).await;
    for page_size in [1, 4, 5, 23, 50] {
        let all = swept(&rows, &route, long_ago(), page_size).await;
        let ids: Vec<String> = all
            .iter()
            .map(|r| {
                r.record["id"]
                    .as_str()
                    .expect("a uuid is a string")
                    .to_owned()
            })
            .collect();
        assert_eq!(ids, expected, "page size {page_size}");
    }
    let first = &expected[0];
    let row = rows.by_id(&route, first).await.unwrap().unwrap();
    assert_eq!(row.record["id"], json!(first));
    assert!(rows
        .by_id(&route, "00000000-0000-0000-0000-000000000000")
        .await
        .unwrap()
        .is_none());
    let err = rows
        .by_id(&route, "not-a-uuid")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("uuid"), "{err}");
}

#[tokio::test]
async fn names_that_need_quoting_work() {
    let s = or_skip!(TestSchema::create("my-app-").await);
    let t = s.table("Feedback Items");
    s.execute(&format!(
        "create table {t} (\"ID\" bigint primary key, \"Say \"\"what\"\"\" text,
                           \"Created At\" timestamptz not null, r text);
         insert into {t} select i, 'text ' || i,
             timestamptz '2024-01-01 00:00:00+00' + i * interval '1 minute', 'column r'
           from generate_series(1, 9) i;"
    ))
    .await;
    let rows = rows_of(&s).await;
    let route = route(
        &s.name,
        "Feedback Items",
        "ID",
        Some("Say \"what\""),
        "Created At",
    );
    rows.check_columns(&route, true)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let all = swept(&rows, &route, long_ago(), 4).await;
    let ids: Vec<i64> = all
        .iter()
        .map(|r| r.record["ID"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, (1..=9).collect::<Vec<_>>());
    // A column named like the query's alias does not stand in for the row.
    assert_eq!(all[0].record["r"], json!("column r"));
    assert_eq!(all[0].record["Say \"what\""], json!("text 1"));
    let row = rows.by_id(&route, "3").await.unwrap().unwrap();
    assert_eq!(row.record["Say \"what\""], json!("text 3"));
    assert_eq!(row.created_at, at(180));
}

#[tokio::test]
async fn a_missing_table_or_column_is_named() {
    let s = or_skip!(TestSchema::create("rows_missing_").await);
    s.execute(&feedbacks_table(&s.table("feedbacks"))).await;
    s.execute(&format!(
        "create table {} (id bigint, created_at text)",
        s.table("texty")
    ))
    .await;
    let rows = rows_of(&s).await;
    let schema = s.name.as_str();
    let cases = [
        (
            route(schema, "nope", "id", Some("message"), "created_at"),
            vec![format!("table {schema}.nope does not exist")],
        ),
        (
            route(schema, "Feedbacks", "id", Some("message"), "created_at"),
            vec![
                "\"Feedbacks\" does not exist".into(),
                "table = \"feedbacks\"".into(),
            ],
        ),
        (
            route(
                "no_such_schema",
                "feedbacks",
                "id",
                Some("message"),
                "created_at",
            ),
            vec!["no schema \"no_such_schema\"".into()],
        ),
        (
            route(schema, "feedbacks", "id", Some("message"), "inserted_at"),
            vec![
                format!("table {schema}.feedbacks has no column \"inserted_at\""),
                "created_column".into(),
            ],
        ),
        (
            route(schema, "feedbacks", "uid", Some("message"), "created_at"),
            vec![
                format!("table {schema}.feedbacks has no column \"uid\""),
                "id_column".into(),
            ],
        ),
        (
            route(schema, "feedbacks", "id", Some("body"), "created_at"),
            vec![
                format!("table {schema}.feedbacks has no column \"body\""),
                "text_column".into(),
            ],
        ),
        (
            route(schema, "feedbacks", "ID", Some("message"), "created_at"),
            vec!["did you mean id_column = \"id\"".into()],
        ),
        (
            route(schema, "texty", "id", None, "created_at"),
            vec!["is of type text".into(), "created_column".into()],
        ),
    ];
    for (route, expected) in cases {
        let errors = [
            rows.check_columns(&route, true).await.unwrap_err(),
            rows.since(&route, long_ago(), 10)
                .next_page()
                .await
                .unwrap_err(),
            rows.by_id(&route, "1").await.unwrap_err(),
        ];
        for err in errors {
            let err = format!("{err:#}");
            for part in &expected {
                assert!(err.contains(part.as_str()), "expected {part:?} in: {err}");
            }
        }
        eprintln!("{}", rows.check_columns(&route, true).await.unwrap_err());
    }
    // Without a text column, the check does not look for one.
    rows.check_columns(&route(schema, "feedbacks", "id", None, "created_at"), true)
        .await
        .unwrap();
}

#[tokio::test]
async fn by_id_finds_a_row_as_the_webhook_would_carry_it() {
    let (_s, rows, route) = or_skip!(feedbacks_from("rows_by_id_", feedbacks_table).await);
    let row = rows.by_id(&route, "7").await.unwrap().expect("row 7");
    let record = Value::Object(row.record.clone());
    assert_eq!(record["id"], json!(7));
    assert_eq!(record["message"], json!("message 7"));
    assert_eq!(record["score"], json!(70));
    assert_eq!(record["ratio"].as_f64(), Some(1.75));
    assert!(record["ratio"].is_number(), "{record}");
    assert_eq!(record["ok"], json!(false));
    assert_eq!(record["tags"], json!(["a", "b"]));
    assert_eq!(record["meta"], json!({"n": 7}));
    assert!(record["created_at"].is_string(), "{record}");
    assert_eq!(row.created_at, at(7 * 60));
    // The same row as the sweep reads it.
    let swept = sweep_pages(&rows, &route, at(7 * 60), 1).await;
    assert_eq!(swept[0][0].record, row.record);

    assert!(rows.by_id(&route, "999").await.unwrap().is_none());
    let err = rows.by_id(&route, "abc").await.unwrap_err().to_string();
    assert!(err.contains("bigint"), "{err}");
    eprintln!("{err}");
    let err = rows.by_id(&route, "26").await.unwrap_err().to_string();
    assert!(
        err.contains("\"created_at\"") && err.contains("NULL"),
        "{err}"
    );
}

/// A row serde_json cannot take (a number past f64's range, jsonb nested deeper than 128) is
/// an error naming the table, for `by_id` and for the sweep's pages: never a panic.
#[tokio::test]
async fn a_row_json_cannot_read_is_an_error_naming_the_table() {
    let (s, rows, route) = or_skip!(feedbacks_from("rows_unreadable_", feedbacks_table).await);
    let t = s.table("feedbacks");
    s.execute(&format!(
        "insert into {t} (id, ratio, created_at) values (27, 1e400, now());
         insert into {t} (id, meta, created_at)
           values (28, (repeat('[', 200) || repeat(']', 200))::jsonb, now());"
    ))
    .await;
    for id in ["27", "28"] {
        let err = rows.by_id(&route, id).await.unwrap_err().to_string();
        assert!(err.contains("could not read a row of table"), "{err}");
        assert!(err.contains("feedbacks"), "{err}");
    }
    let mut pages = rows.since(&route, long_ago(), 100);
    let err = pages.next_page().await.unwrap_err().to_string();
    assert!(err.contains("could not read a row of table"), "{err}");
}

#[tokio::test]
async fn a_timestamp_without_time_zone_is_read_as_utc() {
    let made = feedbacks_from("rows_naive_", |t| {
        format!(
            "create table {t} (id bigint primary key, message text, created_at timestamp not null);
         insert into {t} select i, 'm', timestamp '2024-01-01 00:00:00' + i * interval '1 second'
           from generate_series(1, 10) i;"
        )
    });
    let (_s, rows, route) = or_skip!(made.await);
    let all = swept(&rows, &route, at(5), 2).await;
    assert_eq!(int_ids(&all), (5..=10).collect::<Vec<_>>());
    assert_eq!(all[0].created_at, at(5));
}

/// Measured, not asserted on time: how long 200,000 rows take in pages of 1,000, without and
/// with an index on (created_at, id).
#[tokio::test]
async fn two_hundred_thousand_rows_stream_in_pages() {
    let s = or_skip!(TestSchema::create("rows_big_").await);
    const N: usize = 200_000;
    let t = s.table("feedbacks");
    let started = Instant::now();
    s.execute(&format!(
        "create table {t} (id bigint primary key, message text not null,
                           created_at timestamptz not null);
         insert into {t} select i, 'feedback number ' || i,
             timestamptz '2024-01-01 00:00:00+00' + (i / 4) * interval '1 millisecond'
           from generate_series(1, {N}) i;
         analyze {t};"
    ))
    .await;
    eprintln!("200k rows: made the table in {:?}", started.elapsed());
    let rows = rows_of(&s).await;
    let route = feedbacks_route(&s);
    for label in [
        "without an index on (created_at, id)",
        "with an index on (created_at, id)",
    ] {
        if label.starts_with("with ") {
            s.execute(&format!("create index on {t} (created_at, id)"))
                .await;
        }
        let started = Instant::now();
        let mut sweep = rows.since(&route, long_ago(), 1_000);
        let mut seen = vec![false; N + 1];
        let (mut count, mut pages, mut peak) = (0usize, 0usize, 0usize);
        let mut last: Option<(DateTime<Utc>, i64)> = None;
        loop {
            let page = sweep.next_page().await.unwrap_or_else(|e| panic!("{e:#}"));
            if page.is_empty() {
                break;
            }
            pages += 1;
            peak = peak.max(page.len());
            for row in &page {
                let id = row.record["id"].as_i64().unwrap();
                let key = (row.created_at, id);
                assert!(last.is_none_or(|last| last < key), "out of order at {id}");
                last = Some(key);
                assert!(
                    !std::mem::replace(&mut seen[id as usize], true),
                    "{id} twice"
                );
                count += 1;
            }
        }
        let took = started.elapsed();
        assert_eq!(count, N);
        assert_eq!(peak, 1_000);
        eprintln!(
            "200k rows {label}: {count} rows in {pages} pages in {took:?} \
             ({:.0} rows/s); the largest page held {peak} rows",
            count as f64 / took.as_secs_f64()
        );
    }
}

// ---- TLS ------------------------------------------------------------------------------------

/// The certificates of a test: a CA, a server certificate it signs for 127.0.0.1 only (not for
/// `localhost`), and an unrelated CA.
struct Certificates {
    ca: std::path::PathBuf,
    other_ca: std::path::PathBuf,
    server_crt: std::path::PathBuf,
    server_key: std::path::PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    checked(Command::new("openssl").args(args).current_dir(dir));
}

/// `openssl req`'s words for a new P-256 key, unencrypted.
const NEW_KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

fn make_certificates(dir: &Path) -> Certificates {
    let new_ca = |name: &str| {
        let (key, pem) = (format!("{name}.key"), format!("{name}.pem"));
        let subject = format!("/CN=rowbranch test {name}");
        let rest = [
            "-keyout",
            &key,
            "-out",
            &pem,
            "-days",
            "3",
            "-subj",
            &subject,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ];
        openssl(dir, &[&["req", "-x509"][..], &NEW_KEY, &rest].concat());
    };
    new_ca("ca");
    new_ca("other-ca");
    let rest = [
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ];
    openssl(dir, &[&["req", "-new"][..], &NEW_KEY, &rest].concat());
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "3",
            "-extfile",
            "server.ext",
        ],
    );
    Certificates {
        ca: dir.join("ca.pem"),
        other_ca: dir.join("other-ca.pem"),
        server_crt: dir.join("server.crt"),
        server_key: dir.join("server.key"),
    }
}

/// Makes the server's user the owner of `dir`'s key and certificate, so that PostgreSQL accepts
/// the key (it wants it owned by its own user, mode 0600). `None` when that cannot be done here:
/// the server runs elsewhere, or as another user and this test is not root.
fn hand_to_server(dir: &Path, data_directory: &str) -> Option<()> {
    use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
    let server = std::fs::metadata(data_directory).ok()?;
    let mine = std::fs::metadata(dir.join("server.key")).ok()?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).ok()?;
    for name in ["server.key", "server.crt"] {
        let path = dir.join(name);
        let mode = if name.ends_with(".key") { 0o600 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).ok()?;
        if mine.uid() != server.uid() {
            chown(&path, Some(server.uid()), Some(server.gid())).ok()?;
        }
    }
    Some(())
}

/// Connects with `url`, retrying while the server may still be reloading its TLS settings.
async fn connect_eventually(url: &str) -> Rows {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match Rows::connect(url).await {
            Ok(rows) => return rows,
            Err(e) if Instant::now() > deadline => panic!("{url}: {e:#}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The throwaway server is switched to TLS with a certificate from a CA made here (by settings
/// that reload without a restart), and back at the end.
#[tokio::test]
async fn tls_modes_against_a_server_with_its_own_ca() {
    let s = or_skip!(TestSchema::create("rows_tls_").await);
    if Command::new("openssl").arg("version").output().is_err() {
        eprintln!("skipping the TLS test: no openssl command to make certificates with");
        return;
    }
    let superuser: bool = s
        .client
        .query_one(
            "select rolsuper from pg_roles where rolname = current_user",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    if !superuser {
        eprintln!(
            "skipping the TLS test: DATABASE_URL's user may not change the server's settings"
        );
        return;
    }
    s.execute(&feedbacks_table(&s.table("feedbacks"))).await;
    let route = feedbacks_route(&s);
    // Another run of this test against the same server waits for this one.
    let lock = connect(&admin_config(&s.url)).await;
    lock.batch_execute("select pg_advisory_lock(7273010)")
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let certs = make_certificates(dir.path());
    let data: String = s
        .client
        .query_one("select current_setting('data_directory')", &[])
        .await
        .unwrap()
        .get(0);
    if hand_to_server(dir.path(), &data).is_none() {
        eprintln!(
            "skipping the TLS test: the server's data directory {data} is not on this machine, \
             or this test may not give the server's user a key file"
        );
        lock.batch_execute("select pg_advisory_unlock(7273010)")
            .await
            .unwrap();
        return;
    }
    let quote = |p: &Path| p.display().to_string().replace('\'', "''");
    let (crt, key) = (quote(&certs.server_crt), quote(&certs.server_key));
    for sql in [
        format!("alter system set ssl_cert_file = '{crt}'"),
        format!("alter system set ssl_key_file = '{key}'"),
        "alter system set ssl = on".to_owned(),
        "select pg_reload_conf()".to_owned(),
    ] {
        s.client.batch_execute(&sql).await.unwrap();
    }

    let checks = tokio::spawn(tls_checks(
        s.url.clone(),
        route,
        certs.ca.clone(),
        certs.other_ca.clone(),
    ));
    let outcome = checks.await;

    for sql in [
        "alter system reset ssl",
        "alter system reset ssl_cert_file",
        "alter system reset ssl_key_file",
        "select pg_reload_conf()",
    ] {
        s.client.batch_execute(sql).await.unwrap();
    }
    lock.batch_execute("select pg_advisory_unlock(7273010)")
        .await
        .unwrap();
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn tls_checks(
    url: String,
    route: Arc<Route>,
    ca: std::path::PathBuf,
    other_ca: std::path::PathBuf,
) {
    let config: tokio_postgres::Config = url.parse().unwrap();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("postgres");
    let dbname = config.get_dbname().unwrap_or(user);
    let password = config
        .get_password()
        .map(|p| {
            format!(
                " password='{}'",
                String::from_utf8_lossy(p).replace('\'', "\\'")
            )
        })
        .unwrap_or_default();
    let kv = |host: &str, tls: &str| {
        format!("host={host} port={port} user={user} dbname={dbname}{password} {tls}")
    };
    let ca = ca.display().to_string();
    let other_ca = other_ca.display().to_string();

    // The server presents a certificate for 127.0.0.1 from our CA: verified in full.
    let full = kv(
        "127.0.0.1",
        &format!("sslmode=verify-full sslrootcert='{ca}'"),
    );
    let rows = connect_eventually(&full).await;
    rows.check_columns(&route, true).await.unwrap();
    assert_eq!(sweep_pages(&rows, &route, long_ago(), 10).await.len(), 3);
    // The URL form, the CA's path percent-encoded.
    let encoded: String = ca
        .bytes()
        .map(|b| match b {
            b'/' => "%2F".to_owned(),
            b if b.is_ascii_alphanumeric() || b"-._".contains(&b) => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect();
    let sep = if url.contains('?') { '&' } else { '?' };
    let rows = Rows::connect(&format!(
        "{url}{sep}sslmode=verify-full&sslrootcert={encoded}"
    ))
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));
    rows.check_columns(&route, true).await.unwrap();

    // Each connection names itself, so the server can say whether it is encrypted.
    let observer = connect(&admin_config(&url)).await;
    let ok = [
        // The chain only: `localhost` is not on the certificate, and need not be.
        (
            "verify_ca",
            kv(
                "localhost",
                &format!("sslmode=verify-ca sslrootcert='{ca}'"),
            ),
            true,
        ),
        // Encrypted, not verified.
        ("require", kv("localhost", "sslmode=require"), true),
        ("prefer", kv("127.0.0.1", "sslmode=prefer"), true),
        ("disable", kv("127.0.0.1", "sslmode=disable"), false),
    ];
    for (name, url, encrypted) in ok {
        let name = format!("rowbranch_tls_{name}_{}", random_hex(4));
        let url = format!("{url} application_name={name}");
        let rows = Rows::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e:#}"));
        rows.check_columns(&route, true).await.unwrap();
        let ssl: bool = observer
            .query_one(
                "select s.ssl from pg_stat_ssl s join pg_stat_activity a using (pid) \
                 where a.application_name = $1",
                &[&name],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(ssl, encrypted, "{url}");
    }

    let refused = [
        (
            kv(
                "localhost",
                &format!("sslmode=verify-full sslrootcert='{ca}'"),
            ),
            "not issued for that host name",
        ),
        (kv("127.0.0.1", "sslmode=verify-full"), "sslrootcert"),
        (
            kv(
                "127.0.0.1",
                &format!("sslmode=verify-full sslrootcert='{other_ca}'"),
            ),
            "was not accepted with the CA in sslrootcert",
        ),
        (
            kv(
                "127.0.0.1",
                &format!("sslmode=require sslrootcert='{other_ca}'"),
            ),
            "was not accepted with the CA in sslrootcert",
        ),
    ];
    for (url, expected) in refused {
        let err = match Rows::connect(&url).await {
            Ok(_) => panic!("{url} connected"),
            Err(e) => format!("{e:#}"),
        };
        eprintln!("{err}");
        assert!(err.contains(expected), "expected {expected:?} in: {err}");
    }
}
