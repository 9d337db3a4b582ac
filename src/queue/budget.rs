//! The hourly budgets of the queue's rows, counted where every process that reads the queue sees
//! them — the queue's archive of the last hour, and the messages held now — not in each one's
//! memory: replicas, restarts and successive drains share one budget instead of each getting a
//! fresh one. Two kinds: a route's `max_rows_per_hour`, and (in a drain) an installation's
//! `[github] write_hourly_max`, taken as two writes (claim and dispatch) for every message its
//! routes settled. Before each read the consumer asks what is left of them ([`Budgets::left`]):
//! how many messages to read at most, and message by message whether its route may start one
//! more now.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::{ForgeSettings, Intake, Route};
use crate::db::queue::TableUse;

/// A table as a message's event names it: `(schema, table)`.
type TableKey = (String, String);

/// One bound: at most `rows` rows of `tables` an hour; in what is left of the budgets, the
/// rows left this hour.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HourlyCap {
    tables: Vec<TableKey>,
    rows: u64,
    /// The setting, and when the next row of it comes back: what a message over it is told.
    spent: Spent,
}

/// The hourly bounds on the queue's routes (none when nothing bounds them), or what is left of
/// them until the next read, taken message by message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Budgets {
    caps: Vec<HourlyCap>,
    /// The tables of the routes that read the queue.
    queue_tables: Vec<TableKey>,
}

/// A message whose route's budget is spent: which setting, and when a row of it comes back
/// (`None`: when the rows held now are settled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spent {
    pub setting: String,
    pub frees_in: Option<Duration>,
}

impl Budgets {
    /// Each queue route's `max_rows_per_hour`, and with `count_writes`, each GitHub
    /// installation's `write_hourly_max` as rows of its queue routes (two writes a row).
    pub fn new(
        routes: &[std::sync::Arc<Route>],
        forge: &ForgeSettings,
        count_writes: bool,
    ) -> Budgets {
        let queue_routes: Vec<&Route> = routes
            .iter()
            .map(|r| r.as_ref())
            .filter(|r| r.reads_the_queue())
            .collect();
        let table = |r: &Route| (r.schema.clone(), r.table.clone());
        let cap = |setting, tables, rows| HourlyCap {
            tables,
            rows,
            spent: Spent {
                setting,
                frees_in: None,
            },
        };
        let mut caps: Vec<HourlyCap> = queue_routes
            .iter()
            .filter_map(|r| match r.intake {
                Intake::Pgmq {
                    max_rows_per_hour: Some(per_hour),
                } => Some(cap(
                    format!("max_rows_per_hour of {}", r.table_name()),
                    vec![table(r)],
                    u64::from(per_hour),
                )),
                _ => None,
            })
            .collect();
        if let (true, ForgeSettings::Github(github)) = (count_writes, forge) {
            let mut owners: BTreeMap<String, Vec<TableKey>> = BTreeMap::new();
            for r in &queue_routes {
                let owner = r.repo.owner().to_ascii_lowercase();
                owners.entry(owner).or_default().push(table(r));
            }
            for (owner, tables) in owners {
                let per_hour = u64::from(github.pace.hourly_max / 2);
                let setting = format!("[github] write_hourly_max for {owner}");
                caps.push(cap(setting, tables, per_hour));
            }
        }
        Budgets {
            caps,
            queue_tables: queue_routes.iter().map(|r| table(r)).collect(),
        }
    }

    /// Whether any bound applies: without one, the consumer never asks the database.
    pub fn any(&self) -> bool {
        !self.caps.is_empty()
    }

    /// What is left of each budget, given what the last hour used.
    pub fn left(&self, used: &[TableUse]) -> Budgets {
        let mut left = self.clone();
        for cap in &mut left.caps {
            let covered = |u: &&TableUse| {
                cap.tables
                    .iter()
                    .any(|(s, t)| *s == u.schema && *t == u.table)
            };
            for u in used.iter().filter(covered) {
                let frees_in = u.frees_in_s.map(|s| Duration::from_secs_f64(s.max(0.0)));
                cap.rows = cap.rows.saturating_sub(u.rows);
                cap.spent.frees_in = cap.spent.frees_in.into_iter().chain(frees_in).min();
            }
        }
        left
    }

    /// The most messages worth reading now: what the queue's tables have left together
    /// (`None` when one of them has no bound). A queue with one route reads exactly what its
    /// budget allows; with several, a message over its own route's budget may still be read,
    /// and is put off (see [`admit`](Self::admit)).
    pub fn rows(&self) -> Option<u64> {
        if self.caps.is_empty() {
            return None;
        }
        let least = |table| {
            self.caps
                .iter()
                .filter(|c| c.tables.contains(table))
                .map(|c| c.rows)
                .min()
        };
        self.queue_tables.iter().map(least).sum()
    }

