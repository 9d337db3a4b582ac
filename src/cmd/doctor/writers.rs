//! `rowbranch doctor` with `DATABASE_URL`: who besides the table's owner may write a routed
//! table. Supabase grants its Data API roles — `anon`, whoever holds the project's public key,
//! and `authenticated`, anyone signed in — INSERT and UPDATE on every column of a table in
//! `public`. On a gated route that lets a stranger write a row that already passes the gate: a
//! yes nobody gave, so a column the route's yes rests on fails while either role may write it,
//! with the revoke and grants that fix it. On a route without a gate, every row such a role
//! inserts becomes an agent run: a warning, that the gate puts a person in between.
//!
//! Where neither role exists (plain PostgreSQL, no Data API) there is nothing to check.

use super::queue::{unreadable, AS_OWNER};
use super::{Check, Checks};
use crate::config::Route;
use crate::db::{query, quote_ident, quote_relation, Database};

/// The Data API's roles as Supabase names them: who may write what the world sends.
const STRANGERS: [&str; 2] = ["anon", "authenticated"];

/// For each of the Data API's roles that exists, and PUBLIC (whose rights every role has), and
/// each of INSERT and UPDATE: the table's columns that role may write, by a grant on the table
/// or on the column, its own or inherited (`has_column_privilege` counts them all), and only
/// with USAGE on the schema, without which it reaches none. A role that does not exist is left
/// out before any function is asked about it: they fail on an unknown role.
const WRITES: &str = "select r.name, p.privilege, \
      case when pg_catalog.has_schema_privilege(r.name, n.oid, 'USAGE') then array( \
        select a.attname::text from pg_catalog.pg_attribute as a \
        where a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped \
          and pg_catalog.has_column_privilege(r.name, c.oid, a.attnum, p.privilege) \
        order by a.attnum) else array[]::text[] end \
    from pg_catalog.pg_class as c \
    join pg_catalog.pg_namespace as n on n.oid = c.relnamespace \
    cross join (values ('anon'), ('authenticated'), ('public')) as r(name) \
    cross join (values ('INSERT'), ('UPDATE')) as p(privilege) \
    where n.nspname = $1::text and c.relname = $2::text \
      and (r.name = 'public' \
        or exists (select 1 from pg_catalog.pg_roles where rolname = r.name)) \
    order by r.name, p.privilege";

/// What one role may do to the table's columns with one privilege, as [`WRITES`] finds it.
struct RoleWrites {
    /// `anon`, `authenticated` or `public`.
    role: String,
    /// `INSERT` or `UPDATE`.
    privilege: String,
    columns: Vec<String>,
}

/// The route's columns only the table's owner may write, each with what it is to the route: a
/// stranger who may write one can say the route's yes. The status columns rowbranch writes
/// join this list, one line each.
fn owner_only(route: &Route) -> Vec<(&str, &'static str)> {
    let gate = route.run_when.as_ref();
    let gate = gate.map(|gate| (gate.column.as_str(), "run_when's column"));
    let status = (route.status_column.as_deref()).map(|c| (c, "status_column"));
    let link = (route.pull_request_column.as_deref()).map(|c| (c, "pull_request_column"));
    gate.into_iter().chain(status).chain(link).collect()
}

/// The checks of `route`'s table: its owner-only columns, and a route without a gate on a table
/// strangers may insert into (none where neither of the Data API's roles exists); then whether
/// DATABASE_URL's role may write the route's state back.
pub(super) async fn checks(rows: &Database, route: &Route, out: &mut Checks) {
    match query(rows.client(), WRITES, &[&route.schema, &route.table]).await {
        Ok(found) => {
            let writes: Vec<RoleWrites> = (found.iter())
                .map(|row| RoleWrites {
                    role: row.get(0),
                    privilege: row.get(1),
                    columns: row.get(2),
                })
                .collect();
            let columns = owner_only(route);
            let strangers = writes.iter().any(|w| w.role != "public");
            if strangers && !columns.is_empty() {
                out.push(owner_only_check(route, &columns, &writes));
            }
            if strangers && route.run_when.is_none() {
                out.extend(ungated(route, &writes));
            }
        }
        Err(e) => {
            let what = format!("{}: who else may write it", route.table_name());
            out.push(unreadable(what, &e).advice())
        }
    }
    out.extend(own_writes(rows, route).await);
}

