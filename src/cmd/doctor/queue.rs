//! `rowbranch doctor` for the queue intake: the database answers, both queues exist and are
//! logged, each queue route's table has the trigger templates/supabase-queue.sql makes, the
//! trigger's function may send, rowbranch's own role may read, archive and dead-letter, and
//! neither `anon`, `authenticated` nor `PUBLIC` may touch the queue's tables. A role's missing
//! rights are found in the catalog, which changes nothing and reads no message, and their fix
//! is the grants themselves, one runnable line each, naming the role ([`grants`]).

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

use super::{Check, Checks};
use crate::config::{Config, PgmqSettings, Route};
use crate::db::{describe, query, queue, quote_ident, quote_relation, value, Database};
use crate::event::EventKind;
use crate::identity::QueueName;

/// The trigger function templates/supabase-queue.sql installs, and its trigger's name prefix.
const FUNCTION: &str = "rowbranch.enqueue()";
const TRIGGER_PREFIX: &str = "rowbranch_queue_";

/// The fix when the catalog cannot be read.
pub(super) const CATALOG_FIX: &str =
    "give DATABASE_URL's role access to the catalog (every role has it by default)";

/// A failed check: `what` cannot be read from the catalog, and why.
pub(super) fn unreadable(what: impl std::fmt::Display, e: &tokio_postgres::Error) -> Check {
    Check::fail(
        format!("{what} cannot be read: {}", describe(e)),
        CATALOG_FIX,
    )
}

/// What the setup SQL's fix says, once.
const RUN_SETUP: &str =
    "run supabase-queue.sql (written by `rowbranch init --intake pgmq`) in the SQL editor as postgres";

/// Where a fix's grants are run: as the owner of what they grant on.
pub(super) const AS_OWNER: &str =
    "as the owner of what they grant on (Supabase: the SQL editor, as postgres), run:";

/// The triggers of a table, and whether each calls `rowbranch.enqueue()`, as its owner.
const TRIGGERS: &str = "select t.tgname::text, t.tgenabled in ('O', 'A'), t.tgtype, t.tgargs, \
           pn.nspname = 'rowbranch' and p.proname = 'enqueue' and p.pronargs = 0, \
           p.prosecdef, pg_catalog.pg_get_userbyid(p.proowner)::text \
    from pg_catalog.pg_trigger as t \
    join pg_catalog.pg_class as c on c.oid = t.tgrelid \
    join pg_catalog.pg_namespace as cn on cn.oid = c.relnamespace \
    join pg_catalog.pg_proc as p on p.oid = t.tgfoid \
    join pg_catalog.pg_namespace as pn on pn.oid = p.pronamespace \
    where cn.nspname = $1::text and c.relname = $2::text and not t.tgisinternal \
    order by t.tgname";

/// The rights on the queues' tables that PUBLIC holds, or `anon` and `authenticated` hold by
/// grant or inheritance: the holder in lowercase (as a revoke names it), and "HOLDER has RIGHTS
/// on TABLE". Found by name in the catalog, as in [`MISSING`].
const GRANTS: &str = "select lower(h.holder), h.holder || ' has ' \
           || string_agg(distinct h.privilege, ', ') || ' on ' || c.oid::regclass::text \
    from unnest($1::text[]) as wanted(name) \
    join pg_catalog.pg_namespace as n on n.nspname = (pg_catalog.parse_ident(wanted.name))[1] \
    join pg_catalog.pg_class as c on c.relnamespace = n.oid \
      and c.relname = (pg_catalog.parse_ident(wanted.name))[2] \
    cross join lateral ( \
      select 'PUBLIC'::text as holder, a.privilege_type::text as privilege \
      from pg_catalog.aclexplode(c.relacl) as a where a.grantee = 0 union all \
      select r.rolname::text, p.privilege \
      from pg_catalog.pg_roles as r \
      cross join unnest(array['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) \
        as p(privilege) \
      where r.rolname in ('anon', 'authenticated') \
        and pg_catalog.has_table_privilege(r.oid, c.oid, p.privilege) \
    ) as h \
    group by h.holder, c.oid order by h.holder, c.oid::regclass::text";

