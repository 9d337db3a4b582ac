//! `rowbranch doctor` with `DATABASE_URL` set: each route fits its table — the table exists and
//! has the route's id, text and created columns — as `serve` checks at start. A route naming an
//! id or text column its table lacks would be refused row by row (`missing_column`): a failed
//! check, as `serve` will not start with it. What only the sweep and `redo` need (the table in
//! this database, its created column) is advice, unless `reconcile_every` schedules a sweep.

use super::Check;
use crate::config::Config;
use crate::db::{Database, Error, Misfit};

pub(super) async fn checks(config: &Config, rows: &Database, out: &mut Vec<Check>) {
    let sweeps = config.reconcile.every.is_some();
    for route in &config.routes {
        let table = route.table_name();
        let mut columns = vec![route.id_column.as_str()];
        columns.extend(route.text_column.as_deref());
        columns.push(&route.created_column);
        let Err(e) = rows.check_columns(route, true).await else {
            out.push(Check::pass(format!(
                "{table} has the route's columns: {}",
                columns.join(", ")
            )));
            out.extend(super::row_security::check(rows, route).await);
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
            Error::Table(Misfit::NoTable(_)) => Check::advise(
                what,
                "check the route's schema and table, and that DATABASE_URL names the database that holds the table: reconcile and redo read its rows there",
            ),
            _ => Check::advise(
                what,
                "give DATABASE_URL's role access to the catalog (every role has it by default)",
            ),
        });
    }
}
