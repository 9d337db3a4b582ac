//! The queue's SQL. Every call is one pgmq 1.4.4 has and the latest keeps (checked against
//! `signatures-1.4.4.txt` by a test): every argument cast (`$2::bigint`), so an overloaded
//! function resolves the same in every version; result columns selected by name, so a column
//! a later version adds or moves changes nothing; no function named by its signature. Reads of
//! the tables themselves (`pgmq.q_<queue>`, `pgmq.a_<queue>`: `{q}` and `{a}` in the statements
//! below, filled in by [`on`]) use the 1.4.4 columns only. Every statement is unprepared
//! ([`query`]), so Supavisor's transaction pooler works.

use chrono::{DateTime, Utc};
use tokio_postgres::Client;

use super::{query, quote_ident, value, Result};
use crate::config::{PgmqSettings, Route};
use crate::identity::QueueName;

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
pub fn table(kind: char, queue: &QueueName) -> String {
    format!("pgmq.{}", quote_ident(&format!("{kind}_{queue}")))
}

/// A statement on `queue`'s tables: `{q}` the queue's, `{a}` its archive's.
fn on(queue: &QueueName, sql: &str) -> String {
    sql.replace("{q}", &table('q', queue))
        .replace("{a}", &table('a', queue))
}

// pgmq.send takes a NULL message; such a message is no row's event, and is dead-lettered as
// malformed like any other.
const READ: &str = "select m.msg_id, m.read_ct, m.enqueued_at, coalesce(m.message::text, 'null') \
    from pgmq.read($1::text, $2::integer, $3::integer) as m";