/// Whether Supabase's `pgmq_public` schema ("Expose Queues via PostgREST") is there with a
/// function `anon` or `authenticated` may execute. Its functions run as their caller, so they
/// reach a queue only through rights on its tables.
const PGMQ_PUBLIC: &str = "select exists ( \
    select 1 from pg_catalog.pg_proc as p \
    join pg_catalog.pg_namespace as n on n.oid = p.pronamespace \
    join pg_catalog.pg_roles as r on r.rolname in ('anon', 'authenticated') \
    where n.nspname = 'pgmq_public' \
      and pg_catalog.has_function_privilege(r.oid, p.oid, 'EXECUTE'))";

/// Which (kind, object, privileges separated by spaces) the role ($4, or the current user) lacks:
/// the privilege, the kind, the object (a schema's name quoted as SQL names it) and the role
/// quoted as a grant names it. Each relation is found by name in the catalog: to_regclass would
/// need USAGE on its schema, which the role may lack too.
const MISSING: &str = "select g.privilege, w.kind, \
      case w.kind when 'schema' then pg_catalog.quote_ident(w.object) else w.object end, \
      pg_catalog.quote_ident(r.name) from \
      unnest($1::text[], $2::text[], $3::text[]) as w(kind, object, privileges) \
    cross join unnest(pg_catalog.string_to_array(w.privileges, ' ')) as g(privilege) \
    cross join lateral (select coalesce($4::text, current_user::text) as name) as r \
    cross join lateral (select ( \
      select c.oid from pg_catalog.pg_class as c \
      join pg_catalog.pg_namespace as n on n.oid = c.relnamespace \
      where w.kind in ('table', 'column', 'sequence') \
        and array[n.nspname::text, c.relname::text] = pg_catalog.parse_ident(w.object)) as oid \
    ) as o \
    where not coalesce(case w.kind \
      when 'schema' then pg_catalog.has_schema_privilege(r.name, w.object, g.privilege) \
      when 'table' then o.oid is not null \
        and pg_catalog.has_table_privilege(r.name, o.oid, g.privilege) \
      when 'column' then o.oid is not null \
        and pg_catalog.has_column_privilege(r.name, o.oid, 'msg_id', g.privilege) \
      when 'functions' then not exists ( \
        select 1 from pg_catalog.pg_proc as p \
        join pg_catalog.pg_namespace as n on n.oid = p.pronamespace \
        where n.nspname = 'pgmq' and p.proname = w.object \
          and not pg_catalog.has_function_privilege(r.name, p.oid, g.privilege)) \
      when 'sequence' then o.oid is not null \
        and pg_catalog.has_sequence_privilege(r.name, o.oid, g.privilege) \
    end, false)";

/// The queue's checks, on the connection to its database.
pub(super) async fn checks(config: &Config, database: &Database, out: &mut Checks) {
    out.push(Check::pass("DATABASE_URL connects"));
    let (client, pgmq) = (database.client(), &config.pgmq);
    if !queues_exist(client, pgmq, out).await {
        return;
    }
    for route in config.routes.iter().filter(|r| r.reads_the_queue()) {
        trigger(client, route, pgmq, out).await;
    }
    own_rights(client, pgmq, out).await;
    not_exposed(client, pgmq, out).await;
}

/// Both queues are in `pgmq.list_queues()`, and logged: whether the checks after it are worth
/// running (false when a queue is missing, or pgmq cannot be asked at all). A role
/// that may not list them fails here and is checked on, so that the rights' check lists every
/// grant it lacks, these among them, in the same run.
async fn queues_exist(client: &Client, pgmq: &PgmqSettings, out: &mut Checks) -> bool {
    let known = match queue::list(client).await {
        Ok(known) => known,
        Err(e) => {
            let what = format!("pgmq.list_queues() fails: {e}");
            if e.code() != Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
                let fix =
                    format!("install pgmq (on Supabase: Integrations, Queues), then {RUN_SETUP}");
                out.push(Check::fail(what, fix));
                return false;
            }
            out.push(Check::fail(
                what,
                "make the grants listed under \"DATABASE_URL's role lacks\": \
                 pgmq.list_queues() reads pgmq.meta, which pgmq lets only its owner and \
                 pg_monitor read",
            ));
            return true;
        }
    };
    let mut all = true;
    for name in [&pgmq.queue, &pgmq.dead_letter] {
        out.push(match known.iter().find(|(known, _)| known == name) {
            Some((_, false)) => Check::pass(format!("queue {name} exists, logged")),
            Some((_, true)) => Check::fail(
                format!("queue {name} is unlogged: a crash of the database empties it"),
                format!("once it is empty, drop it with pgmq's drop_queue, then {RUN_SETUP}"),
            ),
            None => {
                all = false;
                Check::fail(format!("queue {name} does not exist"), RUN_SETUP)
            }
        });
    }
    all
}

