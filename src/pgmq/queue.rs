//! The queue's SQL. Every call is one pgmq 1.4.4 has and the latest keeps (checked against
//! `signatures-1.4.4.txt` by a test): every argument cast (`$2::bigint`), so an overloaded
//! function resolves the same in every version; result columns selected by name, so a column
//! a later version adds or moves changes nothing; no function named by its signature. Reads of
//! the tables themselves (`pgmq.q_<queue>`, `pgmq.a_<queue>`) use the 1.4.4 columns only. Every
//! statement is unprepared (`query_typed`), so Supavisor's transaction pooler works.

use chrono::{DateTime, Utc};
use tokio_postgres::types::Type;
use tokio_postgres::Client;

/// A message as read: its id, how often it has been read (this read included), when it was
/// sent, and its JSON as text.
#[derive(Debug, Clone)]
pub struct Message {
    pub id: i64,
    pub read_ct: i32,
    pub enqueued_at: DateTime<Utc>,
    pub body: String,
}

/// `"q_{queue}"` or `"a_{queue}"`, quoted: the queue's table as pgmq names it (the name was
/// checked to be lowercase, so pgmq's lowercasing keeps it).
pub fn table(kind: char, queue: &str) -> String {
    format!("pgmq.\"{kind}_{}\"", queue.replace('"', "\"\""))
}

/// `pgmq.read`: up to `qty` visible messages, hidden from other readers for `vt` seconds.
pub async fn read(
    client: &Client,
    queue: &str,
    vt: i32,
    qty: i32,
) -> Result<Vec<Message>, tokio_postgres::Error> {
    let rows = client
        .query_typed(
            "select m.msg_id, m.read_ct, m.enqueued_at, m.message::text \
             from pgmq.read($1::text, $2::integer, $3::integer) as m",
            &[(&queue, Type::TEXT), (&vt, Type::INT4), (&qty, Type::INT4)],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| Message {
            id: row.get(0),
            read_ct: row.get(1),
            enqueued_at: row.get(2),
            body: row.get(3),
        })
        .collect())
}

