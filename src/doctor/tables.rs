//! `rowbranch doctor` with `DATABASE_URL` set: each route fits its table — the table exists and
//! has the route's id, text and created columns — as `serve` checks at start. A route naming a
//! column its table lacks would be refused row by row (`missing_column`), and the sweep that
//! recovers lost rows needs the created column.

use super::Check;
use crate::config::Config;
use crate::rows::{Misfit, Rows};

pub async fn checks(config: &Config, out: &mut Vec<Check>) {
    let Some(url) = &config.database_url else {
        return;
    };
    let rows = match Rows::connect(url.expose()).await {
        Ok(rows) => rows,
        // The queue's checks have said so already.
        Err(_) if config.reads_the_queue() => return,
        Err(e) => {
            out.push(Check::fail(
                format!("DATABASE_URL does not connect: {e:#}"),
                "check the host, port, user and password of DATABASE_URL (and sslmode)",
            ));
            return;
        }
    };
    for route in &config.routes {
        let table = route.table_name();
        let mut columns = vec![route.id_column.as_str()];
        columns.extend(route.text_column.as_deref());
        columns.push(&route.created_column);
        out.push(match rows.check_columns(route, true).await {
            Ok(()) => Check::pass(format!(
                "{table} has the route's columns: {}",
                columns.join(", ")
            )),
            Err(e) => {
                let fix = match e.chain().find_map(|c| c.downcast_ref::<Misfit>()) {
                    Some(Misfit::NoTable(_)) => {
                        "check the route's schema and table, and that DATABASE_URL names the database that holds the table".to_owned()
                    }
                    Some(Misfit::MissingColumn(missing)) if missing.key == "text_column" => {
                        "set the route's text_column to the table's column that holds the text (or \"\" for no text); until then each row is refused (missing_column)".to_owned()
                    }
                    Some(Misfit::MissingColumn(missing)) if missing.key == "id_column" => {
                        "set the route's id_column to the table's primary key column; until then each row is refused (missing_column)".to_owned()
                    }
                    Some(Misfit::MissingColumn(_) | Misfit::CreatedType(_)) => {
                        "set the route's created_column to the table's creation time column: `rowbranch reconcile` reads the rows of a window by it".to_owned()
                    }
                    None => "give DATABASE_URL's role access to the catalog (every role has it by default)".to_owned(),
                };
                Check::fail(format!("{e:#}"), fix)
            }
        });
    }
}