/// One trigger of a route's table, as the catalog holds it.
pub(super) struct Trigger {
    pub(super) name: String,
    /// Whether it fires (`O`rigin and `A`lways; `R`eplica and `D`isabled do not).
    pub(super) enabled: bool,
    /// `pg_trigger.tgtype`: bit 0 row-level, 1 BEFORE, 2 INSERT, 3 DELETE, 4 UPDATE.
    kind: i16,
    args: Vec<String>,
    /// Whether it calls `rowbranch.enqueue()`.
    enqueues: bool,
    security_definer: bool,
    owner: String,
}

/// The triggers of `route`'s table, or a failed check that says they cannot be read. Found by
/// name in the catalog, which every role may read: to_regprocedure would need USAGE on schema
/// rowbranch, which supabase-queue.sql gives nobody (nor rowbranch's own role).
pub(super) async fn triggers(client: &Client, route: &Route) -> Result<Vec<Trigger>, Check> {
    let found = query(client, TRIGGERS, &[&route.schema, &route.table]).await;
    let table = quote_relation(&route.schema, &route.table);
    let found = found.map_err(|e| unreadable(format!("{table}: its triggers"), &e))?;
    Ok(found
        .iter()
        .map(|row| Trigger {
            name: row.get(0),
            enabled: row.get(1),
            kind: row.get(2),
            args: row
                .get::<_, Vec<u8>>(3)
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect(),
            enqueues: row.get(4),
            security_definer: row.get(5),
            owner: row.get(6),
        })
        .collect())
}

/// The route's table has an enabled row-level trigger calling `rowbranch.enqueue()` with the
/// queue's name, on every event the route takes, and the function's owner may send.
async fn trigger(client: &Client, route: &Route, pgmq: &PgmqSettings, out: &mut Checks) {
    let table = quote_relation(&route.schema, &route.table);
    let found = match triggers(client, route).await {
        Ok(found) => found,
        Err(check) => return out.push(check),
    };
    let what = format!("{table}: trigger {TRIGGER_PREFIX}{}", pgmq.queue);
    // One trigger, or with a gate (`run_when`) two: one for the INSERT, one for the UPDATE that
    // approves a row; together they fire on every event the route takes.
    let sending: Vec<&Trigger> = (found.iter())
        .filter(|t| t.enqueues && t.args.first().is_some_and(|arg| *arg == pgmq.queue))
        .collect();
    let Some(first) = sending.first() else {
        let what = format!("{what} is missing: its rows never reach the queue");
        return out.push(Check::fail(what, RUN_SETUP));
    };
    let names: Vec<&str> = sending.iter().map(|t| t.name.as_str()).collect();
    let fired = sending.iter().fold(0, |fired, t| fired | t.kind);
    let invoker =
        format!("{FUNCTION} is not SECURITY DEFINER, so inserting roles need rights on the queue");
    // The function refuses to run but AFTER … FOR EACH ROW with one argument, and its refusal
    // is the INSERT's error.
    let mut wrong: Vec<String> = Vec::new();
    for trigger in &sending {
        let arguments = format!(
            "given {} arguments, not the queue's name alone, so every INSERT fails",
            trigger.args.len()
        );
        let kind = trigger.kind;
        let found = [
            (!trigger.enabled, "disabled"),
            (kind & 1 == 0, "statement-level, not per row"),
            (kind & 2 != 0, "BEFORE, not AFTER, so every INSERT fails"),
            (trigger.args.len() != 1, &arguments),
            (!trigger.security_definer, &invoker),
        ];
        let of = (sending.len() > 1).then(|| format!(" ({})", trigger.name));
        let of = of.unwrap_or_default();
        let found = found.into_iter().filter(|(bad, _)| *bad);
        wrong.extend(found.map(|(_, why)| format!("{why}{of}")));
    }
    for (event, bit) in [(EventKind::Insert, 4), (EventKind::Update, 16)] {
        if route.events.contains(&event) && fired & bit == 0 {
            wrong.push(format!("not fired on {event}"));
        }
    }
    let (wrong, owner) = (wrong.join(", "), &first.owner);
    let name = names.join(", ");
    out.push(match wrong.is_empty() {
        true => Check::pass(format!("{what} ({name}) sends each row, as {owner}")),
        false => Check::fail(format!("{what} ({name}) is {wrong}"), RUN_SETUP),
    });
    // The id comes from an identity column, which needs no right on its sequence.
    let q = queue::table('q', &pgmq.queue);
    let missing = missing_rights(
        client,
        Some(owner),
        &[
            ("schema", "pgmq", "USAGE"),
            ("table", &q, "INSERT"),
            ("column", &q, "SELECT"),
            // Every overload, found by name: their signatures differ between versions.
            ("functions", "send", "EXECUTE"),
            ("functions", "format_table_name", "EXECUTE"),
        ],
    )
    .await;
    out.push(match missing {
        Ok(missing) if missing.is_empty() => Check::pass(format!(
            "{FUNCTION}'s owner {owner} may send to {}",
            pgmq.queue
        )),
        Ok(missing) => Check::fail(
            format!(
                "{FUNCTION}'s owner {owner} lacks {}: every INSERT on {table} fails",
                listed(&missing)
            ),
            if missing.iter().any(|m| m.privilege == "EXECUTE") {
                format!(
                    "as pgmq's owner: grant execute on all functions in schema pgmq to {owner} \
                     (it needs pgmq.send and pgmq.format_table_name, every overload)"
                )
            } else {
                format!("{RUN_SETUP} (it grants these), or grant them as the queue's owner")
            },
        ),
        Err(unreadable) => unreadable,
    });
}

