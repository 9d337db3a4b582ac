//! `rowbranch init`: writes the setup files filled in for one repository and table, and prints
//! the steps that remain; `--manifest-code` finishes creating the GitHub App; `--host actions`
//! writes the setup that runs rowbranch in the repository's GitHub Actions ([`actions`]).

mod actions;

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};

use super::Failure;
use crate::cli::{HostArg, InitArgs, IntakeArg, OwnerType};
use crate::config::env::ENV_FILE;
use crate::config::{process_env, Intake};
use crate::doctor::quietly;
use crate::forge::github::{account_type, convert_manifest};
use crate::identity::{BranchPrefix, EventType, QueueName, RepoName};
use crate::templates::actions::ActionsSetup;
use crate::templates::setup::{render, Host, OwnerKind, SetupContext, SetupError};
use crate::templates::workflow::{allows_bot, bot_login, claude_steps, set_allowed_bots};
use crate::webhook::auth::{generate_bearer_secret, generate_secret};

/// GitHub refuses App names longer than this.
const MAX_APP_NAME: usize = 34;

/// PostgreSQL cuts identifiers longer than this many bytes (NAMEDATALEN - 1), so a longer name
/// would silently be another one
/// (https://www.postgresql.org/docs/current/sql-syntax-lexical.html#SQL-SYNTAX-IDENTIFIERS).
const MAX_IDENTIFIER_BYTES: usize = 63;

/// The setup files `init` writes for either intake, each in the folder under its own name.
const OUTPUTS: &[&str] = &[
    "rowbranch.toml",
    "workflow.yml",
    "app-manifest.json",
    "payload.json.j2",
    "create-app.html",
];

/// The Supabase SQL for each intake.
const WEBHOOK_SQL: &[&str] = &["supabase-vault.sql", "supabase.sql"];
const QUEUE_SQL: &[&str] = &["supabase-queue.sql"];

/// Where GitHub sends the browser after creating the App, for the queue intake without
/// `--url`: this machine, at `serve`'s default address. Nothing answers there while the App is
/// created (`serve` needs its key and the database first), so the steps say to copy the code
/// from the address bar, as for the webhook.
const LOCAL_URL: &str = "http://127.0.0.1:8080";

/// The files that carry a webhook secret: readable by their owner only.
const PRIVATE: &[&str] = &["supabase-vault.sql", "supabase.sql"];

pub async fn run(args: InitArgs) -> Result<(), Failure> {
    match &args.manifest_code {
        Some(code) => finish_app(&args, code).await,
        None => write_setup(&args).await,
    }
}

/// The folder `init` writes to: `--dir`, else the current folder, or `setup` for
/// `--host actions`, whose files are copied into the repository from there.
fn out_dir(args: &InitArgs) -> PathBuf {
    match (&args.dir, args.host) {
        (Some(dir), _) => dir.clone(),
        (None, HostArg::Server) => PathBuf::from("."),
        (None, HostArg::Actions) => PathBuf::from("setup"),
    }
}

fn usage(message: impl Into<String>) -> Failure {
    Failure::Usage(anyhow!(message.into()))
}

fn api_url(args: &InitArgs) -> String {
    args.api_url
        .clone()
        .or_else(|| process_env("GITHUB_API_URL"))
        .unwrap_or_else(|| "https://api.github.com".into())
        .trim_end_matches('/')
        .to_owned()
}

/// A name PostgreSQL keeps as it is given: not blank (unless `blank_ok`), at most 63 bytes.
fn identifier(flag: &str, value: &str, blank_ok: bool) -> Result<(), Failure> {
    if value.trim().is_empty() && !(blank_ok && value.is_empty()) {
        return Err(usage(format!(
            "{flag} is empty: name the column or table as PostgreSQL spells it"
        )));
    }
    if value.len() > MAX_IDENTIFIER_BYTES {
        return Err(usage(format!(
            "{flag} is {} bytes long; PostgreSQL names are at most {MAX_IDENTIFIER_BYTES} bytes",
            value.len()
        )));
    }
    Ok(())
}