/// `pgmq.set_vt` for each of `ids`, in one round trip: each message still there, with the
/// `read_ct` it has now. A message missing from the answer is gone (archived, deleted).
pub async fn renew(
    client: &Client,
    queue: &str,
    ids: &[i64],
    vt: i32,
) -> Result<Vec<(i64, i32)>, tokio_postgres::Error> {
    let rows = client
        .query_typed(
            "select m.msg_id, m.read_ct \
             from unnest($2::bigint[]) as held(id), \
                  lateral pgmq.set_vt($1::text, held.id, $3::integer) as m",
            &[
                (&queue, Type::TEXT),
                (&ids, Type::INT8_ARRAY),
                (&vt, Type::INT4),
            ],
        )
        .await?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// `pgmq.archive`: false when the message was not there (archived already, or deleted).
pub async fn archive(client: &Client, queue: &str, id: i64) -> Result<bool, tokio_postgres::Error> {
    let row = client
        .query_typed(
            "select pgmq.archive($1::text, $2::bigint)",
            &[(&queue, Type::TEXT), (&id, Type::INT8)],
        )
        .await?;
    Ok(row
        .first()
        .and_then(|r| r.get::<_, Option<bool>>(0))
        .unwrap_or(false))
}

/// Sends `letter` (JSON text) to the dead-letter queue and archives message `id`, in one
/// statement, so that either both happen or neither. False when the message was not there.
pub async fn dead_letter(
    client: &Client,
    queue: &str,
    dead: &str,
    id: i64,
    letter: &str,
) -> Result<bool, tokio_postgres::Error> {
    let rows = client
        .query_typed(
            "with sent as (select pgmq.send($1::text, $2::text::jsonb, 0::integer) as id) \
             select pgmq.archive($3::text, $4::bigint) from sent",
            &[
                (&dead, Type::TEXT),
                (&letter, Type::TEXT),
                (&queue, Type::TEXT),
                (&id, Type::INT8),
            ],
        )
        .await?;
    Ok(rows
        .first()
        .and_then(|r| r.get::<_, Option<bool>>(0))
        .unwrap_or(false))
}

/// `pgmq.send` of `body` (JSON text) to `queue`: the new message's id.
pub async fn send(client: &Client, queue: &str, body: &str) -> Result<i64, tokio_postgres::Error> {
    let row = client
        .query_typed(
            "select pgmq.send($1::text, $2::text::jsonb, 0::integer)",
            &[(&queue, Type::TEXT), (&body, Type::TEXT)],
        )
        .await?;
    Ok(row.first().map_or(0, |r| r.get(0)))
}

/// `pgmq.metrics`: the queue's length and the age of its oldest message in seconds (0 when
/// empty).
pub async fn metrics(client: &Client, queue: &str) -> Result<(i64, i64), tokio_postgres::Error> {
    let rows = client
        .query_typed(
            "select m.queue_length, m.oldest_msg_age_sec from pgmq.metrics($1::text) as m",
            &[(&queue, Type::TEXT)],
        )
        .await?;
    Ok(rows.first().map_or((0, 0), |r| {
        (
            r.get::<_, Option<i64>>(0).unwrap_or(0),
            i64::from(r.get::<_, Option<i32>>(1).unwrap_or(0)),
        )
    }))
}

/// The queue names pgmq knows (`pgmq.list_queues`), with whether each is unlogged.
pub async fn list(client: &Client) -> Result<Vec<(String, bool)>, tokio_postgres::Error> {
    let rows = client
        .query_typed(
            "select q.queue_name::text, q.is_unlogged from pgmq.list_queues() as q",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Deletes archived messages older than `retention_s` seconds: how many went. (pgmq has no
/// function for it; the archive is a plain table.)
pub async fn forget_archived(
    client: &Client,
    queue: &str,
    retention_s: f64,
) -> Result<u64, tokio_postgres::Error> {
    let sql = format!(
        "with gone as ( \
           delete from {} where archived_at < now() - ($1::double precision * interval '1 second') \
           returning 1 \
         ) select count(*) from gone",
        table('a', queue)
    );
    let rows = client
        .query_typed(&sql, &[(&retention_s, Type::FLOAT8)])
        .await?;
    Ok(rows.first().map_or(0, |r| r.get::<_, i64>(0).max(0) as u64))
}

/// Moves dead letters back to `queue`: the original message of each (all, or the one with id
/// `only`) is sent again and the dead letter archived. How many moved.
pub async fn redrive(
    client: &Client,
    queue: &str,
    dead: &str,
    only: Option<i64>,
) -> Result<u64, tokio_postgres::Error> {
    let sql = format!(
        "with moved as ( \
           select d.msg_id, pgmq.send($1::text, d.message -> 'message', 0::integer) as sent \
           from {dead_table} as d \
           where $3::bigint is null or d.msg_id = $3::bigint \
         ) \
         select pgmq.archive($2::text, moved.msg_id) from moved",
        dead_table = table('q', dead)
    );
    let rows = client
        .query_typed(
            &sql,
            &[
                (&queue, Type::TEXT),
                (&dead, Type::TEXT),
                (&only, Type::INT8),
            ],
        )
        .await?;
    Ok(rows
        .iter()
        .filter(|r| r.get::<_, Option<bool>>(0).unwrap_or(false))
        .count() as u64)
}

/// The ids (as text) of the messages of `schema.table` in the queue, visible or held: rows the
/// sweep leaves to the consumer.
pub async fn queued_ids(
    client: &Client,
    queue: &str,
    schema: &str,
    table_name: &str,
    id_column: &str,
) -> Result<Vec<String>, tokio_postgres::Error> {
    let sql = format!(
        "select m.message -> 'record' ->> $1::text from {} as m \
         where m.message ->> 'schema' = $2::text and m.message ->> 'table' = $3::text",
        table('q', queue)
    );
    let rows = client
        .query_typed(
            &sql,
            &[
                (&id_column, Type::TEXT),
                (&schema, Type::TEXT),
                (&table_name, Type::TEXT),
            ],
        )
        .await?;
    Ok(rows.iter().filter_map(|r| r.get(0)).collect())
}

/// The ids (as text) of the archived messages of `schema.table` since `since`, with when each
/// was archived (the newest archive of an id): when a row's work started, for the sweep. One
/// range scan of the archive's `archived_at` index, which pgmq creates.
pub async fn archived_ids(
    client: &Client,
    queue: &str,
    schema: &str,
    table_name: &str,
    id_column: &str,
    since: DateTime<Utc>,
) -> Result<Vec<(String, DateTime<Utc>)>, tokio_postgres::Error> {
    let sql = format!(
        "select m.message -> 'record' ->> $1::text, max(m.archived_at) from {} as m \
         where m.archived_at >= $4::timestamptz \
           and m.message ->> 'schema' = $2::text and m.message ->> 'table' = $3::text \
         group by 1",
        table('a', queue)
    );
    let rows = client
        .query_typed(
            &sql,
            &[
                (&id_column, Type::TEXT),
                (&schema, Type::TEXT),
                (&table_name, Type::TEXT),
                (&since, Type::TIMESTAMPTZ),
            ],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| Some((r.get::<_, Option<String>>(0)?, r.get(1))))
        .collect())
}
