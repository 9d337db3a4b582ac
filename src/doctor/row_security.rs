//! `rowbranch doctor`: whether row level security lets DATABASE_URL's role see each route's
//! rows. A role it hides every row from reads an empty table without an error, so the sweep,
//! `redo` and `explain` would find nothing to do: a failed check, with the policy that fixes it.

use super::Check;
use crate::config::Route;
use crate::db::{Database, Visibility};

/// The check for `route`, or `None` when row level security is off for its table.
pub async fn check(rows: &Database, route: &Route) -> Option<Check> {
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
            "give DATABASE_URL's role access to the catalog (every role has it by default): a role that row level security hides the rows from would see none",
        ),
    })
}