/// Which of `columns` `role` may write, as "INSERT and UPDATE status" (or "INSERT status and
/// UPDATE status, pr"); `None` when it may write none of them.
fn may_write(writes: &[RoleWrites], role: &str, columns: &[&str]) -> Option<String> {
    let of = |privilege: &str| -> Vec<&str> {
        let held = writes
            .iter()
            .filter(|w| w.role == role && w.privilege == privilege);
        let held: Vec<&String> = held.flat_map(|w| &w.columns).collect();
        (columns.iter().copied())
            .filter(|c| held.iter().any(|h| h.as_str() == *c))
            .collect()
    };
    let (insert, update) = (of("INSERT"), of("UPDATE"));
    if insert == update {
        return (!insert.is_empty()).then(|| format!("INSERT and UPDATE {}", insert.join(", ")));
    }
    let held = [("INSERT", insert), ("UPDATE", update)].into_iter();
    let said: Vec<String> = (held.filter(|(_, columns)| !columns.is_empty()))
        .map(|(privilege, columns)| format!("{privilege} {}", columns.join(", ")))
        .collect();
    Some(said.join(" and "))
}

/// Fails while `anon` or `authenticated` may write a column of `columns`.
fn owner_only_check(route: &Route, columns: &[(&str, &str)], writes: &[RoleWrites]) -> Check {
    let table = route.table_name();
    let names: Vec<&str> = columns.iter().map(|(column, _)| *column).collect();
    let named: Vec<String> = (columns.iter())
        .map(|(column, what)| format!("{column} ({what})"))
        .collect();
    let named = named.join(", ");
    let open: Vec<(&str, String)> = (STRANGERS.iter())
        .filter_map(|role| Some((*role, may_write(writes, role, &names)?)))
        .collect();
    if open.is_empty() {
        return Check::pass(format!(
            "{table}: anon and authenticated may not INSERT or UPDATE {named}: only the table's \
             owner says yes"
        ));
    }
    let said: Vec<String> = (open.iter())
        .map(|(role, what)| format!("{role} may {what}"))
        .collect();
    // A right PUBLIC holds is every role's: revoked from PUBLIC, or the revoke from the two
    // leaves it in place.
    let public = may_write(writes, "public", &names).map(|_| "public");
    let holders: Vec<&str> = open.iter().map(|(role, _)| *role).chain(public).collect();
    // The SQL, runnable as it stands, identifiers quoted: the revoke, then the text column back
    // to those who may insert it now, and no one else.
    let relation = quote_relation(&route.schema, &route.table);
    let mut sql = format!(
        "revoke insert, update on {relation} from {};",
        holders.join(", ")
    );
    let text = (route.text_column.as_deref()).filter(|text| !names.contains(text));
    let inserters: Vec<&str> = (open.iter())
        .map(|(role, _)| *role)
        .filter(|role| text.is_some_and(|text| may_write(writes, role, &[text]).is_some()))
        .collect();
    if let Some(text) = text.filter(|_| !inserters.is_empty()) {
        let (text, to) = (quote_ident(text), inserters.join(", "));
        sql.push_str(&format!("\ngrant insert ({text}) on {relation} to {to};"));
    }
    Check::fail(
        format!(
            "{table}: {}; only the table's owner may write {named}: whoever holds the \
             project's anon key can {}",
            said.join("; "),
            match route.run_when {
                Some(_) => "approve a row of their own and start an agent run",
                None => "write a state or a pull request link of their own onto a row",
            }
        ),
        format!(
            "a grant on the whole table makes a revoke of one column do nothing, so take \
             INSERT and UPDATE on the table back and give back the route's text column; give \
             back the same way every other column your app's users write, never {} (a right \
             they hold through another role is revoked from that role); {AS_OWNER}\n{sql}",
            names.join(", "),
        ),
    )
}

/// Whether `role` may insert rows into the table: INSERT on any column will do.
fn inserts(writes: &[RoleWrites], role: &str) -> bool {
    (writes.iter()).any(|w| w.role == role && w.privilege == "INSERT" && !w.columns.is_empty())
}