/// A gated webhook route's table has the trigger supabase.sql or supabase-vault.sql makes
/// (`rowbranch_webhook`) firing on UPDATE too: the approval that lets a row run is an UPDATE,
/// which a trigger on INSERT alone never sends.
pub(super) async fn webhook_trigger(client: &Client, route: &Route) -> Option<Check> {
    let gate = route.run_when.as_ref().filter(|_| route.takes_webhooks())?;
    let table = quote_relation(&route.schema, &route.table);
    let rerun = format!(
        "run supabase-vault.sql (or supabase.sql) as written by `rowbranch init --run-when {}=…` \
         again: its trigger fires on the UPDATE of {} too",
        gate.column, gate.column
    );
    let found = match triggers(client, route).await {
        Ok(found) => found,
        Err(check) => return Some(check),
    };
    Some(match found.iter().find(|t| t.name == "rowbranch_webhook") {
        Some(t) if t.enabled && t.kind & 16 != 0 => Check::pass(format!(
            "{table}: trigger rowbranch_webhook fires on UPDATE, so an approval ({gate}) is sent"
        )),
        Some(t) if t.enabled => Check::fail(
            format!(
                "{table}: trigger rowbranch_webhook does not fire on UPDATE: a row approved after \
                 it was written ({gate}) never reaches rowbranch"
            ),
            rerun,
        ),
        Some(_) => Check::fail(
            format!("{table}: trigger rowbranch_webhook is disabled"),
            rerun,
        ),
        None => Check::advise(
            format!(
                "{table}: no trigger rowbranch_webhook, so whether an approval ({gate}) is sent \
                 cannot be checked"
            ),
            format!(
                "{rerun}; a Database Webhook made in the Dashboard must have Update ticked as \
                 well as Insert"
            ),
        ),
    })
}