    /// Takes one row of `schema.table` from every bound that covers it, or says which bound is
    /// spent. A table no bound covers (no route, another intake) is always admitted: its
    /// message starts no work.
    pub fn admit(&mut self, schema: &str, table: &str) -> Result<(), Spent> {
        let table = (schema.to_owned(), table.to_owned());
        let mut covering = self.caps.iter_mut().filter(|c| c.tables.contains(&table));
        if let Some(spent) = covering.find(|c| c.rows == 0) {
            return Err(spent.spent.clone());
        }
        for cap in self.caps.iter_mut().filter(|c| c.tables.contains(&table)) {
            cap.rows -= 1;
        }
        Ok(())
    }

    /// The first setting whose budget is spent, with when it frees, once nothing may start:
    /// for the message that says why the reading stopped.
    pub fn spent(&self) -> Option<Spent> {
        if self.rows() != Some(0) {
            return None;
        }
        let spent = self.caps.iter().find(|c| c.rows == 0);
        spent.map(|c| c.spent.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::Config;

    fn config(routes: &str, github: &str) -> Config {
        let text =
            format!("[github]\napp_id = 1\nprivate_key_path = \"app.pem\"\n{github}\n{routes}");
        Config::parse(&text, Path::new("/etc/rowbranch/rowbranch.toml"), &|_| None).unwrap()
    }

    fn route(table: &str, repo: &str, extra: &str) -> String {
        format!(
            "[[routes]]\ntable = \"{table}\"\nrepo = \"{repo}\"\nbranch_prefix = \"b\"\n\
             event_type = \"e\"\nintake = \"pgmq\"\n{extra}\n"
        )
    }

    fn used(table: &str, rows: u64, frees_in_s: Option<f64>) -> TableUse {
        TableUse {
            schema: "public".into(),
            table: table.into(),
            rows,
            frees_in_s,
        }
    }

    #[test]
    fn a_route_with_a_bound_reads_what_is_left_of_its_hour() {
        let config = config(&route("t", "acme/app", "max_rows_per_hour = 60"), "");
        let budgets = Budgets::new(&config.routes, &config.forge, false);
        assert!(budgets.any());
        assert_eq!(budgets.left(&[]).rows(), Some(60));
        let mut allowance = budgets.left(&[used("t", 58, Some(120.0))]);
        assert_eq!(allowance.rows(), Some(2));
        assert_eq!(allowance.admit("public", "t"), Ok(()));
        assert_eq!(allowance.admit("public", "t"), Ok(()));
        let spent = allowance.admit("public", "t").unwrap_err();
        assert_eq!(spent.setting, "max_rows_per_hour of public.t");
        assert_eq!(spent.frees_in, Some(Duration::from_secs(120)));
        assert_eq!(allowance.rows(), Some(0));
        assert_eq!(allowance.spent(), Some(spent));
        // A message of a table no route reads starts nothing: admitted.
        assert_eq!(allowance.admit("public", "other"), Ok(()));
    }

    #[test]
    fn without_a_bound_nothing_is_counted() {
        let config = config(&route("t", "acme/app", ""), "");
        let budgets = Budgets::new(&config.routes, &config.forge, false);
        assert!(!budgets.any());
        assert_eq!(budgets.left(&[]).rows(), None);
        assert_eq!(Budgets::default().rows(), None);
    }

    #[test]
    fn in_a_drain_an_installations_write_cap_bounds_its_routes_together_at_two_writes_a_row() {
        let routes = [
            route("a", "acme/app", ""),
            route("b", "Acme/web", "max_rows_per_hour = 10"),
            route("c", "globex/api", ""),
        ]
        .concat();
        let config = config(&routes, "write_hourly_max = 100");
        // serve's consumer leaves the write cap to each process's pacer.
        let serve = Budgets::new(&config.routes, &config.forge, false);
        assert_eq!(serve.left(&[]).rows(), None, "a and c have no bound");
        let drain = Budgets::new(&config.routes, &config.forge, true);
        // acme: 50 rows for a and b together; b at most 10; globex: 50.
        let allowance = drain.left(&[used("a", 45, Some(10.0)), used("c", 50, None)]);
        // a: min(50 − 45) = 5; b: min(10, 5) = 5; c: 0.
        assert_eq!(allowance.rows(), Some(10));
        let mut allowance = allowance;
        for _ in 0..5 {
            allowance.admit("public", "b").unwrap();
        }
        let spent = allowance.admit("public", "a").unwrap_err();
        assert_eq!(spent.setting, "[github] write_hourly_max for acme");
        assert_eq!(spent.frees_in, Some(Duration::from_secs(10)));
        let spent = allowance.admit("public", "c").unwrap_err();
        assert_eq!(
            spent.frees_in, None,
            "all of globex's rows are held, none archived"
        );
        assert_eq!(allowance.rows(), Some(0));
    }

    #[test]
    fn the_local_forge_has_no_write_cap() {
        let text = format!(
            "[forge]\nkind = \"local\"\npath = \"repo.git\"\n{}",
            route("t", "acme/app", "")
        );
        let config =
            Config::parse(&text, Path::new("/etc/rowbranch/rowbranch.toml"), &|_| None).unwrap();
        assert!(!Budgets::new(&config.routes, &config.forge, true).any());
    }
}
