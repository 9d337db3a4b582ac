//! The setup files `rowbranch init` writes: the target repository's workflow, the Supabase
//! triggers, the GitHub App manifest, the payload template and the config, each embedded in the
//! binary and filled in from what the user told `init`.
//!
//! They are minijinja templates with `[[ … ]]` for values and `[% … %]` for blocks, so that
//! GitHub's own `${{ … }}` expressions in the workflow pass through untouched.

use anyhow::{anyhow, Context};
use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

/// Each setup file: its name in `templates/` (and in the folder `init` writes) and its text.
pub const FILES: &[(&str, &str)] = &[
    ("workflow.yml", include_str!("../../templates/workflow.yml")),
    (
        "supabase-vault.sql",
        include_str!("../../templates/supabase-vault.sql"),
    ),
    ("supabase.sql", include_str!("../../templates/supabase.sql")),
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
];

/// What the setup files are filled in with.
#[derive(Debug, Clone, Serialize)]
pub struct SetupContext {
    /// `owner/name` of the target repository.
    pub repo: String,
    pub owner: String,
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
    /// The webhook secret the trigger sends; `None` renders a placeholder.
    pub webhook_secret: Option<String>,
}

impl SetupContext {
    /// Example values, for the documentation's own checks.
    pub fn example() -> SetupContext {
        SetupContext {
            repo: "acme/app".into(),
            owner: "acme".into(),
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
        }
    }
}

/// Renders the setup file `name` (one of [`FILES`]).
pub fn render(name: &str, ctx: &SetupContext) -> anyhow::Result<String> {
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
    let mut values = minijinja::Value::from_serialize(ctx);
    if name == "create-app.html" {
        // The page posts the manifest, so it carries it (HTML-escaped where it is printed).
        let manifest = render("app-manifest.json", ctx)?;
        values = minijinja::context! { manifest => manifest, ..values };
    }
    env.render_str(source, values)
        .with_context(|| format!("templates/{name}"))
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::config::{Config, ForgeSettings, PrivateKeySource};
    use crate::event::EventKind;

    #[test]
    fn the_shipped_example_config_parses_with_the_documented_defaults() {
        let text = render("rowbranch.toml", &SetupContext::example()).unwrap();
        let config =
            Config::parse(&text, Path::new("/etc/rowbranch/rowbranch.toml"), &|_| None).unwrap();
        assert_eq!(config.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(config.reconcile.every, None);
        assert_eq!(config.reconcile.window, Duration::from_secs(48 * 3600));
        let ForgeSettings::Github(github) = &config.forge else {
            panic!("the example uses the github forge");
        };
        assert_eq!(github.app_id, 123456);
        assert_eq!(github.pace.burst, 10);
        assert!(
            matches!(&github.key, PrivateKeySource::File(p) if p == Path::new("/etc/rowbranch/app.pem"))
        );
        let route = &config.routes[0];
        assert_eq!(route.slug_max_len, 40);
        assert_eq!(route.events, vec![EventKind::Insert]);
        assert_eq!(config.webhook.respond_within, Duration::from_millis(800));
    }
}