/// The rights rowbranch's own role uses: read, renew and archive the queue (pgmq.read and
/// pgmq.set_vt update its table, pgmq.archive moves a message to the archive), forget old
/// archived messages, read the archive for the sweep, send dead letters and redrive them; and
/// what doctor's own `pgmq.list_queues()` needs (it reads `pgmq.meta`), so that doctor passes
/// as it.
async fn own_rights(client: &Client, pgmq: &PgmqSettings, out: &mut Checks) {
    let [q, a, dq, da] = queue_tables(pgmq);
    // pgmq.metrics (sampled for both queues) reads each queue's id sequence; ids themselves
    // come from identity columns, which need no right on it.
    let (sequence, dead_sequence) = (sequence(&pgmq.queue), sequence(&pgmq.dead_letter));
    let wanted = [
        ("schema", "pgmq", "USAGE"),
        ("table", "pgmq.meta", "SELECT"),
        ("table", &q, "SELECT INSERT UPDATE DELETE"),
        // pgmq.archive inserts into the archive with RETURNING (SELECT); old archived
        // messages are deleted from both archives.
        ("table", &a, "SELECT INSERT DELETE"),
        ("sequence", &sequence, "SELECT"),
        ("table", &dq, "SELECT INSERT DELETE"),
        ("table", &da, "SELECT INSERT DELETE"),
        ("sequence", &dead_sequence, "SELECT"),
    ];
    out.push(match missing_rights(client, None, &wanted).await {
        Ok(missing) if missing.is_empty() => Check::pass(format!(
            "DATABASE_URL's role may read, archive and dead-letter {} and {}",
            pgmq.queue, pgmq.dead_letter
        )),
        Ok(missing) => Check::fail(
            format!("DATABASE_URL's role lacks {}", listed(&missing)),
            format!("{AS_OWNER}\n{}", grants(&missing)),
        ),
        Err(unreadable) => unreadable,
    });
}

/// Whoever can write the queue can make the workflow work on any text: fails when `anon`,
/// `authenticated` (Supabase's Data API roles, where they exist) or `PUBLIC` hold any right on
/// the queues' tables — granted to them, or inherited from a role they are members of.
async fn not_exposed(client: &Client, pgmq: &PgmqSettings, out: &mut Checks) {
    let tables = queue_tables(pgmq);
    let found = query(client, GRANTS, &[&tables.to_vec()]).await;
    // Unknown (the catalog unreadable) counts as not exposed.
    let exposed = value(client, PGMQ_PUBLIC, &[]).await.ok().flatten() == Some(true);
    out.push(match found {
        Ok(rows) if rows.is_empty() => Check::pass(if exposed {
            "anon, authenticated and PUBLIC hold no rights on the queues' tables, so pgmq_public \
             (Expose Queues via PostgREST, on for this database) cannot reach them"
        } else {
            "anon, authenticated and PUBLIC hold no rights on the queues' tables"
        }),
        Ok(rows) => {
            // Only the roles that hold a right: a revoke naming a role that does not exist
            // (authenticated, outside Supabase) fails whole. The rows come by holder.
            let mut holders: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
            holders.dedup();
            let grants: Vec<String> = rows.iter().map(|r| r.get(1)).collect();
            let pgmq_public = ", and pgmq_public lets them call pgmq over the Data API";
            Check::fail(
                format!(
                    "the queue is open to the Data API's roles: {}{} (whoever holds the anon \
                     key could send work)",
                    grants.join("; "),
                    if exposed { pgmq_public } else { "" }
                ),
                format!(
                    "revoke all on {} from {}; and leave \"Expose Queues via PostgREST\" off \
                     for these queues (a right anon or authenticated inherits from another role \
                     is revoked from that role)",
                    tables.join(", "),
                    holders.join(", ")
                ),
            )
        }
        Err(e) => unreadable("the queues' grants", &e),
    });
}

/// The queue's table and its archive, then the dead-letter queue's.
fn queue_tables(pgmq: &PgmqSettings) -> [String; 4] {
    let (live, dead) = (&pgmq.queue, &pgmq.dead_letter);
    [('q', live), ('a', live), ('q', dead), ('a', dead)]
        .map(|(kind, name)| queue::table(kind, name))
}

/// The sequence pgmq gives a queue's message ids.
fn sequence(queue: &QueueName) -> String {
    format!("pgmq.{}", quote_ident(&format!("q_{queue}_msg_id_seq")))
}

