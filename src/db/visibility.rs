//! Whether row level security lets DATABASE_URL's role see a route's rows. With it on and no
//! policy for the role, PostgreSQL answers every read with no row and no error, so a sweep would
//! take an empty result for an empty table: this reads the catalog to tell the two apart.
//!
//! PostgreSQL decides as `row_security_active()` does (what this asks it): row level security
//! binds a role on a table when it is enabled there (`relrowsecurity`), unless the role is a
//! superuser, has `BYPASSRLS`, or has the privileges of the table's owner — and forcing it
//! (`relforcerowsecurity`) binds the owner too. A bound role sees the rows that at least one
//! permissive policy for SELECT or ALL lets through (one whose roles include the role, PUBLIC, or
//! a role whose privileges it has), and that every such restrictive policy lets through; with no
//! permissive policy, or only ones without a `using` condition, it sees none.

use tokio_postgres::types::Json;

use super::{Database, Error, Result};
use crate::config::Route;

/// The name the fix gives the policy it writes.
const POLICY: &str = "rowbranch_read";

/// What the role sees of a route's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Visibility {
    /// Row level security is off for the table (or the table is not there to say).
    Off,
    /// It is on, and the role sees every row all the same: the reason, for a report.
    Every(String),
    /// The role sees the rows policies let through, on conditions only the database can judge.
    Filtered(Filtered),
    /// The role sees no row.
    Blind(Blind),
}

/// Row level security hides every row of a table from DATABASE_URL's role: what is wrong, and
/// the policy that lets the role read them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: let it read them with `{fix}`")]
pub struct Blind {
    pub what: String,
    pub fix: String,
}

/// Policies let DATABASE_URL's role read a table on conditions only the database can judge:
/// which, and how to let the role see every row, if it should.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}")]
pub struct Filtered {
    pub what: String,
    pub fix: String,
}

impl Visibility {
    /// Why a row that was not found may be there all the same, unseen: when the role is blind,
    /// or sees only what policies let through.
    pub fn unseen(&self) -> Option<String> {
        match self {
            Visibility::Blind(blind) => Some(blind.to_string()),
            Visibility::Filtered(filtered) => Some(filtered.to_string()),
            Visibility::Off | Visibility::Every(_) => None,
        }
    }
}

impl Database {
    /// What DATABASE_URL's role sees of the route's table under row level security, as the
    /// catalog read the route's check shares has it.
    pub async fn visibility(&self, route: &Route) -> Result<Visibility> {
        let what = format!(
            "could not read the row level security of table {}.{} (DATABASE_URL)",
            route.schema, route.table
        );
        let failed = |cause| Error::query(&what, cause);
        let (found, exact) = super::shape::lookup(&self.client, route)
            .await
            .map_err(failed)?;
        let Some(table) = exact.map(|n| &found[n]) else {
            return Ok(Visibility::Off);
        };
        let (name, role): (String, String) = (table.get(3), table.get(4));
        let (enabled, forced, active, owner): (bool, bool, bool, bool) =
            (table.get(5), table.get(6), table.get(7), table.get(8));
        if !enabled {
            return Ok(Visibility::Off);
        }
        if !active {
            return Ok(Visibility::Every(if owner {
                format!("role {role} owns the table, and it is not forced on its owner")
            } else {
                format!("role {role} bypasses row level security (BYPASSRLS, or a superuser)")
            }));
        }
        let Json(policies): Json<Vec<(String, bool, Option<String>)>> =
            table.try_get(9).map_err(failed)?;
        Ok(judge(name, role, forced && owner, &policies))
    }
}