/// A warning when a route without a gate reads a table the Data API's roles may insert into.
fn ungated(route: &Route, writes: &[RoleWrites]) -> Option<Check> {
    let inserters: Vec<&str> = (STRANGERS.iter().copied())
        .filter(|role| inserts(writes, role))
        .collect();
    if inserters.is_empty() {
        return None;
    }
    // PUBLIC's INSERT is theirs too: the revoke takes it back from PUBLIC as well.
    let from: Vec<&str> = (inserters.iter().copied())
        .chain(inserts(writes, "public").then_some("public"))
        .collect();
    Some(Check::advise(
        format!(
            "{}: {} may INSERT into it and the route has no gate (run_when): every row \
             whoever holds the project's anon key inserts becomes an agent run",
            route.table_name(),
            inserters.join(" and ")
        ),
        format!(
            "put a person in between: with run_when = {{ column = \"status\", equals = \
             \"approved\" }} and events = [\"INSERT\", \"UPDATE\"] on the route (`rowbranch \
             init --run-when status=approved` writes them and the triggers), a row runs only \
             once someone sets its status, and doctor then gives the grants that keep that yes \
             the table owner's; or, if only your own server inserts, revoke insert on {} from \
             {}",
            quote_relation(&route.schema, &route.table),
            from.join(", ")
        ),
    ))
}

/// Whether DATABASE_URL's role may write the route's state back (`status_column`,
/// `pull_request_column`): UPDATE on those columns, and, where row level security binds the
/// role, a permissive policy for UPDATE with a condition (PostgreSQL lets an UPDATE touch no row
/// without one, and says nothing: each write would be counted `not_visible`). For each column,
/// whether the role may update it; then whether row level security binds the role, and whether
/// such a policy applies to it (found as `row_security_active` and the read check find theirs).
const OWN_WRITES: &str = "select quote_ident(current_user), \
      array(select a.attname::text from pg_catalog.pg_attribute as a \
        where a.attrelid = c.oid and a.attname = any($3::text[]) \
          and not pg_catalog.has_column_privilege(c.oid, a.attnum, 'UPDATE') order by a.attnum), \
      c.relrowsecurity and pg_catalog.row_security_active(c.oid), \
      exists (select 1 from pg_catalog.pg_policy as p \
        where p.polrelid = c.oid and p.polcmd in ('w', '*') and p.polpermissive \
          and p.polqual is not null \
          and exists (select 1 from unnest(p.polroles) as r(oid) \
            where r.oid = 0 or pg_catalog.pg_has_role(current_user, r.oid, 'USAGE'))) \
    from pg_catalog.pg_class as c join pg_catalog.pg_namespace as n on n.oid = c.relnamespace \
    where n.nspname = $1::text and c.relname = $2::text";