/// A right a role lacks, as [`MISSING`] finds it.
pub(super) struct MissingRight {
    /// `SELECT`, `USAGE`, …, as the catalog's functions name it.
    privilege: String,
    /// What `object` is: `schema`, `table`, `column` (`msg_id`), `functions` (every overload
    /// of a pgmq function), `sequence`.
    kind: String,
    object: String,
    /// The role, quoted as SQL names it.
    grantee: String,
}

/// "INSERT on pgmq.q_x, …", for a check's text.
fn listed(missing: &[MissingRight]) -> String {
    let each: Vec<String> = (missing.iter())
        .map(|m| format!("{} on {}", m.privilege, m.object))
        .collect();
    each.join(", ")
}

/// The statements that give the roles what they lack, one line per object and role (`grant
/// select, insert on pgmq.q_x to rowbranch_consumer;`): runnable as they stand, so a fix names
/// the role rather than a placeholder, and every missing grant shows in one run.
pub(super) fn grants(missing: &[MissingRight]) -> String {
    let mut lines: Vec<(String, &str, Vec<String>)> = Vec::new();
    for m in missing {
        let on = match m.kind.as_str() {
            "schema" | "sequence" => format!("{} {}", m.kind, m.object),
            // Every overload at once: their signatures differ between pgmq's versions.
            "functions" => "all functions in schema pgmq".to_owned(),
            _ => m.object.clone(),
        };
        let mut privilege = m.privilege.to_lowercase();
        if m.kind == "column" {
            privilege.push_str(" (msg_id)");
        }
        match lines.iter_mut().find(|l| l.0 == on && l.1 == m.grantee) {
            Some(line) if line.2.contains(&privilege) => {}
            Some(line) => line.2.push(privilege),
            None => lines.push((on, &m.grantee, vec![privilege])),
        }
    }
    let lines: Vec<String> = (lines.iter())
        .map(|(on, grantee, privileges)| {
            format!("grant {} on {on} to {grantee};", privileges.join(", "))
        })
        .collect();
    lines.join("\n")
}

/// Which of `wanted` (kind, object, privileges separated by spaces) `role` (`None`: DATABASE_URL's
/// own) lacks; a missing object counts as lacking. A failed check when the catalog cannot be
/// read.
pub(super) async fn missing_rights(
    client: &Client,
    role: Option<&str>,
    wanted: &[(&str, &str, &str)],
) -> Result<Vec<MissingRight>, Check> {
    let (kinds, objects, privileges): (Vec<&str>, Vec<&str>, Vec<&str>) =
        wanted.iter().copied().collect();
    let rows = query(client, MISSING, &[&kinds, &objects, &privileges, &role]).await;
    let who = role.unwrap_or("DATABASE_URL's role");
    let rows = rows.map_err(|e| unreadable(format!("the rights of {who}"), &e))?;
    Ok(rows
        .iter()
        .map(|r| MissingRight {
            privilege: r.get(0),
            kind: r.get(1),
            object: r.get(2),
            grantee: r.get(3),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::{grants, MissingRight};

    fn lacks(privilege: &str, kind: &str, object: &str) -> MissingRight {
        MissingRight {
            privilege: privilege.to_owned(),
            kind: kind.to_owned(),
            object: object.to_owned(),
            grantee: "rowbranch_consumer".to_owned(),
        }
    }

    #[test]
    fn grants_are_one_runnable_statement_an_object_naming_the_role() {
        let missing = [
            lacks("USAGE", "schema", "pgmq"),
            lacks("SELECT", "table", "pgmq.\"q_x\""),
            lacks("UPDATE", "table", "pgmq.\"q_x\""),
            lacks("SELECT", "sequence", "pgmq.\"q_x_msg_id_seq\""),
            lacks("EXECUTE", "functions", "send"),
            lacks("EXECUTE", "functions", "format_table_name"),
            lacks("SELECT", "column", "pgmq.\"q_y\""),
        ];
        assert_eq!(
            grants(&missing),
            "grant usage on schema pgmq to rowbranch_consumer;\n\
             grant select, update on pgmq.\"q_x\" to rowbranch_consumer;\n\
             grant select on sequence pgmq.\"q_x_msg_id_seq\" to rowbranch_consumer;\n\
             grant execute on all functions in schema pgmq to rowbranch_consumer;\n\
             grant select (msg_id) on pgmq.\"q_y\" to rowbranch_consumer;"
        );
    }
}
