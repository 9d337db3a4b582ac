//! `rowbranch init`: writes the setup files filled in for one repository and table, and prints
//! the steps that remain; `--manifest-code` finishes creating the GitHub App.

use std::path::Path;

use anyhow::{anyhow, Context};

use crate::cli::InitArgs;
use crate::config::process_env;
use crate::forge::github::convert_manifest;
use crate::identity::{BranchPrefix, EventType, RepoName};
use crate::templates::setup::{render, SetupContext};
use crate::webhook::auth::generate_secret;
use crate::Failure;

/// GitHub refuses App names longer than this.
const MAX_APP_NAME: usize = 34;

/// Where each setup file goes in the folder `init` writes.
const OUTPUTS: &[(&str, &str)] = &[
    ("rowbranch.toml", "rowbranch.toml"),
    ("workflow.yml", "workflow.yml"),
    ("supabase.sql", "supabase.sql"),
    ("app-manifest.json", "app-manifest.json"),
    ("payload.json.j2", "payload.json.j2"),
    ("create-app.html", "create-app.html"),
];

/// The secret's file: read by the shell (`set -a; . ./rowbranch.env`), readable by its owner.
const ENV_FILE: &str = "rowbranch.env";

pub async fn run(args: InitArgs) -> Result<(), Failure> {
    match &args.manifest_code {
        Some(code) => finish_app(&args, code).await,
        None => write_setup(&args),
    }
}

fn usage(message: impl Into<String>) -> Failure {
    Failure::Usage(anyhow!(message.into()))
}

fn context(args: &InitArgs) -> Result<SetupContext, Failure> {
    let repo_arg = args.repo.as_deref().ok_or_else(|| {
        usage("--repo OWNER/NAME is required: the repository the work happens in")
    })?;
    let repo = RepoName::parse(repo_arg).map_err(|e| usage(format!("--repo: {e}")))?;
    let url = args
        .url
        .as_deref()
        .ok_or_else(|| usage("--url PUBLIC_URL is required: where Supabase reaches rowbranch, e.g. https://hooks.example.com"))?
        .trim_end_matches('/');
    if !(url.starts_with("https://") || url.starts_with("http://"))
        || url.contains(char::is_whitespace)
    {
        return Err(usage(format!("--url `{url}` is not an http(s) URL")));
    }
    BranchPrefix::parse(&args.branch_prefix).map_err(|e| usage(format!("--branch-prefix: {e}")))?;
    EventType::parse(&args.event_type).map_err(|e| usage(format!("--event-type: {e}")))?;
    let app_name = args
        .app_name
        .clone()
        .unwrap_or_else(|| format!("rowbranch-{}", repo.owner()));
    let app_name: String = app_name.chars().take(MAX_APP_NAME).collect();
    let app_slug = slug::slugify(&app_name);
    if app_slug.is_empty() {
        return Err(usage("--app-name needs at least one letter or digit"));
    }
    Ok(SetupContext {
        owner: repo.owner().to_owned(),
        repo: repo.to_string(),
        url: url.to_owned(),
        app_name,
        app_slug,
        schema: args.schema.clone(),
        table: args.table.clone(),
        id_column: args.id_column.clone(),
        text_column: args.text_column.clone(),
        branch_prefix: args.branch_prefix.clone(),
        event_type: args.event_type.clone(),
        webhook_secret: Some(generate_secret().context("no randomness for a secret")?),
    })
}

