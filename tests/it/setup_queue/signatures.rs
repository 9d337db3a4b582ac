//! `src/db/signatures-1.4.4.txt` against the pgmq installed here: every function it lists
//! resolves when called with its arguments cast as listed (and without those that have a
//! default), and returns the columns listed; on a pgmq 1.4.4, the list is exactly what
//! pg_catalog says.

use std::collections::BTreeSet;

use super::*;

/// One line of `src/db/signatures-1.4.4.txt`.
#[derive(Debug)]
enum Signature {
    /// name, argument types (without defaults), how many of them have one, the result type.
    Function(String, Vec<String>, usize, String),
    /// `type` or `table`, its name (with `<queue>`), its columns as (name, type).
    Columns(String, Vec<(String, String)>),
}

fn signatures() -> (String, Vec<Signature>) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/db/signatures-1.4.4.txt");
    let text = std::fs::read_to_string(path).expect("src/db/signatures-1.4.4.txt");
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        if let Some(rest) = line.strip_prefix("pgmq.") {
            let (name, rest) = rest.split_once('(').expect("name(");
            let (args, result) = rest.split_once(") returns ").expect(") returns");
            let mut types = Vec::new();
            let mut defaults = 0;
            for arg in args.split(", ").filter(|a| !a.is_empty()) {
                match arg.split_once(" default ") {
                    Some((ty, _)) => {
                        types.push(ty.to_owned());
                        defaults += 1;
                    }
                    None => types.push(arg.to_owned()),
                }
            }
            out.push(Signature::Function(
                name.to_owned(),
                types,
                defaults,
                result.to_owned(),
            ));
        } else {
            let (kind_name, columns) = line.split_once(" (").expect("type|table NAME (");
            let columns = columns.strip_suffix(')').expect("a closing )");
            let columns = columns
                .split(", ")
                .map(|c| {
                    let (name, ty) = c.split_once(' ').expect("name type");
                    (name.to_owned(), ty.to_owned())
                })
                .collect();
            out.push(Signature::Columns(kind_name.to_owned(), columns));
        }
    }
    (text, out)
}

/// The columns of a relation or composite type, as (name, format_type).
async fn columns_of(client: &Client, relation: &str) -> Vec<(String, String)> {
    client
        .query(
            "select a.attname::text, format_type(a.atttypid, a.atttypmod)
             from pg_attribute a
             where a.attrelid = coalesce(to_regclass($1), (select typrelid from pg_type where oid = to_regtype($1)))
               and a.attnum > 0 and not a.attisdropped
             order by a.attnum",
            &[&relation],
        )
        .await
        .unwrap_or_else(|e| panic!("the columns of {relation}: {}", db_message(&e)))
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[tokio::test]
async fn the_listed_1_4_4_signatures_resolve_on_this_pgmq_with_their_columns() {
    for db in each_install_queueing().await {
        let c = &db.client;
        let (_, listed) = signatures();
        assert!(listed.len() >= 12, "{listed:#?}");
        let mut names = BTreeSet::new();
        for signature in &listed {
            match signature {
                Signature::Function(name, types, defaults, result) => {
                    names.insert(name.clone());
                    // What has a default may be left out, as on 1.4.4.
                    let required: Vec<String> = types[..types.len() - defaults]
                        .iter()
                        .map(|t| format!("null::{t}"))
                        .collect();
                    let short = format!("select * from pgmq.{name}({})", required.join(", "));
                    c.prepare(&short)
                        .await
                        .unwrap_or_else(|e| panic!("{short}: {}", db_message(&e)));
                    // Every argument cast as listed: the call resolves to one function.
                    let args: Vec<String> = types.iter().map(|t| format!("null::{t}")).collect();
                    let call = format!("select * from pgmq.{name}({})", args.join(", "));
                    let statement = c
                        .prepare(&call)
                        .await
                        .unwrap_or_else(|e| panic!("{call}: {}", db_message(&e)));
                    let returned: Vec<&str> =
                        statement.columns().iter().map(|col| col.name()).collect();
                    let of = result.trim_start_matches("setof ");
                    if of.starts_with("pgmq.") {
                        for (column, _) in columns_of(c, of).await {
                            assert!(returned.contains(&column.as_str()), "{call}: {returned:?}");
                        }
                        let listed_type = listed.iter().find_map(|s| match s {
                            Signature::Columns(n, cols) if n == &format!("type {of}") => Some(cols),
                            _ => None,
                        });
                        let listed_type =
                            listed_type.unwrap_or_else(|| panic!("no type line for {of}"));
                        for (column, _) in listed_type {
                            assert!(returned.contains(&column.as_str()), "{call}: {returned:?}");
                        }
                    } else {
                        assert_eq!(statement.columns().len(), 1, "{call}");
                        let pg_name = match of {
                            "boolean" => "bool",
                            "bigint" => "int8",
                            "void" => "void",
                            other => panic!("a result type the test does not know: {other}"),
                        };
                        assert_eq!(statement.columns()[0].type_().name(), pg_name, "{call}");
                    }
                }
                Signature::Columns(kind_name, columns) => {
                    let relation = kind_name
                        .split_once(' ')
                        .expect("type|table NAME")
                        .1
                        .replace("<queue>", "rowbranch");
                    let actual = columns_of(c, &relation).await;
                    for column in columns {
                        assert!(
                            actual.contains(column),
                            "{relation} has no {column:?}: {actual:?}"
                        );
                    }
                }
            }
        }
        for name in [
            "send",
            "read",
            "set_vt",
            "archive",
            "delete",
            "metrics",
            "list_queues",
        ] {
            assert!(names.contains(name), "pgmq.{name} is not listed");
        }

        // On a pgmq 1.4.4 the list is exactly what pg_catalog says of those functions.
        let version: Option<String> = c
            .query_opt(
                "select extversion::text from pg_extension where extname = 'pgmq'",
                &[],
            )
            .await
            .unwrap()
            .map(|r| r.get(0));
        if version.as_deref() == Some("1.4.4") {
            let catalog: BTreeSet<String> = c
                .query(
                    "select p.proname::text, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid)
                     from pg_proc p where p.pronamespace = 'pgmq'::regnamespace and p.proname = any($1)",
                    &[&names.iter().cloned().collect::<Vec<String>>()],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| {
                    let (name, args, result): (String, String, String) = (r.get(0), r.get(1), r.get(2));
                    let args: Vec<String> = args
                        .split(", ")
                        .filter(|a| !a.is_empty())
                        .map(|a| a.split_once(' ').map_or(a, |(_, ty)| ty).replace(" DEFAULT ", " default "))
                        .collect();
                    format!("pgmq.{name}({}) returns {}", args.join(", "), result.replace("SETOF ", "setof "))
                })
                .collect();
            let (text, _) = signatures();
            let file: BTreeSet<String> = text
                .lines()
                .filter(|l| l.starts_with("pgmq."))
                .map(str::to_owned)
                .collect();
            assert_eq!(file, catalog, "the list differs from this pgmq 1.4.4");
        }
    }
}
