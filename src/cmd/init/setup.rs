//! The setup files `rowbranch init` writes: the target repository's workflow, the Supabase
//! triggers, the GitHub App manifest and the page that creates the App, the payload template
//! and the config, each embedded in the binary and filled in from what the user told `init`.
//!
//! They are minijinja templates with `[[ … ]]` for values and `[% … %]` for blocks, so that
//! GitHub's own `${{ … }}` expressions in the workflow pass through untouched. Every value is
//! quoted for the format it lands in (SPEC §7): the page is HTML-escaped and the manifest
//! JSON-escaped by the engine itself, values in the workflow go through `tojson` (a JSON string
//! is a YAML double-quoted scalar), values in the config through `toml` (a TOML string), and
//! the SQL quotes its identifiers and literals itself. What no quoting can make safe — a line
//! break in a comment, an invisible character that makes a name read as another — is refused
//! by [`SetupContext::check`] before anything is rendered.

use anyhow::{anyhow, Context};
use minijinja::syntax::SyntaxConfig;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Serialize;

use super::actions::{self, ActionsSetup};
use crate::cli::{HostArg, OwnerType};
use crate::config::{Intake, DEFAULT_MAX_TURNS, DEFAULT_WORK_TIMEOUT_MINUTES};
use crate::doctor::{DRAIN_WORKFLOW_FILE, KICK_TRIGGER_PREFIX};

/// The setup files, each embedded under its name in `templates/` (and in the folder `init`
/// writes), with its text.
macro_rules! setup_files {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../../../templates/", $name)))),*]
    };
}

pub const FILES: &[(&str, &str)] = setup_files![
    "workflow.yml",
    "supabase-vault.sql",
    "supabase.sql",
    "supabase-queue.sql",
    "app-manifest.json",
    "payload.json.j2",
    "rowbranch.toml",
    "create-app.html",
    "rowbranch-drain.yml",
    "supabase-kick.sql",
];

/// What the setup files are filled in with.
#[derive(Debug, Clone, Serialize)]
pub struct SetupContext {
    /// `owner/name` of the target repository.
    pub repo: String,
    pub owner: String,
    /// A private App can be installed only on the account that owns it, so the page offers
    /// only the form for that kind of account.
    /// (https://docs.github.com/apps/creating-github-apps/registering-a-github-app/making-a-github-app-public-or-private)
    pub owner_kind: OwnerType,
    /// Where rowbranch is reachable, without a trailing `/` (the trigger posts to `{url}/webhook`).
    pub url: String,
    /// The GitHub App's name; its bot user is `{app_slug}[bot]`.
    pub app_name: String,
    pub app_slug: String,
    pub schema: String,
    pub table: String,
    pub id_column: String,
    pub text_column: String,
    pub branch_prefix: String,
    pub event_type: String,
    /// The signing secret (`whsec_…`) the Vault trigger signs with; `None` renders a placeholder.
    pub webhook_secret: Option<String>,
    /// The bearer secret `supabase.sql`'s header sends, never a `whsec_` one: a signing key
    /// written into a header would make the signed setup's key a bearer token. `None` renders
    /// a placeholder.
    pub bearer_secret: Option<String>,
    /// Where the route's rows come from: the config's route says so, the manifest has a
    /// webhook URL only for `webhook`.
    pub intake: Intake,
    /// Where rowbranch runs: the config's `[github]` authenticates as the App or with the
    /// Actions job's token, and the work workflow allows the bot that dispatches.
    pub host: HostArg,
    /// The drain workflow's and the kick's values (used with `host = actions`).
    pub actions: ActionsSetup,
    /// The route's event types (`INSERT`, `UPDATE`, `DELETE`), which the queue's trigger fires on.
    pub events: Vec<String>,
    /// The pgmq queue the queue's trigger sends rows to.
    pub queue: String,
    /// The pgmq queue rowbranch moves messages it refuses for good into.
    pub dead_letter: String,
    /// The most turns Claude takes in one run: the workflow's `--max-turns`, the route's
    /// `max_turns`.
    pub max_turns: u32,
    /// The most minutes the workflow's work job runs: its `timeout-minutes`, the route's
    /// `work_timeout_minutes`.
    pub work_timeout_minutes: u32,
}

