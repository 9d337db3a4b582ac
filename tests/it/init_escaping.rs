//! What `init` writes is quoted for its format (SPEC §7): for random printable names every file
//! parses — TOML with the toml crate, JSON with serde_json, YAML with yaml-rust2 — and gives
//! each name back in the same place with nothing added; in the page each name appears
//! HTML-escaped and adds no markup. (The SQL files are run on a real PostgreSQL with hostile
//! names in `setup_sql` and `setup_vault_sql`.)

use proptest::prelude::*;
use rowbranch::cmd::init::setup::{render, SetupContext, FILES};
use rowbranch::config::{Config, Intake};
use serde_json::Value;
use yaml_rust2::{Yaml, YamlLoader};

use crate::support::setup::{example, posted_manifest};

/// Printable text: no control, format, private-use or unassigned character (Unicode's `C`
/// categories), and no line or paragraph separator.
const PRINTABLE: &str = "[^\\p{C}\\p{Zl}\\p{Zp}]";

fn printable(max: usize) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("{PRINTABLE}{{1,{max}}}")).unwrap()
}

/// A URL `init` accepts: https, a host, and a path of any characters a URI path may hold.
fn url() -> impl Strategy<Value = String> {
    (
        "[a-z][a-z0-9-]{0,8}",
        "(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-F]{2}){0,24}",
    )
        .prop_map(|(host, path)| format!("https://{host}.example/{path}"))
}

/// The example, for the intake and queue of `ctx`: what `ctx`'s files are compared with.
fn example_for(ctx: &SetupContext) -> SetupContext {
    SetupContext {
        intake: ctx.intake,
        queue: ctx.queue.clone(),
        dead_letter: ctx.dead_letter.clone(),
        ..example()
    }
}

fn contexts() -> impl Strategy<Value = SetupContext> {
    (
        (printable(30), printable(30), printable(20), printable(20)),
        (printable(34), printable(60), url()),
        (any::<bool>(), "[a-z_][a-z0-9_]{0,41}"),
    )
        .prop_map(
            |(
                (schema, table, id_column, text_column),
                (app_name, event_type, url),
                (queue_intake, queue),
            )| SetupContext {
                app_slug: slug::slugify(&app_name),
                schema,
                table,
                id_column,
                text_column,
                app_name,
                event_type,
                url,
                intake: if queue_intake {
                    Intake::Pgmq {
                        max_rows_per_hour: Some(60),
                    }
                } else {
                    Intake::Webhook
                },
                dead_letter: format!("{queue}_dead"),
                queue,
                ..example()
            },
        )
        .prop_filter("a slug needs a letter or digit", |c| !c.app_slug.is_empty())
}

/// minijinja's HTML escaping, written out here: `& < > " ' /`.
fn html_escaped(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#x27;")
        .replace('/', "&#x2f;")
}

fn rendered(name: &str, ctx: &SetupContext) -> String {
    render(name, ctx).unwrap_or_else(|e| panic!("{name} does not render for {ctx:?}: {e:#}"))
}

/// The example's manifest, and the manifest rendered for `ctx` with the values it carries put
/// back to the example's: they must be equal.
fn manifest_shape(ctx: &SetupContext) -> (Value, Value) {
    let mut manifest: Value = serde_json::from_str(&rendered("app-manifest.json", ctx))
        .unwrap_or_else(|e| panic!("the manifest is not JSON: {e}"));
    let example: Value =
        serde_json::from_str(&rendered("app-manifest.json", &example_for(ctx))).unwrap();
    assert_eq!(manifest["name"].as_str(), Some(ctx.app_name.as_str()));
    assert_eq!(
        manifest["description"].as_str().unwrap(),
        format!(
            "rowbranch: one database row, one branch, one piece of work. Claims a branch per row of {}.{} and dispatches the work to a workflow.",
            ctx.schema, ctx.table
        )
    );
    if ctx.intake == Intake::Webhook {
        assert_eq!(
            manifest["hook_attributes"]["url"].as_str().unwrap(),
            format!("{}/github", ctx.url)
        );
    } else {
        assert!(
            manifest.get("hook_attributes").is_none(),
            "no webhook for the queue intake"
        );
    }
    assert_eq!(
        manifest["redirect_url"].as_str().unwrap(),
        format!("{}/", ctx.url)
    );
    for pointer in [
        "/name",
        "/description",
        "/hook_attributes/url",
        "/redirect_url",
    ] {
        let Some(value) = manifest.pointer_mut(pointer) else {
            continue;
        };
        *value = example.pointer(pointer).unwrap().clone();
    }
    (manifest, example)
}

