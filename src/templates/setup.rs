//! The setup files `rowbranch init` writes: the target repository's workflow, the Supabase
//! trigger, the GitHub App manifest, the payload template and the config, each embedded in the
//! binary and filled in from what the user told `init`.
//!
//! They are minijinja templates with `[[ … ]]` for values and `[% … %]` for blocks, so that
//! GitHub's own `${{ … }}` expressions in the workflow pass through untouched.

use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

/// Each setup file: its name in `templates/` (and in the folder `init` writes) and its text.
pub const FILES: &[(&str, &str)] = &[
    ("workflow.yml", include_str!("../../templates/workflow.yml")),
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
pub fn render(name: &str, ctx: &SetupContext) -> Result<String, String> {
    let (_, source) = FILES
        .iter()
        .find(|(file, _)| *file == name)
        .ok_or_else(|| format!("no setup template named {name}"))?;
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
        .map_err(|e| e.to_string())?;
    env.set_syntax(syntax);
    env.set_keep_trailing_newline(true);
    let mut values = minijinja::Value::from_serialize(ctx);
    if name == "create-app.html" {
        // The page posts the manifest, so it carries it (HTML-escaped where it is printed).
        let manifest = render("app-manifest.json", ctx)?;
        values = minijinja::context! { manifest => manifest, ..values };
    }
    env.render_str(source, values)
        .map_err(|e| format!("templates/{name}: {e:#}"))
}