/// What the role sees, from the policies for reading that apply to it: (name, restrictive,
/// condition).
fn judge(
    table: String,
    role: String,
    forced_on_owner: bool,
    policies: &[(String, bool, Option<String>)],
) -> Visibility {
    let read_policy =
        format!("create policy {POLICY} on {table} for select to {role} using (true);");
    let literally_true = |c: &str| c.trim().eq_ignore_ascii_case("true");
    // A permissive policy without a condition lets nothing through; a restrictive one, nothing
    // out: only those with a condition count.
    let policies: Vec<(&String, bool, &String)> = policies
        .iter()
        .filter_map(|(name, restrictive, condition)| {
            Some((name, *restrictive, condition.as_ref()?))
        })
        .collect();
    if policies.iter().all(|(_, restrictive, _)| *restrictive) {
        let on = if forced_on_owner {
            format!(
                "row level security is forced on table {table}, which binds its owner {role} too,"
            )
        } else {
            format!("row level security is on for table {table}")
        };
        return Visibility::Blind(Blind {
            what: format!(
                "{on} and no policy lets role {role} (DATABASE_URL's) read its rows: every read of \
                 the table sees no row, without an error"
            ),
            fix: read_policy,
        });
    }
    let opens = policies.iter().find(|(_, r, c)| !r && literally_true(c));
    // The policies that may hide rows: a restrictive one, and without a permissive `true` every
    // permissive one.
    let narrowing: Vec<&(&String, bool, &String)> = policies
        .iter()
        .filter(|(_, restrictive, c)| !literally_true(c) && (*restrictive || opens.is_none()))
        .collect();
    if let (Some((name, ..)), true) = (opens, narrowing.is_empty()) {
        return Visibility::Every(format!(
            "policy {name} lets role {role} read them: using (true)"
        ));
    }
    let conditions: Vec<String> = narrowing
        .iter()
        .map(|(name, restrictive, condition)| {
            let kind = if *restrictive { "restrictive " } else { "" };
            format!("{kind}{name}: using ({condition})")
        })
        .collect();
    let mut fix =
        format!("if the sweep should see every row, let the role read them all: {read_policy}");
    let restrictive: Vec<&str> = narrowing
        .iter()
        .filter(|p| p.1)
        .map(|p| p.0.as_str())
        .collect();
    if !restrictive.is_empty() {
        let policy = if restrictive.len() == 1 {
            "policy"
        } else {
            "policies"
        };
        fix += &format!(
            " — and let it through the restrictive {policy} {}, which bind it whatever else allows",
            restrictive.join(", ")
        );
    }
    Visibility::Filtered(Filtered {
        what: format!(
            "row level security is on for table {table} and role {role} reads it through policies \
             whose conditions rowbranch cannot judge ({}): the sweep sees only the rows the policy \
             lets it see",
            conditions.join("; ")
        ),
        fix,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(policies: &[(&str, bool, Option<&str>)]) -> Visibility {
        let policies: Vec<(String, bool, Option<String>)> = policies
            .iter()
            .map(|(n, r, c)| ((*n).to_owned(), *r, c.map(str::to_owned)))
            .collect();
        judge(
            "public.feedbacks".into(),
            "rowbranch".into(),
            false,
            &policies,
        )
    }

    #[test]
    fn no_policy_or_only_ones_without_a_condition_is_blind_and_the_fix_is_a_policy() {
        for policies in [
            vec![],
            vec![("p", false, None)],
            vec![("r", true, Some("true"))],
        ] {
            let Visibility::Blind(blind) = judged(&policies) else {
                panic!("{policies:?} is not blind");
            };
            assert_eq!(
                blind.fix,
                "create policy rowbranch_read on public.feedbacks for select to rowbranch using (true);"
            );
            assert!(blind.to_string().contains("no policy lets role rowbranch"));
        }
    }

    #[test]
    fn a_permissive_true_sees_every_row_unless_a_restrictive_condition_narrows_it() {
        let all = judged(&[
            ("open", false, Some("true")),
            ("mine", false, Some("(id > 1)")),
        ]);
        assert!(matches!(all, Visibility::Every(_)), "{all:?}");
        let narrowed = judged(&[("open", false, Some("true")), ("r", true, Some("(id > 1)"))]);
        let Visibility::Filtered(filtered) = narrowed else {
            panic!("not filtered");
        };
        assert!(filtered
            .to_string()
            .contains("restrictive r: using ((id > 1))"));
        assert!(filtered.fix.contains("restrictive policy r"));
    }

    #[test]
    fn a_condition_other_than_true_is_filtered_and_named() {
        let Visibility::Filtered(filtered) = judged(&[("mine", false, Some("(id > 1)"))]) else {
            panic!("not filtered");
        };
        let text = filtered.to_string();
        assert!(text.contains("mine: using ((id > 1))"), "{text}");
        assert!(text.ends_with("the sweep sees only the rows the policy lets it see"));
    }
}