impl SetupContext {
    /// Example values, for the documentation's own checks.
    pub fn example() -> SetupContext {
        SetupContext {
            repo: "acme/app".into(),
            owner: "acme".into(),
            owner_kind: OwnerType::Organization,
            url: "https://hooks.example.com".into(),
            app_name: "rowbranch-acme".into(),
            app_slug: "rowbranch-acme".into(),
            schema: "public".into(),
            table: "feedbacks".into(),
            id_column: "id".into(),
            text_column: "message".into(),
            branch_prefix: "feedback".into(),
            event_type: "feedback".into(),
            webhook_secret: None,
            bearer_secret: None,
            intake: Intake::Webhook,
            host: HostArg::Server,
            actions: ActionsSetup::example(),
            events: vec!["INSERT".into()],
            queue: "rowbranch".into(),
            dead_letter: "rowbranch_dead".into(),
            max_turns: DEFAULT_MAX_TURNS,
            work_timeout_minutes: DEFAULT_WORK_TIMEOUT_MINUTES,
        }
    }

    /// Refuses a value that no quoting makes safe in every file (see [`refused`]), naming the
    /// flag it came from (the field's name, `-` for `_`) and the character.
    pub fn check(&self) -> Result<(), String> {
        // Every text field by its name, as the templates see them; then the nested ones.
        let json = serde_json::to_value(self).map_err(|e| e.to_string())?;
        let fields = json.as_object().into_iter().flatten();
        let fields = fields.filter_map(|(field, value)| Some((field.as_str(), value.as_str()?)));
        let nested = self.actions.texts().into_iter();
        for (field, value) in fields.chain(nested.map(|(field, value)| (field, value.as_str()))) {
            if let Some((at, c)) = value.chars().enumerate().find(|(_, c)| refused(*c)) {
                return Err(format!(
                    "--{}: character {} is U+{:04X}, a control or invisible character; only \
                     printable text can be written into the setup files",
                    field.replace('_', "-"),
                    at + 1,
                    c as u32
                ));
            }
        }
        Ok(())
    }
}

/// Whether `c` is kept out of the setup files: a control character (C0, DEL and C1, which
/// holds NEL, a line break to YAML 1.1 parsers such as libyaml), a line or paragraph separator
/// (line breaks to YAML 1.1), or an invisible formatting character that makes text display
/// other than it is — bidirectional marks, embeddings, overrides and isolates, zero-width
/// characters, the byte order mark, interlinear annotations — and the two noncharacters
/// U+FFFE and U+FFFF, which YAML does not allow.
pub fn refused(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{FFFE}'
                | '\u{FFFF}'
        )
}

/// `value` as a TOML basic string, quoted and escaped by the `toml` crate itself.
fn toml_string(value: String) -> String {
    toml::Value::String(value).to_string()
}

