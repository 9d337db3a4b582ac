//! The setup files `rowbranch init` writes: the target repository's workflow, the Supabase
//! triggers, the GitHub App manifest and the page that creates the App, the payload template
//! and the config, each embedded in the binary and filled in from what the user told `init`.
//!
//! They are minijinja templates with `[[ … ]]` for values and `[% … %]` for blocks, so that
//! GitHub's own `${{ … }}` expressions in the workflow pass through untouched. Every value is
//! quoted for the format it lands in (SPEC §7): the page is HTML-escaped and the manifest
//! JSON-escaped by the engine itself, values in the workflow go through `tojson` (a JSON string
//! is a YAML double-quoted scalar) but for `init --refuse-path`'s lines of a literal block,
//! which have no escapes and no spaces around them, values in the config through `toml` (a
//! TOML string), and
//! the SQL quotes its identifiers and literals itself. What no quoting can make safe — a line
//! break in a comment, an invisible character that makes a name read as another — is refused
//! by [`SetupContext::check`] before anything is rendered.

use anyhow::{anyhow, Context};
use minijinja::syntax::SyntaxConfig;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Serialize;

use super::actions::{self, ActionsSetup};
use crate::config::{Intake, DEFAULT_MAX_TURNS, DEFAULT_WORK_TIMEOUT_MINUTES};

/// Each setup file: its name in `templates/` (and in the folder `init` writes) and its text.
pub const FILES: &[(&str, &str)] = &[
    ("workflow.yml", include_str!("../../templates/workflow.yml")),
    (
        "supabase-vault.sql",
        include_str!("../../templates/supabase-vault.sql"),
    ),
    ("supabase.sql", include_str!("../../templates/supabase.sql")),
    (
        "supabase-queue.sql",
        include_str!("../../templates/supabase-queue.sql"),
    ),
    (
        "app-manifest.json",
        include_str!("../../templates/app-manifest.json"),
    ),
    (
        "payload.json.j2",
        include_str!("../../templates/payload.json.j2"),
    ),
    (
        "rowbranch.toml",
        include_str!("../../templates/rowbranch.toml"),
    ),
    (
        "create-app.html",
        include_str!("../../templates/create-app.html"),
    ),
    (
        "rowbranch-drain.yml",
        include_str!("../../templates/rowbranch-drain.yml"),
    ),
    (
        "supabase-kick.sql",
        include_str!("../../templates/supabase-kick.sql"),
    ),
];

/// The `app_id` the config carries until `rowbranch init --manifest-code` sets the real one.
pub const PLACEHOLDER_APP_ID: u64 = 123456;

/// What kind of GitHub account owns the repository, and so the App: a private App can be
/// installed only on the account that owns it.
/// (https://docs.github.com/apps/creating-github-apps/registering-a-github-app/making-a-github-app-public-or-private)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnerKind {
    User,
    Organization,
}

/// Where rowbranch runs (`init --host`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Host {
    /// `serve`, always on, as a GitHub App.
    Server,
    /// `rowbranch drain` in the target repository's GitHub Actions, with the job's token.
    Actions,
}

/// What the setup files are filled in with.
#[derive(Debug, Clone, Serialize)]
pub struct SetupContext {
    /// `owner/name` of the target repository.
    pub repo: String,
    pub owner: String,
    pub owner_kind: OwnerKind,
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
    pub host: Host,
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
    /// Hosts the sandbox lets Claude's commands reach besides api.anthropic.com (`init
    /// --allow-host`).
    pub allow_hosts: Vec<String>,
    /// Paths the finish job refuses besides its own list (`init --refuse-path`).
    pub refuse_paths: Vec<String>,
}

/// Why a value cannot go into the setup files.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    #[error(
        "{field}: character {position} is U+{code:04X}, a control or invisible character; \
         only printable text can be written into the setup files"
    )]
    Unprintable {
        /// The field of [`SetupContext`], which is also the name of `init`'s flag.
        field: &'static str,
        /// 1-based, in characters.
        position: usize,
        code: u32,
    },
}

impl SetupContext {
    /// Example values, for the documentation's own checks.
    pub fn example() -> SetupContext {
        SetupContext {
            repo: "acme/app".into(),
            owner: "acme".into(),
            owner_kind: OwnerKind::Organization,
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
            host: Host::Server,
            actions: ActionsSetup::example(),
            events: vec!["INSERT".into()],
            queue: "rowbranch".into(),
            dead_letter: "rowbranch_dead".into(),
            max_turns: DEFAULT_MAX_TURNS,
            work_timeout_minutes: DEFAULT_WORK_TIMEOUT_MINUTES,
            allow_hosts: Vec::new(),
            refuse_paths: Vec::new(),
        }
    }

    /// Refuses a value that no quoting makes safe in every file: see [`refused`].
    pub fn check(&self) -> Result<(), SetupError> {
        let fields: [(&'static str, &str); 15] = [
            ("repo", &self.repo),
            ("owner", &self.owner),
            ("url", &self.url),
            ("app_name", &self.app_name),
            ("app_slug", &self.app_slug),
            ("schema", &self.schema),
            ("table", &self.table),
            ("id_column", &self.id_column),
            ("text_column", &self.text_column),
            ("branch_prefix", &self.branch_prefix),
            ("event_type", &self.event_type),
            ("queue", &self.queue),
            ("dead_letter", &self.dead_letter),
            (
                "webhook_secret",
                self.webhook_secret.as_deref().unwrap_or_default(),
            ),
            (
                "bearer_secret",
                self.bearer_secret.as_deref().unwrap_or_default(),
            ),
        ];
        let lists = (self
            .allow_hosts
            .iter()
            .map(|host| ("allow_host", host.as_str())))
        .chain(
            self.refuse_paths
                .iter()
                .map(|path| ("refuse_path", path.as_str())),
        );
        for (field, value) in fields.into_iter().chain(self.actions.texts()).chain(lists) {
            if let Some((at, c)) = value.chars().enumerate().find(|(_, c)| refused(*c)) {
                return Err(SetupError::Unprintable {
                    field,
                    position: at + 1,
                    code: c as u32,
                });
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
    ctx.check()?;
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
        drain_workflow => actions::DRAIN_WORKFLOW_FILE,
        kick_url => setup.kick_url(&ctx.repo),
        kick_trigger => format!("{}{}", actions::KICK_TRIGGER_PREFIX, ctx.queue),
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
            route.max_rows_per_hour, None,
            "a webhook route has no hourly bound"
        );
    }

    #[test]
    fn the_queue_config_bounds_the_rows_an_hour() {
        let ctx = SetupContext {
            intake: Intake::Pgmq,
            ..SetupContext::example()
        };
        let text = render("rowbranch.toml", &ctx).unwrap();
        let config =
            Config::parse(&text, Path::new("/etc/rowbranch/rowbranch.toml"), &|_| None).unwrap();
        assert_eq!(config.routes[0].max_rows_per_hour, Some(60));
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
            assert_eq!(
                err,
                SetupError::Unprintable {
                    field: "table",
                    position: 2,
                    code
                }
            );
            assert!(
                err.to_string().starts_with("table: character 2 is U+"),
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