/// The check that rowbranch's own role may write the route's state back, for a route that does.
async fn own_writes(rows: &Database, route: &Route) -> Option<Check> {
    let columns: Vec<&str> = (route.status_column.iter().chain(&route.pull_request_column))
        .map(String::as_str)
        .collect();
    if columns.is_empty() {
        return None;
    }
    let table = quote_relation(&route.schema, &route.table);
    let found = query(
        rows.client(),
        OWN_WRITES,
        &[&route.schema, &route.table, &columns],
    )
    .await;
    let row = match found {
        Ok(found) => found.into_iter().next()?,
        Err(e) => {
            let what = format!("{table}: whether DATABASE_URL's role may write the row's state");
            return Some(unreadable(what, &e).advice());
        }
    };
    let (role, lacking, bound, policy): (String, Vec<String>, bool, bool) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let named = columns.join(", ");
    if !lacking.is_empty() {
        let quoted: Vec<String> = lacking.iter().map(|c| quote_ident(c)).collect();
        return Some(Check::fail(
            format!(
                "{table}: role {role} (DATABASE_URL's) may not UPDATE {}: no state is written back",
                lacking.join(", ")
            ),
            format!(
                "{AS_OWNER}\n  grant update ({}) on {table} to {role};",
                quoted.join(", ")
            ),
        ));
    }
    if bound && !policy {
        return Some(Check::fail(
            format!(
                "{table}: row level security is on and no policy lets role {role} (DATABASE_URL's) \
                 update its rows: every write of a state matches no row (counted not_visible)"
            ),
            format!(
                "{AS_OWNER}\n  create policy rowbranch_write on {table} for update to {role} using (true) with check (true);"
            ),
        ));
    }
    Some(Check::pass(format!(
        "{table}: role {role} may write {named} back"
    )))
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::config::{Config, TEST_LOCAL_CONFIG};

    /// The route of [`TEST_LOCAL_CONFIG`] with `lines` added, its table `table`.
    fn route(table: &str, lines: &str) -> Arc<Route> {
        let text = TEST_LOCAL_CONFIG.replace("table = \"feedbacks\"", table);
        let text = format!("{text}{lines}");
        let config = Config::parse(&text, Path::new("rowbranch.toml"), &|_| None).unwrap();
        config.routes.into_iter().next().unwrap()
    }

    fn writes(role: &str, privilege: &str, columns: &[&str]) -> RoleWrites {
        RoleWrites {
            role: role.to_owned(),
            privilege: privilege.to_owned(),
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    /// Supabase's default: both roles may write every column, by a grant on the table.
    fn supabase_default(columns: &[&str]) -> Vec<RoleWrites> {
        let mut all = Vec::new();
        for role in STRANGERS {
            all.push(writes(role, "INSERT", columns));
            all.push(writes(role, "UPDATE", columns));
        }
        all
    }

    #[test]
    fn the_fix_quotes_the_table_and_columns_as_sql_names_them() {
        let gated = route(
            "table = 'feed\"backs'",
            "schema = \"My Schema\"\ntext_column = \"Body\"\n\
             events = [\"INSERT\", \"UPDATE\"]\n\
             run_when = { column = \"Is Approved\", equals = true }\n",
        );
        let all = supabase_default(&["id", "Body", "Is Approved"]);
        let check = owner_only_check(&gated, &owner_only(&gated), &all);
        assert!(!check.ok, "{check:?}");
        assert!(
            check.what.contains(
                "anon may INSERT and UPDATE Is Approved; authenticated may INSERT and UPDATE \
                 Is Approved; only the table's owner may write Is Approved (run_when's column)"
            ),
            "{}",
            check.what
        );
        let fix = check.fix.unwrap();
        let sql = fix.split_once(":\n").map(|(_, sql)| sql).unwrap();
        assert_eq!(
            sql,
            "revoke insert, update on \"My Schema\".\"feed\"\"backs\" from anon, authenticated;\n\
             grant insert (\"Body\") on \"My Schema\".\"feed\"\"backs\" to anon, authenticated;"
        );
    }

    #[test]
    fn the_revoke_names_only_who_holds_a_right_and_public_when_it_does() {
        let gated = route(
            "table = \"feedbacks\"",
            "events = [\"INSERT\", \"UPDATE\"]\ntext_column = \"message\"\n\
             run_when = { column = \"status\", equals = \"approved\" }\n",
        );
        let columns = owner_only(&gated);
        // Only anon exists, may insert the message only, and PUBLIC may update the status.
        let held = [
            writes("anon", "INSERT", &["message"]),
            writes("anon", "UPDATE", &["status"]),
            writes("public", "UPDATE", &["status"]),
        ];
        let check = owner_only_check(&gated, &columns, &held);
        assert!(check
            .what
            .starts_with("public.feedbacks: anon may UPDATE status; only"));
        assert!(check.fix.unwrap().ends_with(
            "run:\nrevoke insert, update on \"public\".\"feedbacks\" from anon, public;\n\
             grant insert (\"message\") on \"public\".\"feedbacks\" to anon;"
        ));
        // Fixed: the message alone, by a grant on the column.
        let fixed = [
            writes("anon", "INSERT", &["message"]),
            writes("anon", "UPDATE", &[]),
        ];
        let check = owner_only_check(&gated, &columns, &fixed);
        assert!(check.ok && check.fix.is_none(), "{check:?}");
    }

    #[test]
    fn a_route_without_a_gate_on_a_table_strangers_insert_into_is_warned_about() {
        let open = route("table = \"feedbacks\"", "");
        assert!(owner_only(&open).is_empty());
        let warning = ungated(&open, &supabase_default(&["id", "message"])).unwrap();
        assert!(warning.ok, "a warning, not a failure");
        assert!(warning.what.contains("anon and authenticated may INSERT"));
        assert!(warning
            .fix
            .unwrap()
            .contains("init --run-when status=approved"));
        let closed = [writes("anon", "INSERT", &[]), writes("anon", "UPDATE", &[])];
        assert!(ungated(&open, &closed).is_none());
    }
}