/// `--allow-host`: a host name as the sandbox's proxy compares them, dot-separated labels of
/// letters, digits and `-`, with `*.` in front for every subdomain; lower-cased.
fn allowed_host(raw: &str) -> Result<String, Failure> {
    let host = raw.to_ascii_lowercase();
    let name = host.strip_prefix("*.").unwrap_or(&host);
    let label = |part: &str| {
        (1..=63).contains(&part.len())
            && !part.starts_with('-')
            && !part.ends_with('-')
            && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if name.len() > 253 || !name.split('.').all(label) {
        return Err(usage(format!(
            "--allow-host `{}` is not a host name: give one such as index.crates.io, or \
             *.example.com for its subdomains, without a scheme, port or path",
            crate::identity::excerpt(raw)
        )));
    }
    Ok(host)
}

/// `--refuse-path`: a path from the repository's root, one line of the finish job's list.
fn refused_path(raw: &str) -> Result<String, Failure> {
    let outside = raw.starts_with(['/', ':']) || raw.split('/').any(|part| part == "..");
    if raw.trim().is_empty() || raw.trim() != raw || outside {
        return Err(usage(format!(
            "--refuse-path `{}` is not a path from the repository's root: write it as git \
             shows it, e.g. deploy/ or config/ci.yml, without a leading / or :, .. or spaces \
             around it",
            crate::identity::excerpt(raw)
        )));
    }
    Ok(raw.to_owned())
}

/// Where Supabase reaches rowbranch: an http(s) URL with a host, to which `/webhook` is added.
fn public_url(raw: &str) -> Result<String, Failure> {
    let url = raw.trim_end_matches('/');
    if url.contains('#') || url.contains('?') {
        return Err(usage(format!(
            "--url `{url}` has a query or a fragment: give the base URL, the trigger adds /webhook"
        )));
    }
    let uri: http::Uri = url
        .parse()
        .map_err(|e| usage(format!("--url `{url}` is not a URL: {e}")))?;
    if !matches!(uri.scheme_str(), Some("https" | "http")) {
        return Err(usage(format!("--url `{url}` is not an http(s) URL")));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(usage(format!("--url `{url}` has no host")));
    }
    Ok(url.to_owned())
}

/// Asks GitHub whether `owner` is a user or an organization, unless `--owner-type` says so.
async fn owner_kind(args: &InitArgs, owner: &str) -> Result<OwnerKind, Failure> {
    match args.owner_type {
        Some(OwnerType::User) => return Ok(OwnerKind::User),
        Some(OwnerType::Organization) => return Ok(OwnerKind::Organization),
        None => {}
    }
    let api = api_url(args);
    match quietly(account_type(&api, owner)).await {
        Ok(Some(kind)) if kind == "User" => Ok(OwnerKind::User),
        Ok(Some(kind)) if kind == "Organization" => Ok(OwnerKind::Organization),
        Ok(Some(other)) => Err(usage(format!(
            "--repo: GitHub says {owner} is an account of type {other}, which cannot own a GitHub App"
        ))),
        Ok(None) => Err(usage(format!("--repo: GitHub has no account named {owner}"))),
        Err(e) => Err(Failure::Runtime(anyhow!(
            "could not ask GitHub at {api} whether {owner} is a user or an organization: {e}; \
             say which with --owner-type user or --owner-type organization"
        ))),
    }
}

async fn context(args: &InitArgs) -> Result<SetupContext, Failure> {
    let repo_arg = args.repo.as_deref().ok_or_else(|| {
        usage("--repo OWNER/NAME is required: the repository the work happens in")
    })?;
    let repo = RepoName::parse(repo_arg).map_err(|e| usage(format!("--repo: {e}")))?;
    let host = match args.host {
        HostArg::Server => {
            actions::refuse_actions_flags(args)?;
            Host::Server
        }
        HostArg::Actions => {
            actions::refuse_server_flags(args)?;
            Host::Actions
        }
    };
    let intake = match (args.intake, host) {
        (Some(IntakeArg::Pgmq), _) | (None, Host::Actions) => Intake::Pgmq,
        (Some(IntakeArg::Webhook), _) | (None, Host::Server) => Intake::Webhook,
    };
    let url = match (args.url.as_deref(), intake) {
        (Some(url), _) => public_url(url)?,
        (None, Intake::Pgmq) => LOCAL_URL.to_owned(),
        (None, Intake::Webhook) => return Err(usage(
            "--url PUBLIC_URL is required: where Supabase reaches rowbranch, e.g. https://hooks.example.com \
             (or --intake pgmq, where rowbranch reads a queue and needs no public address)",
        )),
    };
    let dead_letter = QueueName::parse(&args.queue).and_then(|queue| queue.default_dead_letter());
    let Ok(dead_letter) = dead_letter else {
        return Err(usage(format!(
            "--queue `{}`: a queue's name (and its dead-letter queue's, NAME_dead) is 1 to 47 \
             of a-z, 0-9 and _, not starting with a digit",
            crate::identity::excerpt(&args.queue)
        )));
    };
    BranchPrefix::parse(&args.branch_prefix).map_err(|e| usage(format!("--branch-prefix: {e}")))?;
    EventType::parse(&args.event_type).map_err(|e| usage(format!("--event-type: {e}")))?;
    identifier("--schema", &args.schema, false)?;
    identifier("--table", &args.table, false)?;
    identifier("--id-column", &args.id_column, false)?;
    identifier("--text-column", &args.text_column, true)?;
    let app_name = match &args.app_name {
        Some(name) if name.chars().count() > MAX_APP_NAME => {
            return Err(usage(format!(
                "--app-name is {} characters long; GitHub allows at most {MAX_APP_NAME}",
                name.chars().count()
            )))
        }
        Some(name) => name.clone(),
        None => format!("rowbranch-{}", repo.owner())
            .chars()
            .take(MAX_APP_NAME)
            .collect(),
    };
    let mut app_slug = slug::slugify(&app_name);
    if app_slug.is_empty() {
        return Err(usage("--app-name needs at least one letter or digit"));
    }
    let actions = match host {
        Host::Server => ActionsSetup::example(),
        Host::Actions => {
            // No App: the drain job's GITHUB_TOKEN sends the dispatch, and its bot is the
            // work workflow's actor.
            app_slug = crate::templates::actions::ACTIONS_BOT.to_owned();
            actions::setup(args, &api_url(args))?
        }
    };
    let allow_hosts = args.allow_host.iter().map(|host| allowed_host(host));
    let refuse_paths = args.refuse_path.iter().map(|path| refused_path(path));
    let mut ctx = SetupContext {
        owner: repo.owner().to_owned(),
        owner_kind: OwnerKind::User,
        repo: repo.to_string(),
        url,
        app_name,
        app_slug,
        schema: args.schema.clone(),
        table: args.table.clone(),
        id_column: args.id_column.clone(),
        text_column: args.text_column.clone(),
        branch_prefix: args.branch_prefix.clone(),
        event_type: args.event_type.clone(),
        // Two secrets, never one for both: the signing key of supabase-vault.sql, and the bearer
        // secret supabase.sql writes into a header, where a signing key would stop being one.
        webhook_secret: match intake {
            Intake::Webhook => Some(generate_secret().context("no randomness for a secret")?),
            Intake::Pgmq => None,
        },
        bearer_secret: match intake {
            Intake::Webhook => {
                Some(generate_bearer_secret().context("no randomness for a secret")?)
            }
            Intake::Pgmq => None,
        },
        intake,
        host,
        actions,
        events: vec!["INSERT".into()],
        queue: args.queue.clone(),
        dead_letter: dead_letter.to_string(),
        max_turns: args.max_turns,
        work_timeout_minutes: args.work_timeout_minutes,
        allow_hosts: allow_hosts.collect::<Result<_, _>>()?,
        refuse_paths: refuse_paths.collect::<Result<_, _>>()?,
    };
    // Every value is checked before GitHub is asked anything.
    ctx.check().map_err(
        |SetupError::Unprintable {
             field,
             position,
             code,
         }| {
            usage(format!(
            "--{}: character {position} is U+{code:04X}, a control or invisible character; only \
             printable text can be written into the setup files",
            field.replace('_', "-")
        ))
        },
    )?;
    if host == Host::Server {
        // Only an App needs to know its owner's kind; --host actions asks GitHub nothing.
        ctx.owner_kind = owner_kind(args, repo.owner()).await?;
    }
    Ok(ctx)
}

async fn write_setup(args: &InitArgs) -> Result<(), Failure> {
    let dir = &out_dir(args);
    let mut names: Vec<&str> = match args.host {
        HostArg::Server => OUTPUTS.to_vec(),
        HostArg::Actions => actions::outputs(args),
    };
    match (args.host, args.intake) {
        (HostArg::Actions, _) => {}
        (HostArg::Server, Some(IntakeArg::Pgmq)) => names.extend(QUEUE_SQL),
        (HostArg::Server, Some(IntakeArg::Webhook) | None) => {
            names.extend(WEBHOOK_SQL);
            names.push(ENV_FILE);
        }
    }
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
    let ctx = context(args).await?;
    // Everything is rendered before anything is written.
    let mut files = Vec::with_capacity(names.len());
    for name in names.iter().filter(|name| **name != ENV_FILE) {
        files.push((*name, render(name, &ctx)?));
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (out, text) in &files {
        write(&dir.join(out), text, PRIVATE.contains(out))?;
    }
    if let (Some(signing), Some(bearer)) = (&ctx.webhook_secret, &ctx.bearer_secret) {
        write(&dir.join(ENV_FILE), &env_file(signing, bearer), true)?;
    }
    println!("wrote to {}:", dir.display());
    for name in &names {
        println!("  {name}");
    }
    match (ctx.host, ctx.intake) {
        (Host::Actions, _) => actions::print_steps(dir, &ctx),
        (Host::Server, Intake::Webhook) => print_next_steps(dir, &ctx),
        (Host::Server, Intake::Pgmq) => print_queue_steps(dir, &ctx),
    }
    Ok(())
}

/// `rowbranch.env`: both secrets in `ROWBRANCH_WEBHOOK_SECRET`, saying which is which.
fn env_file(signing: &str, bearer: &str) -> String {
    format!(
        "# rowbranch's webhook secrets, separated by a space. Keep this file and the two SQL files private.
#  1. whsec_…: the signing key supabase-vault.sql keeps in Supabase Vault and signs each
#     delivery with (rowbranch.toml: [webhook] accept = [\"standard-webhooks\"]);
#  2. the other: the bearer secret supabase.sql sends in its Authorization header, taken only
#     when [webhook] accept lists \"bearer\". A whsec_ secret is never taken as a bearer token.
ROWBRANCH_WEBHOOK_SECRET=\"{signing} {bearer}\"
"
    )
}

fn print_next_steps(dir: &Path, ctx: &SetupContext) {
    let d = dir.display();
    let repo = &ctx.repo;
    let owner = match ctx.owner_kind {
        OwnerKind::Organization => format!("the organization {}", ctx.owner),
        OwnerKind::User => format!("your account {} (be signed in as {0})", ctx.owner),
    };
    println!(
        "\nnext steps, in this order: the App first (it gives the id and key rowbranch needs), then
rowbranch running where Supabase reaches it, then the workflow and the trigger that point at it.
  1. Create the GitHub App on {owner}: open {d}/create-app.html in a browser and press the
     button; GitHub then sends you to {url}/?code=…, where nothing answers yet (rowbranch is
     deployed in step 3): copy the code from the address bar (it works once, for an hour) and run
       rowbranch init --dir {d} --manifest-code THE_CODE
     (it writes {d}/app.pem, the App's id into {d}/rowbranch.toml, and the name GitHub gave the
     App into {d}/workflow.yml).
  2. Install the App on {repo}: the App's page on GitHub → Install App → only {repo}.
  3. Deploy rowbranch at {url} and start it (docs/deploy.md), with ROWBRANCH_WEBHOOK_SECRET
     from {d}/{ENV_FILE} (two secrets: the whsec_ signing key of supabase-vault.sql, then the
     bearer secret of supabase.sql) and the key {d}/app.pem in the platform's secret store;
     or, on a machine of your own behind a TLS proxy:
       set -a; . {d}/{ENV_FILE}; set +a; rowbranch serve --config {d}/rowbranch.toml
  4. rowbranch doctor --config {d}/rowbranch.toml: every line ✓ but the workflow's.
  5. Add the workflow's secret to {repo} (Settings → Secrets and variables → Actions →
     ANTHROPIC_API_KEY), and let the workflow open pull requests (Settings → Actions →
     General → \"Allow GitHub Actions to create and approve pull requests\").
  6. Commit {d}/workflow.yml to {repo}'s default branch as .github/workflows/rowbranch.yml.
  7. In Supabase, turn Database Webhooks on (Integrations → Database Webhooks → Enable), then
     run {d}/supabase-vault.sql in the SQL editor: it keeps the signing key in Supabase Vault
     and posts every INSERT on {schema}.{table} to {url}/webhook, signed; rowbranch.toml takes
     only such deliveries ([webhook] accept = [\"standard-webhooks\"]).
     ({d}/supabase.sql is the same trigger as the Dashboard makes it: it sends the bearer
     secret, readable in the trigger's definition, and needs accept = [\"bearer\"].)
  8. rowbranch doctor --config {d}/rowbranch.toml again, until every line is ✓",
        url = ctx.url,
        schema = ctx.schema,
        table = ctx.table,
    );
}

fn print_queue_steps(dir: &Path, ctx: &SetupContext) {
    let d = dir.display();
    let repo = &ctx.repo;
    let owner = match ctx.owner_kind {
        OwnerKind::Organization => format!("the organization {}", ctx.owner),
        OwnerKind::User => format!("your account {} (be signed in as {0})", ctx.owner),
    };
    println!(
        "\nnext steps, in this order: the App first (it gives the id and key rowbranch needs), then
the queue and its trigger, then rowbranch reading it, then the workflow.
  1. Create the GitHub App on {owner}: open {d}/create-app.html in a browser and press the
     button; GitHub then sends you to {url}/?code=…, where nothing answers yet
     (rowbranch starts in step 5, once it has the App's key and the database):
     copy the code from the address bar (it works once, for an hour) and run
       rowbranch init --dir {d} --manifest-code THE_CODE
     (it writes {d}/app.pem, the App's id into {d}/rowbranch.toml, and the name GitHub gave the
     App into {d}/workflow.yml).
  2. Install the App on {repo}: the App's page on GitHub → Install App → only {repo}.
  3. In Supabase, enable Queues (Integrations → Queues), then run {d}/supabase-queue.sql in the
     SQL editor: each INSERT on {schema}.{table} then puts the row into the queue {queue}, in
     the INSERT's own transaction.
  4. Give rowbranch a database role of its own that may read the queues (doctor prints the
     grants), and set DATABASE_URL to it: on Supabase, Connect → Session pooler (or the direct
     connection), with sslmode=verify-full and sslrootcert= the project's CA (Database
     Settings → SSL Configuration).
  5. Start rowbranch anywhere that reaches the database; it needs no inbound port:
       DATABASE_URL=… rowbranch serve --config {d}/rowbranch.toml
     (docs/deploy.md for a platform; the key {d}/app.pem and DATABASE_URL in its secret store).
  6. Add the workflow's secret to {repo} (Settings → Secrets and variables → Actions →
     ANTHROPIC_API_KEY), and let the workflow open pull requests (Settings → Actions →
     General → \"Allow GitHub Actions to create and approve pull requests\").
  7. Commit {d}/workflow.yml to {repo}'s default branch as .github/workflows/rowbranch.yml.
  8. rowbranch doctor --config {d}/rowbranch.toml, until every line is ✓",
        url = ctx.url,
        schema = ctx.schema,
        table = ctx.table,
        queue = ctx.queue,
    );
}

/// A slug as GitHub makes them: lower-case letters, digits and `-`.
fn plausible_slug(slug: &str) -> bool {
    !slug.is_empty()
        && slug
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

async fn finish_app(args: &InitArgs, code: &str) -> Result<(), Failure> {
    let api_url = api_url(args);
    let dir = &out_dir(args);
    let key_path = dir.join("app.pem");
    if key_path.exists() && !args.force {
        return Err(usage(format!(
            "{} exists: pass --force to replace it",
            key_path.display()
        )));
    }
    let app = quietly(convert_manifest(&api_url, code))
        .await
        .context("creating the App from the manifest failed")?;
    // The code worked once and will not again: the key is written before anything else.
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write(&key_path, &app.pem, true)?;
    let config = dir.join("rowbranch.toml");
    let set = set_app_id(&config, app.id)?;
    let slug = app.slug.as_deref().filter(|s| plausible_slug(s));
    println!(
        "created the GitHub App {} (id {}){}",
        slug.unwrap_or(&app.name),
        app.id,
        slug.map(|s| format!(": https://github.com/apps/{s}"))
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
    match slug {
        Some(slug) => name_the_bot(&dir.join("workflow.yml"), slug)?,
        None => println!(
            "  GitHub gave no usable slug for the App: in workflow.yml, set allowed_bots to the \
             App's bot (the App's page shows its name; the bot is NAME[bot])"
        ),
    }
    println!("next: install the App on your repository (the App's page → Install App), then run rowbranch doctor");
    Ok(())
}

/// Makes the workflow's `allowed_bots` name the App GitHub created, whose name (and so slug)
/// the person creating it may have changed on GitHub's page; claude-code-action refuses every
/// run its bot starts otherwise.
fn name_the_bot(path: &Path, slug: &str) -> Result<(), Failure> {
    let bot = bot_login(slug);
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!(
                "  no {} to update: the workflow's allowed_bots must name {bot}",
                path.display()
            );
            return Ok(());
        }
        Err(e) => {
            return Err(Failure::Runtime(
                anyhow!(e).context(format!("cannot read {}", path.display())),
            ))
        }
    };
    let steps = claude_steps(&text).unwrap_or_default();
    if !steps.is_empty() && steps.iter().all(|s| allows_bot(&s.allowed_bots, slug)) {
        println!(
            "  {} lets {bot} start the work (allowed_bots)",
            path.display()
        );
        return Ok(());
    }
    match set_allowed_bots(&text, slug) {
        Ok(rewritten) => {
            write(path, &rewritten, false)?;
            println!(
                "  GitHub named the App {slug}, not as asked: set allowed_bots to {bot} in {}",
                path.display()
            );
        }
        Err(e) => println!(
            "  could not update {} ({e}): set allowed_bots: \"{bot}\" in its claude-code-action step",
            path.display()
        ),
    }
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