/// `name` rendered for `ctx` and for the example, which has as many lines: no line was added.
fn rendered_with_example(name: &str, ctx: &SetupContext) -> (String, String) {
    let text = rendered(name, ctx);
    let example_text = rendered(name, &example_for(ctx));
    assert_eq!(
        text.lines().count(),
        example_text.lines().count(),
        "no line added"
    );
    (text, example_text)
}

fn check_config(ctx: &SetupContext) {
    let (text, example_text) = rendered_with_example("rowbranch.toml", ctx);
    let mut config: toml::Table =
        toml::from_str(&text).unwrap_or_else(|e| panic!("not TOML: {e}\n{text}"));
    let example: toml::Table = toml::from_str(&example_text).unwrap();
    let route = config["routes"].as_array_mut().unwrap()[0]
        .as_table_mut()
        .unwrap();
    for (key, value) in [
        ("schema", &ctx.schema),
        ("table", &ctx.table),
        ("id_column", &ctx.id_column),
        ("text_column", &ctx.text_column),
        ("event_type", &ctx.event_type),
    ] {
        assert_eq!(route[key].as_str(), Some(value.as_str()), "{key}");
        route.insert(key.to_owned(), example["routes"][0][key].clone());
    }
    assert_eq!(config, example, "nothing added or moved");

    // And rowbranch itself reads the same route out of it (a blank table or event type is
    // one `init` refuses).
    if !ctx.table.trim().is_empty() && !ctx.event_type.trim().is_empty() {
        let parsed = Config::parse(&text, std::path::Path::new("/x/rowbranch.toml"), &|_| None)
            .unwrap_or_else(|e| panic!("rowbranch does not load it: {e}"));
        let route = &parsed.routes[0];
        assert_eq!(route.table, ctx.table);
        assert_eq!(route.schema, ctx.schema);
        assert_eq!(route.event_type.as_str(), ctx.event_type);
        assert_eq!(route.intake, ctx.intake);
        assert_eq!(
            parsed.pgmq.queue,
            if ctx.intake != Intake::Webhook {
                ctx.queue.as_str()
            } else {
                "rowbranch"
            }
        );
    }
}

fn check_workflow(ctx: &SetupContext) {
    let (text, example_text) = rendered_with_example("workflow.yml", ctx);
    assert_eq!(
        text.lines().next().unwrap(),
        format!(
            "# rowbranch: the work for one row of {}.{}, on the branch rowbranch claimed for it.",
            ctx.schema, ctx.table
        ),
        "the names stay inside their comment"
    );
    let mut doc = YamlLoader::load_from_str(&text)
        .unwrap_or_else(|e| panic!("not YAML: {e}"))
        .remove(0);
    let example = YamlLoader::load_from_str(&example_text).unwrap().remove(0);
    let types = &doc["on"]["repository_dispatch"]["types"];
    assert_eq!(
        types.as_vec().unwrap(),
        &vec![Yaml::String(ctx.event_type.clone())]
    );
    let claude = doc["jobs"]["work"]["steps"]
        .as_vec()
        .and_then(|steps| steps.iter().find(|s| s["id"].as_str() == Some("work")))
        .expect("the claude-code-action step");
    assert_eq!(
        claude["with"]["allowed_bots"].as_str(),
        Some(format!("{}[bot]", ctx.app_slug).as_str())
    );
    // Put those two back to the example's: the rest must be the example's.
    if let Yaml::Hash(root) = &mut doc {
        let on = root.get_mut(&Yaml::String("on".into())).unwrap();
        *on = example["on"].clone();
        let jobs = root.get_mut(&Yaml::String("jobs".into())).unwrap();
        *jobs = example["jobs"].clone();
    }
    assert_eq!(doc, example, "nothing added or moved");
}

