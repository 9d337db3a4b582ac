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

use tokio_postgres::types::Type;

use super::{describe, Database, Error, Result};
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

/// Row level security hides every row of a table from DATABASE_URL's role: the table, the role,
/// and the policy that would let it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blind {
    /// `schema.table`, quoted where SQL needs it.
    table: String,
    /// The role, quoted where SQL needs it.
    role: String,
    /// Forced, and the role has the privileges of the table's owner.
    forced_on_owner: bool,
}

impl Blind {
    /// What is wrong, without the fix.
    pub fn what(&self) -> String {
        let (table, role) = (&self.table, &self.role);
        let on = if self.forced_on_owner {
            format!(
                "row level security is forced on table {table}, which binds its owner {role} too,"
            )
        } else {
            format!("row level security is on for table {table}")
        };
        format!(
            "{on} and no policy lets role {role} (DATABASE_URL's) read its rows: every read of \
             the table sees no row, without an error"
        )
    }

    /// The SQL that lets the role read every row.
    pub fn fix(&self) -> String {
        read_policy(&self.table, &self.role)
    }
}

/// Policies let DATABASE_URL's role read a table on conditions only the database can judge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filtered {
    table: String,
    role: String,
    /// The policies that may hide rows: name, whether restrictive, condition.
    policies: Vec<Policy>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Policy {
    name: String,
    restrictive: bool,
    condition: String,
}

impl Filtered {
    fn conditions(&self) -> String {
        self.policies
            .iter()
            .map(|p| {
                let kind = if p.restrictive { "restrictive " } else { "" };
                format!("{kind}{}: using ({})", p.name, p.condition)
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// How to let the role see every row, if it should.
    pub fn fix(&self) -> String {
        let mut fix = format!(
            "if the sweep should see every row, let the role read them all: {}",
            read_policy(&self.table, &self.role)
        );
        let restrictive: Vec<&str> = self
            .policies
            .iter()
            .filter(|p| p.restrictive)
            .map(|p| p.name.as_str())
            .collect();
        if !restrictive.is_empty() {
            fix += &format!(
                " — and let it through the restrictive {} {}, which bind it whatever else allows",
                if restrictive.len() == 1 {
                    "policy"
                } else {
                    "policies"
                },
                restrictive.join(", ")
            );
        }
        fix
    }
}

impl std::fmt::Display for Blind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: let it read them with `{}`", self.what(), self.fix())
    }
}

impl std::error::Error for Blind {}

impl std::fmt::Display for Filtered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "row level security is on for table {} and role {} reads it through policies whose \
             conditions rowbranch cannot judge ({}): the sweep sees only the rows the policy \
             lets it see",
            self.table,
            self.role,
            self.conditions()
        )
    }
}

fn read_policy(table: &str, role: &str) -> String {
    format!("create policy {POLICY} on {table} for select to {role} using (true);")
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
    /// What DATABASE_URL's role sees of the route's table under row level security.
    pub async fn visibility(&self, route: &Route) -> Result<Visibility> {
        let failed = |cause: tokio_postgres::Error| Error::Query {
            message: format!(
                "could not read the row level security of table {}.{} (DATABASE_URL): {}",
                route.schema,
                route.table,
                describe(&cause)
            ),
            cause,
        };
        let table = self
            .client
            .query_typed(
                "select c.oid, \
                        quote_ident(n.nspname) || '.' || quote_ident(c.relname), \
                        quote_ident(current_user), \
                        c.relrowsecurity, c.relforcerowsecurity, \
                        row_security_active(c.oid::regclass), \
                        pg_has_role(current_user, c.relowner, 'USAGE') \
                 from pg_catalog.pg_class c \
                 join pg_catalog.pg_namespace n on n.oid = c.relnamespace \
                 where n.nspname = $1 and c.relname = $2",
                &[(&route.schema, Type::TEXT), (&route.table, Type::TEXT)],
            )
            .await
            .map_err(failed)?;
        let Some(table) = table.first() else {
            return Ok(Visibility::Off);
        };
        let (oid, name, role): (u32, String, String) = (table.get(0), table.get(1), table.get(2));
        let (enabled, forced, active, owner): (bool, bool, bool, bool) =
            (table.get(3), table.get(4), table.get(5), table.get(6));
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
        // The policies for reading that apply to the role, as PostgreSQL picks them.
        let policies = self
            .client
            .query_typed(
                "select quote_ident(p.polname), not p.polpermissive, \
                        pg_catalog.pg_get_expr(p.polqual, p.polrelid) \
                 from pg_catalog.pg_policy p \
                 where p.polrelid = $1 and p.polcmd in ('r', '*') \
                   and exists (select from unnest(p.polroles) as r(oid) \
                               where case when r.oid = 0 then true \
                                     else pg_has_role(current_user, r.oid, 'USAGE') end) \
                 order by p.polname",
                &[(&oid, Type::OID)],
            )
            .await
            .map_err(failed)?;
        let policies: Vec<(String, bool, Option<String>)> = policies
            .iter()
            .map(|p| (p.get(0), p.get(1), p.get(2)))
            .collect();
        Ok(judge(name, role, forced && owner, &policies))
    }
}

/// The verdict from the policies that apply to the role: (name, restrictive, condition).
fn judge(
    table: String,
    role: String,
    forced_on_owner: bool,
    policies: &[(String, bool, Option<String>)],
) -> Visibility {
    let literally_true = |c: &str| c.trim().eq_ignore_ascii_case("true");
    // A permissive policy without a condition lets nothing through; a restrictive one, nothing
    // out.
    let permissive: Vec<(&String, &String)> = policies
        .iter()
        .filter(|(_, restrictive, _)| !restrictive)
        .filter_map(|(name, _, condition)| condition.as_ref().map(|c| (name, c)))
        .collect();
    if permissive.is_empty() {
        return Visibility::Blind(Blind {
            table,
            role,
            forced_on_owner,
        });
    }
    let opens = permissive.iter().find(|(_, c)| literally_true(c));
    let narrowing: Vec<Policy> = policies
        .iter()
        .filter_map(|(name, restrictive, condition)| {
            let condition = condition.as_ref()?;
            let hides = !literally_true(condition) && (*restrictive || opens.is_none());
            hides.then(|| Policy {
                name: name.clone(),
                restrictive: *restrictive,
                condition: condition.clone(),
            })
        })
        .collect();
    match opens {
        Some((name, _)) if narrowing.is_empty() => Visibility::Every(format!(
            "policy {name} lets role {role} read them: using (true)"
        )),
        _ => Visibility::Filtered(Filtered {
            table,
            role,
            policies: narrowing,
        }),
    }
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
                blind.fix(),
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
        assert!(filtered.fix().contains("restrictive policy r"));
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
