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
//! TOML string), and the SQL quotes its identifiers and literals itself. What no quoting can make safe — a line
//! break in a comment, an invisible character that makes a name read as another — is refused
//! by [`SetupContext::check`] before anything is rendered.

use std::path::Path;

use anyhow::{anyhow, Context};
use minijinja::syntax::SyntaxConfig;
use minijinja::{context, AutoEscape, Environment, UndefinedBehavior, Value};
use serde::Serialize;

use super::actions::{self, ActionsSetup};
use crate::cli::{HostArg, OwnerType};
use crate::cmd::doctor::{DRAIN_WORKFLOW_FILE, KICK_SECRET, KICK_TRIGGER_PREFIX};
use crate::config::env::ENV_FILE;
use crate::config::{Intake, RunWhen};

/// The setup files, each embedded under its name in `templates/` (and in the folder `init`
/// writes), with its text; in the order `init` names them.
macro_rules! setup_files {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../../../templates/", $name)))),*]
    };
}

pub const FILES: &[(&str, &str)] = setup_files![
    "rowbranch.toml",
    "workflow.yml",
    "rowbranch-drain.yml",
    "app-manifest.json",
    "payload.json.j2",
    "create-app.html",
    "supabase-vault.sql",
    "supabase.sql",
    "rowbranch.env",
    "supabase-queue.sql",
    "supabase-kick.sql",
];

/// The steps `init` prints once the files are written, filled in from the same values.
const STEPS: &str = include_str!("steps.txt");

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
    /// The App's id once `init --manifest-code` created it; until then the config holds a
    /// placeholder and the steps start with creating the App.
    pub app_id: Option<u64>,
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
    /// The drain workflow's and the kick's values, with `host = actions`.
    pub actions: Option<ActionsSetup>,
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
    /// The route's `sweep_from`: when `init` first ran for this directory, kept by a re-run.
    pub sweep_from: String,
    /// The route's gate (`--run-when`): the config's `run_when`, the events INSERT and UPDATE,
    /// and triggers that fire on the UPDATE of its column.
    pub run_when: Option<RunWhen>,
    /// Hosts the sandbox lets Claude's commands reach besides api.anthropic.com (`init
    /// --allow-host`).
    pub allow_hosts: Vec<String>,
    /// Paths the finish job refuses besides its own list (`init --refuse-path`).
    pub refuse_paths: Vec<String>,
}

impl SetupContext {
    /// The files this setup writes, by name.
    pub fn outputs(&self) -> Vec<&'static str> {
        let (app, webhook) = (self.host == HostArg::Server, self.intake == Intake::Webhook);
        let kick = self.actions.as_ref().is_some_and(|setup| setup.kick);
        let writes = |name: &&str| match *name {
            "app-manifest.json" | "payload.json.j2" | "create-app.html" => app,
            "supabase-vault.sql" | "supabase.sql" | ENV_FILE => webhook,
            "supabase-queue.sql" => !webhook,
            DRAIN_WORKFLOW_FILE => !app,
            "supabase-kick.sql" => kick,
            _ => true,
        };
        FILES.iter().map(|(name, _)| *name).filter(writes).collect()
    }

    /// Refuses a value that no quoting makes safe in every file (see [`refused`]), naming the
    /// flag it came from (the field's name, `-` for `_`) and the character. The drain's values
    /// need no look: their own checks (a URL, hexadecimal digits, a branch name) let only
    /// printable ASCII through.
    pub fn check(&self) -> Result<(), String> {
        // Every text field by its name, as the templates see them.
        let json = serde_json::to_value(self).map_err(|e| e.to_string())?;
        for (field, value) in json.as_object().into_iter().flatten() {
            // A list holds a repeatable flag's values (`--allow-host`), its field in the plural.
            let (flag, values) = match value {
                serde_json::Value::Array(items) => {
                    (field.strip_suffix('s').unwrap_or(field), &items[..])
                }
                _ => (field.as_str(), std::slice::from_ref(value)),
            };
            for value in values.iter().filter_map(|value| value.as_str()) {
                if let Some((at, c)) = value.chars().enumerate().find(|(_, c)| refused(*c)) {
                    return Err(format!(
                        "--{}: character {} is U+{:04X}, a control or invisible character; \
                         only printable text can be written into the setup files",
                        flag.replace('_', "-"),
                        at + 1,
                        c as u32
                    ));
                }
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
    let (_, source) = (FILES.iter().find(|(file, _)| *file == name))
        .ok_or_else(|| anyhow!("no setup template named {name}"))?;
    if name.ends_with(".j2") {
        // The payload template is rendered per row, by the server: it is written as it is.
        ctx.check().map_err(|e| anyhow!(e))?;
        return Ok((*source).to_owned());
    }
    let page = match name {
        // The page posts the manifest, so it carries it (HTML-escaped where it is printed).
        "create-app.html" => context! { manifest => render("app-manifest.json", ctx)? },
        _ => context! {},
    };
    fill(name, source, ctx, page)
}

/// The steps that remain after `init` wrote the files into `dir`, in the order that works.
pub fn steps(dir: &Path, ctx: &SetupContext) -> anyhow::Result<String> {
    let values = context! { dir => dir.display().to_string(), own_commit => actions::OWN_COMMIT };
    fill("steps.txt", STEPS, ctx, values)
}

/// `source` filled in from `ctx`, `more` and what the files compute from them.
fn fill(name: &str, source: &str, ctx: &SetupContext, more: Value) -> anyhow::Result<String> {
    ctx.check().map_err(|e| anyhow!(e))?;
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
    env.set_auto_escape_callback(|name| match name.rsplit_once('.') {
        Some((_, "html")) => AutoEscape::Html,
        Some((_, "json")) => AutoEscape::Json,
        _ => AutoEscape::None,
    });
    env.add_filter("toml", toml_string);
    env.add_template(name, source)
        .with_context(|| format!("templates/{name}"))?;
    let drain = ctx.actions.as_ref().map(|setup| setup.values(&ctx.repo));
    let names = context! {
        max_time_minutes => actions::DRAIN_MAX_TIME_MINUTES,
        config_dir => actions::CONFIG_DIR,
        config_path => actions::CONFIG_PATH,
        ca_path => actions::CA_PATH,
        database_url_secret => actions::DATABASE_URL_SECRET,
        drain_workflow => DRAIN_WORKFLOW_FILE,
        kick_secret => KICK_SECRET,
        kick_trigger => format!("{KICK_TRIGGER_PREFIX}{}", ctx.queue),
        env_file => ENV_FILE,
        // The gate as the config writes it, and its value as JSON text, which the SQL files
        // compare each row's column with (`to_jsonb(new.column) = '…'::jsonb`): one comparison
        // whatever the column's type, the same the sweep makes.
        run_when_toml => ctx.run_when.as_ref().map(|gate| format!(
            "{{ column = {}, equals = {} }}",
            toml_string(gate.column.clone()),
            toml::Value::try_from(&gate.equals).map_or_else(|_| "\"\"".into(), |v| v.to_string())
        )),
        equals_json => ctx.run_when.as_ref().map(|gate| gate.equals.to_string()),
    };
    let values = context! {
        ..names,
        ..more,
        ..drain.unwrap_or_default(),
        ..Value::from_serialize(ctx)
    };
    env.get_template(name)
        .and_then(|template| template.render(values))
        .with_context(|| format!("templates/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