/// `pgmq.read`: up to `qty` visible messages, hidden from other readers for `vt` seconds.
pub async fn read(client: &Client, queue: &QueueName, vt: i32, qty: i32) -> Result<Vec<Message>> {
    let rows = query(client, READ, &[&queue.as_str(), &vt, &qty]).await?;
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

const RENEW: &str = "with mine as ( \
       select q.msg_id from {q} as q \
       join unnest($2::bigint[], $3::integer[]) as held(id, read_ct) \
         on q.msg_id = held.id and q.read_ct = held.read_ct \
       for update of q \
     ) \
     select m.msg_id, m.read_ct \
     from mine, lateral pgmq.set_vt($1::text, mine.msg_id::bigint, $4::integer) as m";

/// `pgmq.set_vt` for each held message that is still as this process read it (the same
/// `read_ct`), in one round trip and one statement: the check and the new visibility go
/// together, so a message another reader holds now (it read it again: another `read_ct`) keeps
/// that reader's lease. The rows are locked while they change, so no read takes them in
/// between. Answers the messages renewed; one missing was lost (another reader has it, or it is
/// gone).
pub async fn renew(
    client: &Client,
    queue: &QueueName,
    held: &[(i64, i32)],
    vt: i32,
) -> Result<Vec<(i64, i32)>> {
    let (ids, reads): (Vec<i64>, Vec<i32>) = held.iter().copied().unzip();
    let sql = on(queue, RENEW);
    let rows = query(client, &sql, &[&queue.as_str(), &ids, &reads, &vt]).await?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// `pgmq.archive`: false when the message was not there (archived already, or deleted).
pub async fn archive(client: &Client, queue: &QueueName, id: i64) -> Result<bool> {
    let sql = "select pgmq.archive($1::text, $2::bigint)";
    Ok(value(client, sql, &[&queue.as_str(), &id])
        .await?
        .unwrap_or(false))
}

const DEAD_LETTER: &str = "with gone as (select pgmq.archive($3::text, $4::bigint) as archived), \
    sent as (select pgmq.send($1::text, $2::text::jsonb, 0::integer) as id \
             from gone where gone.archived) \
    select sent.id from sent";

/// Archives message `id` and, only when that archived it, sends `letter` (JSON text) to the
/// dead-letter queue, in one statement: both happen or neither, and made again (after a lost
/// answer) it sends nothing twice. The dead letter's own id, or `None` when the message was
/// not there (archived already).
pub async fn dead_letter(
    client: &Client,
    queue: &QueueName,
    dead: &QueueName,
    id: i64,
    letter: &str,
) -> Result<Option<i64>> {
    let args: [&dyn super::Arg; 4] = [&dead.as_str(), &letter, &queue.as_str(), &id];
    Ok(value(client, DEAD_LETTER, &args).await?)
}

/// `pgmq.metrics`: the queue's length and the age of its oldest message in seconds (0 when
/// empty).
pub async fn metrics(client: &Client, queue: &QueueName) -> Result<(i64, i64)> {
    let sql = "select coalesce(m.queue_length, 0), coalesce(m.oldest_msg_age_sec, 0)::bigint \
               from pgmq.metrics($1::text) as m";
    let rows = query(client, sql, &[&queue.as_str()]).await?;
    Ok(rows.first().map_or((0, 0), |r| (r.get(0), r.get(1))))
}

/// The queue names pgmq knows (`pgmq.list_queues`), with whether each is unlogged.
pub async fn list(client: &Client) -> Result<Vec<(String, bool)>> {
    let sql = "select q.queue_name::text, q.is_unlogged from pgmq.list_queues() as q";
    let rows = query(client, sql, &[]).await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// How many archived messages one statement of [`forget_archived`] deletes, so that the
/// renewals and reads sharing its connection never wait long behind it.
const FORGET_BATCH: i32 = 1000;

// pgmq has no function for it; the archive is a plain table.
const FORGET: &str = "with gone as ( \
       delete from {a} where msg_id in ( \
         select msg_id from {a} \
         where archived_at < now() - ($1::double precision * interval '1 second') \
         limit $2::integer \
       ) returning 1 \
     ) select count(*) from gone";

/// Deletes archived messages older than `retention_s` seconds, a batch per statement: how many
/// went.
pub async fn forget_archived(client: &Client, queue: &QueueName, retention_s: f64) -> Result<u64> {
    let sql = on(queue, FORGET);
    let mut total = 0;
    loop {
        let gone = value::<i64>(client, &sql, &[&retention_s, &FORGET_BATCH]).await?;
        let gone = gone.unwrap_or(0).max(0) as u64;
        total += gone;
        if gone < FORGET_BATCH as u64 {
            return Ok(total);
        }
    }
}

// `{q}` is the dead-letter queue's table here.
const REDRIVE: &str = "with moved as ( \
       select d.msg_id, pgmq.send($1::text, (d.message -> 'message')::jsonb, 0::integer) as sent \
       from {q} as d \
       where $3::bigint is null or d.msg_id = $3::bigint \
     ) \
     select pgmq.archive($2::text, moved.msg_id::bigint) from moved";

/// Moves dead letters back to `queue`: the original message of each (all, or the one with id
/// `only`) is sent again and the dead letter archived. How many moved.
pub async fn redrive(
    client: &Client,
    queue: &QueueName,
    dead: &QueueName,
    only: Option<i64>,
) -> Result<u64> {
    let sql = on(dead, REDRIVE);
    let rows = query(client, &sql, &[&queue.as_str(), &dead.as_str(), &only]).await?;
    let moved = rows
        .iter()
        .filter(|r| r.get::<_, Option<bool>>(0) == Some(true));
    Ok(moved.count() as u64)
}

const MESSAGE_IDS: &str = "select id, bool_or(archived_at is null), max(archived_at) from ( \
       select m.message -> 'record' ->> $1::text as id, null::timestamptz as archived_at \
       from {q} as m \
       where m.message ->> 'schema' = $2::text and m.message ->> 'table' = $3::text \
       union all \
       select m.message -> 'record' ->> $1::text, m.archived_at from {a} as m \
       where m.archived_at >= $4::timestamptz \
         and m.message ->> 'schema' = $2::text and m.message ->> 'table' = $3::text \
     ) as ids where id is not null group by id";

/// The messages of the route's table, by row id (as text): those in the queue, visible or held
/// (rows the sweep leaves to the consumer), and those archived since `since` — each id with
/// whether it is queued and when its newest message was archived (when the row's work started,
/// for the sweep). The archive is read by one range scan of its `archived_at` index, which
/// pgmq creates.
pub async fn message_ids(
    client: &Client,
    queue: &QueueName,
    route: &Route,
    since: DateTime<Utc>,
) -> Result<Vec<(String, bool, Option<DateTime<Utc>>)>> {
    let sql = on(queue, MESSAGE_IDS);
    let (schema, table_name, id_column) = (&route.schema, &route.table, &route.id_column);
    let rows = query(client, &sql, &[id_column, schema, table_name, &since]).await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

/// How many of one table's messages count against the hourly budgets now (`hour_use`).
#[derive(Debug, Clone, PartialEq)]
pub struct TableUse {
    pub schema: String,
    pub table: String,
    /// Archived within the last hour, or held by a reader now.
    pub rows: u64,
    /// Seconds until the oldest of those archived leaves the hour: a row of budget comes back
    /// then. `None` when none was archived (all are held).
    pub frees_in_s: Option<f64>,
}

const HOUR_USE: &str = "select u.schema_name, u.table_name, count(*)::bigint, \
            extract(epoch from min(u.archived_at) + interval '1 hour' - clock_timestamp())::float8 \
     from ( \
       select m.message ->> 'schema' as schema_name, m.message ->> 'table' as table_name, \
              m.archived_at \
       from {a} as m \
       where m.archived_at > clock_timestamp() - interval '1 hour' union all \
       select m.message ->> 'schema', m.message ->> 'table', null::timestamptz \
       from {q} as m \
       where m.read_ct > 0 and m.vt > clock_timestamp() \
         and m.vt <= clock_timestamp() + ($1::integer * interval '1 second') \
     ) as u \
     where u.schema_name is not null and u.table_name is not null \
     group by 1, 2";

/// Per table (each message's event names its `schema` and `table`), the messages that count
/// against an hourly budget now, on the database's clock: those archived within the last
/// hour, whichever process settled them, and those a reader holds now (read, and hidden for at
/// most `lease_s` seconds more — a lease, which every holder renews within that; not a message
/// put off for longer, which nobody works on). Plain SELECTs of the two tables: one range scan
/// of the archive's `archived_at` index, one of the queue's `vt` index.
pub async fn hour_use(client: &Client, queue: &QueueName, lease_s: i32) -> Result<Vec<TableUse>> {
    let rows = query(client, &on(queue, HOUR_USE), &[&lease_s]).await?;
    Ok(rows
        .iter()
        .map(|r| TableUse {
            schema: r.get(0),
            table: r.get(1),
            rows: r.get::<_, i64>(2).max(0) as u64,
            frees_in_s: r.get(3),
        })
        .collect())
}

/// How many messages the queue holds, visible or not: a plain count of its table, which reads
/// none (`pgmq.read` would count a read and hide them).
pub async fn depth(client: &Client, queue: &QueueName) -> Result<i64> {
    let sql = on(queue, "select count(*) from {q}");
    Ok(value(client, &sql, &[]).await?.unwrap_or(0))
}

/// Where a row's message is, as `explain` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RowMessage {
    /// `queue` (waiting, or held by a reader), `archive` (settled), `dead_letter` (refused
    /// for good, with why) or `dead_letter_archive` (a dead letter redriven or removed).
    pub place: &'static str,
    pub msg_id: i64,
    /// How often it was read: each `pgmq.read` counts one.
    pub read_ct: i32,
    pub enqueued_at: DateTime<Utc>,
    /// In the queue: when it is visible again to readers (in the past: visible now).
    pub visible_at: Option<DateTime<Utc>>,
    /// In an archive: when it went there.
    pub archived_at: Option<DateTime<Utc>>,
    /// A dead letter's reason (`bad_id`, `payload_refused`, …).
    pub reason: Option<String>,
    /// A dead letter's original message id in the queue.
    pub original_msg_id: Option<i64>,
}

/// The messages of row `id` (its id as text, as `->>` gives it) of the route's table in the
/// queue, its archive, the dead-letter queue and that one's archive, oldest first. Plain
/// SELECTs of the tables: nothing is read the way `pgmq.read` reads (which counts a read and
/// hides the message), locked or changed. A table that does not exist (a queue never made) is
/// left out. The archives have no index on the message: each is scanned, which `explain`
/// can afford once.
pub async fn row_messages(
    client: &Client,
    pgmq: &PgmqSettings,
    route: &Route,
    id: &str,
) -> Result<Vec<RowMessage>> {
    let (queue, dead) = (&pgmq.queue, &pgmq.dead_letter);
    let (schema, table_name, id_column) = (&route.schema, &route.table, &route.id_column);
    let mut found = Vec::new();
    for (place, kind, of) in [
        ("queue", 'q', queue),
        ("archive", 'a', queue),
        ("dead_letter", 'q', dead),
        ("dead_letter_archive", 'a', dead),
    ] {
        let relation = table(kind, of);
        let exists = "select to_regclass($1::text) is not null";
        if value(client, exists, &[&relation]).await? != Some(true) {
            continue;
        }
        // Where the place holds the row's event (a dead letter under `message`, with why and
        // the original's id beside it), and its times (an archive's: when the message went there).
        let (event, dead_letter) = match of == dead {
            true => (
                "(m.message -> 'message')",
                "m.message ->> 'reason', m.message ->> 'msg_id'",
            ),
            false => ("m.message", "null::text, null::text"),
        };
        let when = match kind {
            'q' => "m.vt, null::timestamptz",
            _ => "null::timestamptz, m.archived_at",
        };
        let sql = format!(
            "select m.msg_id, m.read_ct, m.enqueued_at, {when}, {dead_letter} \
             from {relation} as m \
             where {event} ->> 'schema' = $1::text and {event} ->> 'table' = $2::text \
               and {event} -> 'record' ->> $3::text = $4::text \
             order by m.msg_id"
        );
        let rows = query(client, &sql, &[schema, table_name, id_column, &id]).await?;
        found.extend(rows.iter().map(|r| RowMessage {
            place,
            msg_id: r.get(0),
            read_ct: r.get(1),
            enqueued_at: r.get(2),
            visible_at: r.get(3),
            archived_at: r.get(4),
            reason: r.get(5),
            original_msg_id: r.get::<_, Option<String>>(6).and_then(|id| id.parse().ok()),
        }));
    }
    found.sort_by_key(|m| m.enqueued_at);
    Ok(found)
}

#[cfg(test)]
mod tests {
    //! Every `pgmq.` call in src/ (in a string literal: the SQL) against the pgmq 1.4.4
    //! functions listed in `signatures-1.4.4.txt`: a function listed, with an arity it takes
    //! (arguments with a default may be left out), every argument cast to the type listed, and
    //! every result column selected from it (`… as m` then `m.column`) one that 1.4.4 returns.

    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    const SIGNATURES: &str = include_str!("signatures-1.4.4.txt");

    /// A function of the list: its argument types, how many have a default, what it returns.
    #[derive(Debug)]
    struct Function {
        args: Vec<String>,
        defaults: usize,
        returns: String,
    }

    struct Listed {
        functions: BTreeMap<String, Vec<Function>>,
        /// `pgmq.message_record` and the other composite types: their column names.
        types: BTreeMap<String, Vec<String>>,
    }

    fn listed() -> Listed {
        let mut functions: BTreeMap<String, Vec<Function>> = BTreeMap::new();
        let mut types = BTreeMap::new();
        for line in SIGNATURES
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        {
            if let Some(rest) = line.strip_prefix("type ") {
                let (name, columns) = rest.split_once(" (").expect("type NAME (");
                let columns = columns.strip_suffix(')').expect("a closing )");
                let names = columns
                    .split(", ")
                    .map(|c| c.split_once(' ').expect("name type").0.to_owned())
                    .collect();
                types.insert(name.to_owned(), names);
            } else if let Some(rest) = line.strip_prefix("pgmq.") {
                let (name, rest) = rest.split_once('(').expect("NAME(");
                let (args, returns) = rest.split_once(") returns ").expect(") returns");
                let mut function = Function {
                    args: Vec::new(),
                    defaults: 0,
                    returns: returns.to_owned(),
                };
                for arg in args.split(", ").filter(|a| !a.is_empty()) {
                    let (ty, default) = match arg.split_once(" default ") {
                        Some((ty, _)) => (ty, true),
                        None => (arg, false),
                    };
                    function.args.push(ty.to_owned());
                    function.defaults += usize::from(default);
                }
                functions.entry(name.to_owned()).or_default().push(function);
            }
        }
        Listed { functions, types }
    }

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The string literals of a Rust file (comments skipped), with a `\` line continuation
    /// joined as the compiler joins it. Raw strings are taken as they are.
    fn literals(code: &str) -> Vec<String> {
        let chars: Vec<char> = code.chars().collect();
        let mut out = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '/' if chars.get(i + 1) == Some(&'/') => {
                    while i < chars.len() && chars[i] != '\n' {
                        i += 1;
                    }
                }
                '\'' => {
                    // A char literal ('"', '\'', 'q') or a lifetime ('a): skip what it holds.
                    if chars.get(i + 1) == Some(&'\\') {
                        i += 4;
                    } else if chars.get(i + 2) == Some(&'\'') {
                        i += 3;
                    } else {
                        i += 1;
                    }
                    continue;
                }
                'r' if chars.get(i + 1) == Some(&'#') || chars.get(i + 1) == Some(&'"') => {
                    let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
                    if chars.get(i + 1 + hashes) != Some(&'"')
                        || (i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
                    {
                        i += 1;
                        continue;
                    }
                    let start = i + 2 + hashes;
                    let end_marker: String = std::iter::once('"')
                        .chain("#".repeat(hashes).chars())
                        .collect();
                    let rest: String = chars[start..].iter().collect();
                    let len = rest.find(&end_marker).expect("a closed raw string");
                    out.push(rest[..len].to_owned());
                    i = start + rest[..len].chars().count() + end_marker.len();
                    continue;
                }
                '"' => {
                    let mut text = String::new();
                    i += 1;
                    while chars[i] != '"' {
                        if chars[i] == '\\' {
                            i += 1;
                            match chars[i] {
                                '\n' => {
                                    while chars[i + 1].is_whitespace() {
                                        i += 1;
                                    }
                                }
                                'n' => text.push('\n'),
                                other => text.push(other),
                            }
                        } else {
                            text.push(chars[i]);
                        }
                        i += 1;
                    }
                    out.push(text);
                }
                _ => {}
            }
            i += 1;
        }
        out
    }

    /// One call found: the function's name, its arguments as written, and the alias its
    /// result gets (`pgmq.read(…) as m`).
    struct Call {
        name: String,
        args: Vec<String>,
        alias: Option<String>,
    }

    fn calls(sql: &str) -> Vec<Call> {
        let mut out = Vec::new();
        let mut rest = sql;
        while let Some(at) = rest.find("pgmq.") {
            let after = &rest[at + 5..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let tail = &after[name.len()..];
            rest = tail;
            let Some(inner) = tail.strip_prefix('(') else {
                continue; // a table (`pgmq.q_…`) or a type, not a call
            };
            let (mut depth, mut args, mut current, mut end) = (0, Vec::new(), String::new(), 0);
            for (i, c) in inner.char_indices() {
                match c {
                    '(' | '[' => depth += 1,
                    ')' if depth == 0 => {
                        end = i;
                        break;
                    }
                    ')' | ']' => depth -= 1,
                    ',' if depth == 0 => {
                        args.push(std::mem::take(&mut current).trim().to_owned());
                        continue;
                    }
                    _ => {}
                }
                current.push(c);
            }
            if !current.trim().is_empty() {
                args.push(current.trim().to_owned());
            }
            let after_call = inner[end + 1..].trim_start();
            let alias = after_call.strip_prefix("as ").map(|a| {
                a.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()
            });
            out.push(Call { name, args, alias });
        }
        out
    }

    /// The type an argument is cast to last (`$2::text::jsonb` → `jsonb`), if it is cast.
    fn cast(arg: &str) -> Option<&str> {
        let (_, ty) = arg.rsplit_once("::")?;
        Some(ty.trim())
    }

    #[test]
    fn every_pgmq_call_is_one_pgmq_1_4_4_has_with_every_argument_cast() {
        let listed = listed();
        assert!(
            listed.functions.contains_key("read")
                && listed.types.contains_key("pgmq.message_record"),
            "signatures-1.4.4.txt lists pgmq.read and pgmq.message_record"
        );
        let mut files = Vec::new();
        rust_files(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        let mut seen = 0;
        let mut wrong = Vec::new();
        for file in files {
            let code = std::fs::read_to_string(&file).expect("a readable source file");
            // The SQL that ships: not the tests' own.
            let code = code
                .split("\n#[cfg(test)]\nmod tests")
                .next()
                .unwrap_or_default();
            for sql in literals(code) {
                for call in calls(&sql) {
                    seen += 1;
                    let at = format!(
                        "{}: pgmq.{}({})",
                        file.display(),
                        call.name,
                        call.args.join(", ")
                    );
                    let Some(overloads) = listed.functions.get(&call.name) else {
                        wrong.push(format!("{at}: pgmq 1.4.4 has no {} in the list", call.name));
                        continue;
                    };
                    let casts: Vec<Option<&str>> = call.args.iter().map(|a| cast(a)).collect();
                    if casts.iter().any(Option::is_none) {
                        wrong.push(format!("{at}: an argument without a cast"));
                        continue;
                    }
                    let matching = overloads.iter().find(|f| {
                        call.args.len() <= f.args.len()
                            && call.args.len() + f.defaults >= f.args.len()
                            && casts
                                .iter()
                                .zip(&f.args)
                                .all(|(c, ty)| *c == Some(ty.as_str()))
                    });
                    let Some(function) = matching else {
                        wrong.push(format!("{at}: no listed overload takes these casts"));
                        continue;
                    };
                    let (Some(alias), Some(columns)) = (
                        call.alias.as_deref(),
                        listed
                            .types
                            .get(function.returns.trim_start_matches("setof ")),
                    ) else {
                        continue;
                    };
                    let prefix = format!("{alias}.");
                    for (i, _) in sql.match_indices(&prefix) {
                        let before = sql[..i].chars().next_back();
                        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                            continue;
                        }
                        let column: String = sql[i + prefix.len()..]
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect();
                        if !columns.contains(&column) {
                            wrong.push(format!(
                                "{at}: selects {alias}.{column}, which {} has not in 1.4.4",
                                function.returns
                            ));
                        }
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        assert!(
            seen >= 10,
            "found only {seen} pgmq calls in src/: is the scan broken?"
        );
    }

    #[test]
    fn the_scan_finds_what_breaks_the_rule() {
        let sql = literals(
            "let a = \"select m.headers from pgmq.read($1::text, $2, 3::integer) as m \\\n  where 1\";",
        );
        assert_eq!(
            sql,
            vec!["select m.headers from pgmq.read($1::text, $2, 3::integer) as m where 1"]
        );
        let found = calls(&sql[0]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].name, "read");
        assert_eq!(found[0].args, vec!["$1::text", "$2", "3::integer"]);
        assert_eq!(found[0].alias.as_deref(), Some("m"));
        assert_eq!(cast(&found[0].args[1]), None);
        assert_eq!(cast("(d.message -> 'message')::jsonb"), Some("jsonb"));
        // Comments are not SQL.
        assert!(literals("// \"pgmq.nothing()\"\nlet x = 1;").is_empty());
    }
}