/// Renders the setup file `name` (one of [`FILES`]).
pub fn render(name: &str, ctx: &SetupContext) -> anyhow::Result<String> {
    ctx.check().map_err(|e| anyhow!(e))?;
    let (_, source) = FILES
        .iter()
        .find(|(file, _)| *file == name)
        .ok_or_else(|| anyhow!("no setup template named {name}"))?;
    if name.ends_with(".j2") {
        // The payload template is rendered per row, by the server: it is written as it is.
        return Ok((*source).to_owned());
    }
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    let syntax = SyntaxConfig::builder()
        .block_delimiters("[%", "%]")
        .variable_delimiters("[[", "]]")
        .comment_delimiters("[#", "#]")
        .build()
        .context("the setup templates' delimiters")?;
    env.set_syntax(syntax);
    env.set_keep_trailing_newline(true);
    // The engine escapes what it prints into the page and the manifest; elsewhere each value
    // is quoted where it is printed.
    env.set_auto_escape_callback(|name| {
        if name.ends_with(".html") {
            AutoEscape::Html
        } else if name.ends_with(".json") {
            AutoEscape::Json
        } else {
            AutoEscape::None
        }
    });
    env.add_filter("toml", toml_string);
    env.add_template(name, source)
        .with_context(|| format!("templates/{name}"))?;
    let mut values = minijinja::Value::from_serialize(ctx);
    if name == "create-app.html" {
        // The page posts the manifest, so it carries it (HTML-escaped where it is printed).
        let manifest = render("app-manifest.json", ctx)?;
        values = minijinja::context! { manifest => manifest, ..values };
    }
    // What the GitHub Actions host's files compute from the values, computed here once.
    let setup = &ctx.actions;
    values = minijinja::context! {
        cron => setup.every.cron(&ctx.repo),
        every => setup.every.to_string(),
        timeout_minutes => setup.timeout_minutes(),
        max_time_minutes => actions::DRAIN_MAX_TIME_MINUTES,
        install_minutes => setup.install.minutes(),
        config_dir => actions::CONFIG_DIR,
        config_path => actions::CONFIG_PATH,
        ca_path => actions::CA_PATH,
        database_url_secret => actions::DATABASE_URL_SECRET,
        drain_workflow => DRAIN_WORKFLOW_FILE,
        kick_url => setup.kick_url(&ctx.repo),
        kick_trigger => format!("{KICK_TRIGGER_PREFIX}{}", ctx.queue),
        ..values
    };
    env.get_template(name)
        .and_then(|template| template.render(values))
        .with_context(|| format!("templates/{name}"))
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::config::{
        Config, ForgeSettings, GithubAuth, PayloadTemplateSource, PrivateKeySource,
    };
    use crate::doctor::PLACEHOLDER_APP_ID;
    use crate::event::EventKind;

    #[test]
    fn the_shipped_example_config_parses_with_the_documented_defaults() {
        let text = render("rowbranch.toml", &SetupContext::example()).unwrap();
        let config =
            Config::parse(&text, Path::new("/etc/rowbranch/rowbranch.toml"), &|_| None).unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
        // The sweep is written on: rows a sender never sent again come back within 6 h.
        assert_eq!(config.reconcile.every, Some(Duration::from_secs(6 * 3600)));
        assert_eq!(config.reconcile.window, Duration::from_secs(48 * 3600));
        let ForgeSettings::Github(github) = &config.forge else {
            panic!("the example uses the github forge");
        };
        let GithubAuth::App { app_id, key } = &github.auth else {
            panic!("the App");
        };
        assert_eq!(*app_id, PLACEHOLDER_APP_ID);
        assert_eq!(github.pace.burst, 10);
        assert_eq!(github.queue_bytes, crate::config::DEFAULT_QUEUE_BYTES);
        assert!(
            matches!(key, PrivateKeySource::File(p) if p == Path::new("/etc/rowbranch/app.pem"))
        );
        let route = &config.routes[0];
        assert_eq!(route.slug_max_len, 40);
        assert_eq!(route.events, vec![EventKind::Insert]);
        assert_eq!(
            route.payload_template,
            Some(PayloadTemplateSource::File(
                "/etc/rowbranch/payload.json.j2".into()
            )),
            "the config uses the payload template written beside it"
        );
        assert_eq!(config.webhook.respond_within, Duration::from_millis(800));
        assert_eq!(
            route.intake,
            Intake::Webhook,
            "a webhook route, which has no hourly bound"
        );
    }

    #[test]
    fn the_queue_config_bounds_the_rows_an_hour() {
        let intake = Intake::Pgmq {
            max_rows_per_hour: Some(60),
        };
        let ctx = SetupContext {
            intake,
            ..SetupContext::example()
        };
        let text = render("rowbranch.toml", &ctx).unwrap();
        let config =
            Config::parse(&text, Path::new("/etc/rowbranch/rowbranch.toml"), &|_| None).unwrap();
        assert_eq!(config.routes[0].intake, intake);
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
                ..SetupContext::example()
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
            ..SetupContext::example()
        };
        assert_eq!(ctx.check(), Ok(()));
        for (name, _) in FILES {
            render(name, &ctx).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        }
    }

    #[test]
    fn a_toml_string_reads_back_as_the_same_text() {
        for value in [
            "plain",
            "a\"b",
            "back\\slash",
            "'single'",
            "tab\there",
            "日本",
        ] {
            let line = format!("v = {}", toml_string(value.to_owned()));
            let parsed: toml::Table = toml::from_str(&line).unwrap();
            assert_eq!(parsed["v"].as_str(), Some(value), "{line}");
        }
    }
}
