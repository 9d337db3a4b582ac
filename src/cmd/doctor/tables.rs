//! `rowbranch doctor` with `DATABASE_URL` set: each route fits its table — the table exists and
//! has the route's id, text and created columns — as `serve` checks at start. A route naming an
//! id or text column its table lacks would be refused row by row (`missing_column`): a failed
//! check, as `serve` will not start with it. What only the sweep and `redo` need (the table in
//! this database, its created column) is advice, unless `reconcile_every` schedules a sweep.
//!
//! And whether DATABASE_URL's role may read each route's table at all: the sweep, `reconcile`,
//! `explain` and `redo` read its rows as that role, and without SELECT each of them fails
//! (`permission denied for table …`), so the check fails with the grants to make.
//!
//! And whether row level security lets DATABASE_URL's role see each route's rows. A role it
//! hides every row from reads an empty table without an error, so the sweep, `redo` and
//! `explain` would find nothing to do: a failed check, with the policy that fixes it.
//!
//! And whether DATABASE_URL checks the certificate of a server on another machine. Without it,
//! whoever sits on the path can pose as the database, and the rows and queue messages rowbranch
//! reads from it become work: a warning, with where Supabase's CA certificate comes from.

use tokio_postgres::error::SqlState;

use super::queue::{grants, missing_rights, AS_OWNER, CATALOG_FIX};
use super::{Check, Checks};
use crate::config::{Config, Route};
use crate::db::{
    self, describe, query, quote_relation, value, Database, Error, Misfit, Visibility,
};

pub(super) async fn checks(config: &Config, rows: &Database, out: &mut Checks) {
    let sweeps = config.reconcile.every.is_some();
    for route in &config.routes {
        let Err(e) = rows.check_columns(route, true).await else {
            out.push(readable(rows, route).await);
            out.extend(row_security(rows, route).await);
            super::writers::checks(rows, route, out).await;
            continue;
        };
        let what = format!("{e:#}");
        let until = "until then each row is refused (missing_column)";
        out.push(match &e {
            Error::Table(Misfit::MissingColumn(missing)) if missing.key == "text_column" => Check::fail(
                what,
                format!("set the route's text_column to the table's column that holds the text (or \"\" for no text); {until}"),
            ),
            Error::Table(Misfit::MissingColumn(missing)) if missing.key == "id_column" => Check::fail(
                what,
                format!("set the route's id_column to the table's primary key column; {until}"),
            ),
            Error::Table(Misfit::MissingColumn(_) | Misfit::CreatedType(_)) => {
                let fix = "set the route's created_column to the table's creation time column: the sweep reads the rows of a window by it";
                if sweeps {
                    Check::fail(what, fix)
                } else {
                    Check::advise(what, format!("{fix} (`rowbranch reconcile`, `redo`)"))
                }
            }
            Error::Table(Misfit::NoTable(_)) => Check::fail(
                what,
                "check the route's schema and table, and that DATABASE_URL names the database that holds the table: serve and drain do not start without it",
            ),
            _ => Check::advise(what, CATALOG_FIX),
        });
    }
}

/// Whether DATABASE_URL's role may read `route`'s table (which has the route's columns) as the
/// sweep, `reconcile`, `explain` and `redo` do (`select *`): probed with a read of no row, which
/// changes nothing and takes the same rights as theirs. A failure gives the grants that make it
/// pass.
async fn readable(rows: &Database, route: &Route) -> Check {
    let client = rows.client();
    let relation = quote_relation(&route.schema, &route.table);
    let probe = format!("select * from {relation} limit 0");
    let Err(e) = query(client, &probe, &[]).await else {
        let mut columns = vec![route.id_column.as_str()];
        columns.extend(route.text_column.as_deref());
        columns.push(&route.created_column);
        return Check::pass(format!(
            "{} has the route's columns: {}, readable by the role in DATABASE_URL",
            route.table_name(),
            columns.join(", ")
        ));
    };
    let what = format!(
        "the role in DATABASE_URL may not read {}: {}",
        route.table_name(),
        describe(&e)
    );
    if e.code() != Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
        let fix = format!(
            "the sweep, reconcile, explain and redo read the rows with `{probe}` (without \
             `limit 0`): it must answer as this role"
        );
        return Check::fail(what, fix);
    }
    // The table as a grant names it (`public.feedbacks`), quoted only where SQL needs it.
    let named =
        "select pg_catalog.quote_ident($1::text) || '.' || pg_catalog.quote_ident($2::text)";
    let table = value(client, named, &[&route.schema, &route.table]).await;
    let table: String = table.ok().flatten().unwrap_or(relation);
    let wanted = [
        ("schema", route.schema.as_str(), "USAGE"),
        ("table", table.as_str(), "SELECT"),
    ];
    let missing = match missing_rights(client, None, &wanted).await {
        Ok(missing) => missing,
        Err(unreadable) => return unreadable,
    };
    Check::fail(
        what,
        format!(
            "the sweep, reconcile, explain and redo read its rows as this role; {AS_OWNER}\n{}",
            grants(&missing)
        ),
    )
}

/// The check for `route`, or `None` when row level security is off for its table.
async fn row_security(rows: &Database, route: &Route) -> Option<Check> {
    let table = route.table_name();
    Some(match rows.visibility(route).await {
        Ok(Visibility::Off) => return None,
        Ok(Visibility::Every(why)) => Check::pass(format!(
            "{table}: row level security is on, and DATABASE_URL's role sees every row: {why}"
        )),
        Ok(Visibility::Filtered(filtered)) => Check::advise(filtered.what, filtered.fix),
        Ok(Visibility::Blind(blind)) => Check::fail(
            blind.what,
            format!(
                "{} -- as the table's owner (Supabase: the SQL editor); the sweep, redo and explain read the rows as this role",
                blind.fix
            ),
        ),
        Err(e) => Check::advise(
            format!("{table}: {e:#}"),
            format!("{CATALOG_FIX}: a role that row level security hides the rows from would see none"),
        ),
    })
}

/// Where Supabase documents its CA certificate and `verify-full`.
const SUPABASE_SSL: &str = "https://supabase.com/docs/guides/platform/ssl-enforcement";

/// Advice when DATABASE_URL reaches a server on another machine without checking its
/// certificate.
pub(super) fn transit(config: &Config) -> Option<Check> {
    let found = db::unchecked(config.database_url.as_ref()?.expose())?;
    Some(Check::advise(
        format!(
            "DATABASE_URL reaches {} with sslmode={}: {}; whoever can then pose as the database can read what rowbranch reads and give it rows and queue messages of their own, which become work",
            found.host, found.sslmode, found.exposure
        ),
        format!(
            "check the server's certificate: add sslmode=verify-full and sslrootcert=/path/to/ca.crt to DATABASE_URL (`?sslmode=verify-full&sslrootcert=…` in a URL, `sslmode=verify-full sslrootcert=…` among key=value pairs); rowbranch reads the CA as a PEM or DER file. Supabase's CA certificate: Dashboard → Database Settings → SSL Configuration → Download certificate ({SUPABASE_SSL}); a server whose certificate comes from a public CA takes sslrootcert=system"
        ),
    ))
}