fn write_setup(args: &InitArgs) -> Result<(), Failure> {
    let ctx = context(args)?;
    let dir = &args.dir;
    let mut names: Vec<&str> = OUTPUTS.iter().map(|(_, out)| *out).collect();
    names.push(ENV_FILE);
    if !args.force {
        let existing: Vec<&str> = names
            .iter()
            .copied()
            .filter(|name| dir.join(name).exists())
            .collect();
        if !existing.is_empty() {
            return Err(usage(format!(
                "{} already has {}: pass --force to overwrite, or choose another --dir",
                dir.display(),
                existing.join(", ")
            )));
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (template, out) in OUTPUTS {
        let text = render(template, &ctx)?;
        // The SQL carries the webhook secret: readable by its owner only.
        write(&dir.join(out), &text, *out == "supabase.sql")?;
    }
    let secret = ctx.webhook_secret.as_deref().unwrap_or_default();
    write(
        &dir.join(ENV_FILE),
        &format!("# rowbranch's webhook secret; the same is in supabase.sql. Keep both private.\nROWBRANCH_WEBHOOK_SECRET={secret}\n"),
        true,
    )?;
    println!("wrote to {}:", dir.display());
    for name in &names {
        println!("  {name}");
    }
    print_next_steps(dir, &ctx);
    Ok(())
}

fn print_next_steps(dir: &Path, ctx: &SetupContext) {
    let d = dir.display();
    let repo = &ctx.repo;
    println!(
        "\nnext steps, in order:
  1. Create the GitHub App: open {d}/create-app.html in a browser and press the button; GitHub
     then sends you to {url}/?code=…: run  rowbranch init --dir {d} --manifest-code THE_CODE
     (it writes {d}/app.pem and the App's id into {d}/rowbranch.toml).
  2. Install the App on {repo}: the App's page on GitHub → Install App → only {repo}.
  3. Give rowbranch its environment where it runs: the variables in {d}/{ENV_FILE}
     (ROWBRANCH_WEBHOOK_SECRET), and the key {d}/app.pem (or GITHUB_APP_PRIVATE_KEY).
  4. Add the workflow's secret to {repo}: Settings → Secrets and variables → Actions →
     ANTHROPIC_API_KEY.
  5. Allow the workflow to open pull requests: {repo} Settings → Actions → General →
     \"Allow GitHub Actions to create and approve pull requests\".
  6. Commit {d}/workflow.yml to {repo}'s default branch as .github/workflows/rowbranch.yml.
  7. In Supabase, enable Database Webhooks (Database → Webhooks), then run {d}/supabase.sql
     in the SQL editor: it posts every INSERT on {schema}.{table} to {url}/webhook with the secret.
  8. Start rowbranch (rowbranch serve --config {d}/rowbranch.toml) and check everything:
     rowbranch doctor --config {d}/rowbranch.toml",
        url = ctx.url,
        schema = ctx.schema,
        table = ctx.table,
    );
}

async fn finish_app(args: &InitArgs, code: &str) -> Result<(), Failure> {
    let api_url = args
        .api_url
        .clone()
        .or_else(|| process_env("GITHUB_API_URL"))
        .unwrap_or_else(|| "https://api.github.com".into());
    let dir = &args.dir;
    let key_path = dir.join("app.pem");
    if key_path.exists() && !args.force {
        return Err(usage(format!(
            "{} exists: pass --force to replace it",
            key_path.display()
        )));
    }
    let app = convert_manifest(api_url.trim_end_matches('/'), code)
        .await
        .context("creating the App from the manifest failed")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write(&key_path, &app.pem, true)?;
    let config = dir.join("rowbranch.toml");
    let set = set_app_id(&config, app.id)?;
    println!(
        "created the GitHub App {} (id {}){}",
        app.slug.as_deref().unwrap_or(&app.name),
        app.id,
        app.slug
            .as_deref()
            .map(|s| format!(": https://github.com/apps/{s}"))
            .unwrap_or_default()
    );
    println!("  wrote {} (readable by you only)", key_path.display());
    if set {
        println!("  set app_id = {} in {}", app.id, config.display());
    } else {
        println!(
            "  no {} to update: set GITHUB_APP_ID={}",
            config.display(),
            app.id
        );
    }
    println!("next: install the App on your repository (the App's page → Install App), then run rowbranch doctor");
    Ok(())
}

/// Replaces the `app_id = …` line of the config's `[github]` table; false when there is no
/// config file.
fn set_app_id(config: &Path, id: u64) -> Result<bool, Failure> {
    let Ok(text) = std::fs::read_to_string(config) else {
        return Ok(false);
    };
    let mut in_github = false;
    let mut done = false;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with('[') {
                in_github = trimmed.starts_with("[github]");
            }
            if in_github && !done && trimmed.starts_with("app_id") {
                done = true;
                let comment = line.find('#').map(|at| &line[at..]).unwrap_or("");
                return format!("app_id = {id:<24} {comment}").trim_end().to_owned();
            }
            line.to_owned()
        })
        .collect();
    if !done {
        return Err(Failure::Runtime(anyhow!(
            "{} has no app_id in [github]: add app_id = {id}",
            config.display()
        )));
    }
    write(config, &(lines.join("\n") + "\n"), false)?;
    Ok(true)
}

fn write(path: &Path, text: &str, private: bool) -> Result<(), Failure> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    #[cfg(unix)]
    if private {
        // An existing file keeps its mode when opened: narrow it too.
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("cannot restrict {}", path.display()))?;
    }
    use std::io::Write;
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