fn check_page(ctx: &SetupContext) {
    let page = rendered("create-app.html", ctx);
    let example = rendered("create-app.html", &example_for(ctx));
    assert!(
        page.contains(&format!("<strong>{}</strong>", html_escaped(&ctx.app_name))),
        "the App's name, escaped, where the page names it"
    );
    for markup in ['<', '>', '"'] {
        assert_eq!(
            page.matches(markup).count(),
            example.matches(markup).count(),
            "a `{markup}` was added to the page"
        );
    }
    // The page posts exactly the manifest.
    assert_eq!(posted_manifest(&page), rendered("app-manifest.json", ctx));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_file_parses_and_gives_each_printable_name_back_in_its_place(ctx in contexts()) {
        prop_assert_eq!(ctx.check(), Ok(()));
        check_config(&ctx);
        let (manifest, example) = manifest_shape(&ctx);
        prop_assert_eq!(manifest, example);
        check_workflow(&ctx);
        check_page(&ctx);
        // The SQL and the payload template render too.
        for name in ["supabase.sql", "supabase-vault.sql", "supabase-queue.sql", "payload.json.j2"] {
            rendered(name, &ctx);
        }
    }
}

#[test]
fn the_checks_catch_a_value_printed_raw() {
    // What a template that forgot to quote would write: each parser must refuse it.
    let replace_line = |text: &str, start: &str, with: &str| -> String {
        text.lines()
            .map(|l| {
                if l.trim_start().starts_with(start) {
                    with
                } else {
                    l
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let example = example();
    let raw_toml = replace_line(
        &rendered("rowbranch.toml", &example),
        "table = ",
        "table = \"a\"b\"",
    );
    assert!(toml::from_str::<toml::Table>(&raw_toml).is_err());
    let raw_json = replace_line(
        &rendered("app-manifest.json", &example),
        "\"name\":",
        "  \"name\": \"x\"y\",",
    );
    assert!(serde_json::from_str::<Value>(&raw_json).is_err());
    let raw_yaml =
        rendered("workflow.yml", &example).replacen("# rowbranch:", "# rowbranch:\nx: [", 1);
    assert!(YamlLoader::load_from_str(&raw_yaml).is_err());
    assert_ne!(html_escaped("<b>"), "<b>");
}

#[test]
fn a_line_break_or_an_invisible_character_is_refused_and_named() {
    for (bad, code) in [
        ("a\nb", 0x0A),
        ("a\rb", 0x0D),
        ("a\u{85}b", 0x85),
        ("a\u{2028}b", 0x2028),
        ("a\u{202E}b", 0x202E),
        ("a\u{200B}b", 0x200B),
        ("a\u{7F}b", 0x7F),
    ] {
        let ctx = SetupContext {
            table: bad.into(),
            ..example()
        };
        let err = ctx.check().unwrap_err();
        assert!(
            err.starts_with(&format!("--table: character 2 is U+{code:04X}, ")),
            "{err}"
        );
        assert!(render("workflow.yml", &ctx).is_err(), "nothing is rendered");
    }
}

#[test]
fn quotes_brackets_and_non_latin_text_are_printable() {
    let ctx = SetupContext {
        table: "a\"b'c<d>&e\\f 日本 é ${{ x }} #".into(),
        app_name: "Bot <b>\"x\"</b>".into(),
        ..example()
    };
    assert_eq!(ctx.check(), Ok(()));
    for (name, _) in FILES {
        render(name, &ctx).unwrap_or_else(|e| panic!("{name}: {e:#}"));
    }
}
