//! `rowbranch init`: writes the [`setup`] files filled in for one repository and table, and
//! prints the steps that remain; `--manifest-code` finishes creating the GitHub App;
//! `--host actions` writes the setup that runs rowbranch in the repository's GitHub Actions
//! ([`actions`]).

pub mod actions;
pub mod setup;

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use clap::ValueEnum;

use self::setup::{render, steps, SetupContext};
use super::{usage, Failure};
use crate::cli::{HostArg, InitArgs, IntakeArg, OwnerType};
use crate::cmd::doctor::workflow::{allows_bot, bot_login, claude_steps};
use crate::cmd::doctor::{quietly, ACTIONS_BOT, PLACEHOLDER_APP_ID};
use crate::config::env::ENV_FILE;
use crate::config::{process_env, Intake};
use crate::forge::github::{account_type, convert_manifest};
use crate::identity::{excerpt, BranchPrefix, EventType, QueueName, RepoName};
use crate::webhook::auth::{generate_bearer_secret, generate_secret};

/// GitHub refuses App names longer than this.
const MAX_APP_NAME: usize = 34;

/// PostgreSQL cuts identifiers longer than this many bytes (NAMEDATALEN - 1), so a longer name
/// would silently be another one
/// (https://www.postgresql.org/docs/current/sql-syntax-lexical.html#SQL-SYNTAX-IDENTIFIERS).
const MAX_IDENTIFIER_BYTES: usize = 63;

/// Where GitHub sends the browser after creating the App, for the queue intake without
/// `--url`: this machine, at `serve`'s default address. Nothing answers there while the App is
/// created (`serve` needs its key and the database first), so the steps say to copy the code
/// from the address bar, as for the webhook.
const LOCAL_URL: &str = "http://127.0.0.1:8080";

/// The files that carry a webhook secret: readable by their owner only.
const PRIVATE: &[&str] = &["supabase-vault.sql", "supabase.sql", ENV_FILE];

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
fn public_url(raw: &str) -> Result<(String, http::Uri), Failure> {
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
    Ok((url.to_owned(), uri))
}

/// `--url` as people paste it: the base (`https://hooks.example.com`) or the endpoint itself
/// (`…/webhook`), both meaning the base, to which the trigger adds `/webhook`. Any other path
/// would have the trigger post where `serve` answers 404, so it is refused, naming the path.
fn webhook_base(raw: &str) -> Result<String, Failure> {
    let (url, uri) = public_url(raw)?;
    match uri.path() {
        "" | "/" => Ok(url),
        "/webhook" => Ok(url[..url.len() - "/webhook".len()].to_owned()),
        other => Err(usage(format!(
            "--url `{url}` has the path `{other}`, where rowbranch answers nothing: give the \
             base (e.g. https://hooks.example.com) or the endpoint (https://hooks.example.com/webhook)"
        ))),
    }
}

/// Asks GitHub whether `owner` is a user or an organization, unless `--owner-type` says so.
async fn owner_kind(args: &InitArgs, owner: &str) -> Result<OwnerType, Failure> {
    if let Some(kind) = args.owner_type {
        return Ok(kind);
    }
    let api = api_url(args);
    match quietly(account_type(&api, owner)).await {
        Ok(Some(kind)) => OwnerType::from_str(&kind, true).map_err(|_| usage(format!(
            "--repo: GitHub says {owner} is an account of type {kind}, which cannot own a GitHub App"
        ))),
        Ok(None) => Err(usage(format!("--repo: GitHub has no account named {owner}"))),
        Err(e) => Err(Failure::Runtime(anyhow!(
            "could not ask GitHub at {api} whether {owner} is a user or an organization: {e}; \
             say which with --owner-type user or --owner-type organization"
        ))),
    }
}

/// The setup's values from the flags, every one checked, and from what a previous run wrote
/// here; the owner's kind is asked of GitHub later, only once nothing stands in the way of
/// writing.
fn context(args: &InitArgs, previous: &PreviousRun) -> Result<SetupContext, Failure> {
    // clap requires --repo unless --manifest-code is given, which does not come here.
    let repo = RepoName::parse(args.repo.as_deref().unwrap_or_default())
        .map_err(|e| usage(format!("--repo: {e}")))?;
    let on_actions = args.host == HostArg::Actions;
    actions::refuse_other_hosts_flags(args, on_actions)?;
    let intake = match (args.intake, on_actions) {
        // The hourly bound templates/rowbranch.toml writes on a queue route.
        (Some(IntakeArg::Pgmq), _) | (None, true) => Intake::Pgmq {
            max_rows_per_hour: Some(60),
        },
        (Some(IntakeArg::Webhook), _) | (None, false) => Intake::Webhook,
    };
    let url = match (args.url.as_deref(), intake) {
        (Some(url), _) => webhook_base(url)?,
        (None, Intake::Pgmq { .. }) => LOCAL_URL.to_owned(),
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
            excerpt(&args.queue)
        )));
    };
    BranchPrefix::parse(&args.branch_prefix).map_err(|e| usage(format!("--branch-prefix: {e}")))?;
    EventType::parse(&args.event_type).map_err(|e| usage(format!("--event-type: {e}")))?;
    identifier("--schema", &args.schema, false)?;
    identifier("--table", &args.table, false)?;
    identifier("--id-column", &args.id_column, false)?;
    identifier("--text-column", &args.text_column, true)?;
    let app_name = args.app_name.clone().unwrap_or_else(|| {
        let name = format!("rowbranch-{}", repo.owner());
        name.chars().take(MAX_APP_NAME).collect()
    });
    if app_name.chars().count() > MAX_APP_NAME {
        return Err(usage(format!(
            "--app-name is {} characters long; GitHub allows at most {MAX_APP_NAME}",
            app_name.chars().count()
        )));
    }
    // No App with --host actions: the drain job's GITHUB_TOKEN sends the dispatch, and its bot
    // is the work workflow's actor.
    let app_slug = match (on_actions, &previous.app_slug) {
        (true, _) => ACTIONS_BOT.to_owned(),
        (false, Some(created)) => created.clone(),
        (false, None) => slug::slugify(&app_name),
    };
    if app_slug.is_empty() {
        return Err(usage("--app-name needs at least one letter or digit"));
    }
    // Two secrets, never one for both: the signing key of supabase-vault.sql, and the bearer
    // secret supabase.sql writes into a header, where a signing key would stop being one.
    // A re-run keeps the ones already in Supabase's triggers and rowbranch's environment.
    let (webhook_secret, bearer_secret) = match (intake, &previous.secrets) {
        (Intake::Pgmq { .. }, _) if args.rotate_secrets => {
            return Err(usage(
                "--rotate-secrets: the queue intake has no webhook secrets to rotate",
            ))
        }
        (Intake::Pgmq { .. }, _) => (None, None),
        (Intake::Webhook, Some((signing, bearer))) if !args.rotate_secrets => {
            (Some(signing.clone()), Some(bearer.clone()))
        }
        (Intake::Webhook, None) if previous.has_secrets && !args.rotate_secrets => {
            return Err(usage(format!(
                "{ENV_FILE} does not hold the two webhook secrets as init writes them \
                 (ROWBRANCH_WEBHOOK_SECRET=\"whsec_… BEARER\", exactly two: more is a rotation \
                 under way), and new ones would not match the triggers made from \
                 supabase-vault.sql or supabase.sql: put that line back (finish a rotation \
                 first, keeping the two the triggers use), or pass --rotate-secrets to make \
                 new secrets"
            )))
        }
        (Intake::Webhook, _) => (
            Some(generate_secret().context("no randomness for a secret")?),
            Some(generate_bearer_secret().context("no randomness for a secret")?),
        ),
    };
    let allow_hosts = args.allow_host.iter().map(|host| allowed_host(host));
    let refuse_paths = args.refuse_path.iter().map(|path| refused_path(path));
    let ctx = SetupContext {
        owner: repo.owner().to_owned(),
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
        webhook_secret,
        bearer_secret,
        intake,
        host: args.host,
        actions: (on_actions.then(|| actions::setup(args, &api_url(args)))).transpose()?,
        events: match args.run_when {
            Some(_) => vec!["INSERT".into(), "UPDATE".into()],
            None => vec!["INSERT".into()],
        },
        queue: args.queue.clone(),
        dead_letter: dead_letter.to_string(),
        max_turns: args.max_turns,
        work_timeout_minutes: args.work_timeout_minutes,
        // Asked of GitHub once nothing stands in the way of writing.
        owner_kind: OwnerType::User,
        app_id: previous.app_id,
        sweep_from: (previous.sweep_from.clone()).unwrap_or_else(crate::config::sweep_from_now),
        run_when: args.run_when.clone(),
        allow_hosts: allow_hosts.collect::<Result<_, _>>()?,
        refuse_paths: refuse_paths.collect::<Result<_, _>>()?,
    };
    ctx.check().map_err(usage)?;
    Ok(ctx)
}

async fn write_setup(args: &InitArgs) -> Result<(), Failure> {
    let dir = &out_dir(args);
    let previous = PreviousRun::read(dir)?;
    let mut ctx = context(args, &previous)?;
    let names = ctx.outputs();
    let existing: Vec<&str> = (names.iter().copied())
        .filter(|name| dir.join(name).exists())
        .collect();
    if !args.force && !existing.is_empty() {
        return Err(usage(format!(
            "{} already has {}: pass --force to overwrite, or choose another --dir",
            dir.display(),
            existing.join(", ")
        )));
    }
    if ctx.host == HostArg::Server {
        // Only an App needs to know its owner's kind; --host actions asks GitHub nothing.
        ctx.owner_kind = owner_kind(args, &ctx.owner).await?;
    }
    // Everything is rendered before anything is written.
    let files: Vec<(&str, String)> = (names.iter())
        .map(|&name| {
            let text = render(name, &ctx)?;
            // The App's webhook secret, which only GitHub's answer to `--manifest-code` gave,
            // stays.
            Ok(match &previous.hook_secret {
                Some(secret) if name == ENV_FILE => (name, with_hook_secret(&text, secret)),
                _ => (name, text),
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let steps = steps(dir, &ctx)?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    println!("the setup in {}:", dir.display());
    for (name, text) in &files {
        let path = dir.join(name);
        // A file left as it was keeps its time, and says the re-run did not touch it.
        let state = match std::fs::read(&path) {
            Ok(old) if old == text.as_bytes() => "unchanged",
            Ok(_) => "changed",
            Err(_) => "new",
        };
        if state != "unchanged" {
            write(&path, text, PRIVATE.contains(name))?;
        }
        println!("  {state}: {name}");
    }
    if args.rotate_secrets {
        println!(
            "new webhook secrets in {ENV_FILE}, supabase-vault.sql and supabase.sql: Supabase's \
             trigger and the running rowbranch still hold the old ones. Give rowbranch the new \
             ones beside the old (ROWBRANCH_WEBHOOK_SECRET takes several, separated by spaces) \
             and restart it, run the SQL file again in Supabase, then drop the old ones"
        );
    }
    print!("{steps}");
    Ok(())
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
    let slug = app.slug.as_deref().filter(|s| is_app_slug(s));
    println!(
        "created the GitHub App {} (id {}){}",
        slug.unwrap_or(&app.name),
        app.id,
        slug.map(|s| format!(": https://github.com/apps/{s}"))
            .unwrap_or_default()
    );
    println!("  wrote {} (readable by you only)", key_path.display());
    keep_hook_secret(dir, app.webhook_secret.as_deref())?;
    set_app_id(&dir.join("rowbranch.toml"), app.id)?;
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

/// What `init --manifest-code` writes into rowbranch.env before the App's webhook secret.
const HOOK_SECRET_NOTE: &str =
    "# The GitHub App's webhook secret, which GitHub signs the App's events to POST /github\n\
     # with (init --manifest-code wrote it from GitHub's answer).\n";

/// The variable that holds it.
const HOOK_SECRET_LINE: &str = "GITHUB_WEBHOOK_SECRET=";

/// `env` (rowbranch.env's text) with the App's webhook secret as its last line, in place of
/// any it held.
fn with_hook_secret(env: &str, secret: &str) -> String {
    let note: Vec<&str> = HOOK_SECRET_NOTE.lines().collect();
    let mut kept: String = (env.split_inclusive('\n'))
        .filter(|line| {
            let line = line.trim_end_matches(['\n', '\r']);
            !line.starts_with(HOOK_SECRET_LINE) && !note.contains(&line)
        })
        .collect();
    if !kept.is_empty() && !kept.ends_with('\n') {
        kept.push('\n');
    }
    format!("{kept}{HOOK_SECRET_NOTE}{HOOK_SECRET_LINE}\"{secret}\"\n")
}

/// Writes the webhook secret GitHub made for the App (`webhook_secret` in the manifest's
/// conversion) into rowbranch.env, readable by its owner only, beside the webhook secrets
/// `init` made: GitHub shows it this once, and `POST /github` needs it. Never printed.
fn keep_hook_secret(dir: &Path, secret: Option<&str>) -> Result<(), Failure> {
    let path = dir.join(ENV_FILE);
    let Some(secret) = secret.filter(|s| !s.is_empty()) else {
        println!(
            "  GitHub made no webhook secret (the manifest has no webhook): POST /github stays \
             off; docs/operating.md, \"The App's events\", says how to turn it on"
        );
        return Ok(());
    };
    // Between double quotes the shell, systemd and Docker Compose read these characters
    // otherwise: such a secret is not written rather than written wrong.
    let plain = |c: char| c.is_ascii_graphic() && !matches!(c, '"' | '\\' | '$' | '`') || c == ' ';
    if !secret.chars().all(plain) {
        println!(
            "  GitHub's webhook secret for the App holds characters {ENV_FILE} cannot carry \
             between double quotes: set a new one on the App's settings page (Webhook secret) \
             and the same in GITHUB_WEBHOOK_SECRET"
        );
        return Ok(());
    }
    let env = read_if_there(&path)?.unwrap_or_default();
    write(&path, &with_hook_secret(&env, secret), true)?;
    println!(
        "  wrote the App's webhook secret into {} as GITHUB_WEBHOOK_SECRET (readable by you only)",
        path.display()
    );
    Ok(())
}

/// Makes the workflow's `allowed_bots` name the App GitHub created, whose name (and so slug)
/// the person creating it may have changed on GitHub's page; claude-code-action refuses every
/// run its bot starts otherwise.
fn name_the_bot(path: &Path, slug: &str) -> Result<(), Failure> {
    let bot = bot_login(slug);
    let Some(text) = read_if_there(path)? else {
        println!(
            "  no {} to update: the workflow's allowed_bots must name {bot}",
            path.display()
        );
        return Ok(());
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

/// `workflow` with the `allowed_bots` of every claude-code-action step set to the App's bot,
/// each on the line it was, with its indentation; every other line is untouched. Checks the
/// result by reading it back; the error says why the workflow cannot be rewritten.
pub fn set_allowed_bots(workflow: &str, app_slug: &str) -> Result<String, &'static str> {
    let steps = claude_steps(workflow).ok_or("it is not a workflow rowbranch can read as YAML")?;
    if steps.is_empty() {
        return Err("it has no claude-code-action step");
    }
    let unmatched =
        "its claude-code-action steps and its `allowed_bots:` lines do not match one to one";
    let value = serde_json::Value::String(bot_login(app_slug)).to_string();
    let mut rewritten = 0;
    let out: String = (workflow.split_inclusive('\n'))
        .map(|line| {
            let content = line.trim_start();
            if !content.starts_with("allowed_bots:") {
                return line.to_owned();
            }
            rewritten += 1;
            let indent = &line[..line.len() - content.len()];
            let ending = &content[content.trim_end_matches(['\n', '\r']).len()..];
            format!("{indent}allowed_bots: {value}{ending}")
        })
        .collect();
    let after = claude_steps(&out).unwrap_or_default();
    if rewritten != steps.len()
        || after.len() != steps.len()
        || !after.iter().all(|s| allows_bot(&s.allowed_bots, app_slug))
    {
        return Err(unmatched);
    }
    Ok(out)
}

/// A slug as GitHub makes them: lower-case letters, digits, `-` and `_`.
fn is_app_slug(slug: &str) -> bool {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_';
    !slug.is_empty() && slug.chars().all(allowed)
}

/// What a previous run of `init` (and of `init --manifest-code`) wrote into the folder, and so
/// what may be deployed from it: the App GitHub created, the triggers installed in Supabase and
/// the server started with the secrets, the sweep that started at `sweep_from`. A re-run starts
/// from these, so that what it writes goes on matching what runs.
#[derive(Debug)]
struct PreviousRun {
    /// `[github] app_id` once `--manifest-code` set it; never the placeholder.
    app_id: Option<u64>,
    /// The App's slug, as `--manifest-code` named its bot in workflow.yml's `allowed_bots`
    /// (GitHub's name for it, which may not be the one asked for); read once the App exists.
    app_slug: Option<String>,
    /// The first route's `sweep_from`.
    sweep_from: Option<String>,
    /// The signing and the bearer secret of rowbranch.env's `ROWBRANCH_WEBHOOK_SECRET`.
    secrets: Option<(String, String)>,
    /// Whether a file that carries the secrets is here: secrets a re-run cannot read back are
    /// not replaced without `--rotate-secrets`.
    has_secrets: bool,
    /// The App's webhook secret, which `--manifest-code` wrote into rowbranch.env.
    hook_secret: Option<String>,
}

impl PreviousRun {
    fn read(dir: &Path) -> Result<Self, Failure> {
        let text = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        // Its app_id is the one thing no re-run can make again: never written over blindly.
        let config = text("rowbranch.toml").map(|config| config.parse::<toml_edit::DocumentMut>());
        let config = config.transpose().map_err(|e| {
            usage(format!(
                "{} is not TOML ({e}): fix it, or move it away to start afresh",
                dir.join("rowbranch.toml").display()
            ))
        })?;
        let app_id = (config.as_ref())
            .and_then(|doc| doc.get("github")?.get("app_id")?.as_integer())
            .and_then(|id| u64::try_from(id).ok())
            .filter(|id| *id != PLACEHOLDER_APP_ID);
        let route =
            (config.as_ref()).and_then(|doc| doc.get("routes")?.as_array_of_tables()?.get(0));
        let sweep_from =
            route.and_then(|route| Some(route.get("sweep_from")?.as_str()?.to_owned()));
        let workflow = app_id.and_then(|_| claude_steps(&text("workflow.yml")?));
        let app_slug = (workflow.unwrap_or_default().first())
            .and_then(|step| step.allowed_bots.strip_suffix("[bot]").map(str::to_owned))
            .filter(|slug| is_app_slug(slug));
        let env = text(ENV_FILE).unwrap_or_default();
        let secrets = env.lines().find_map(|line| {
            let value = line.strip_prefix("ROWBRANCH_WEBHOOK_SECRET=")?;
            // More than the two is a rotation under way: which pair the triggers use is not
            // known here, so none is taken (and the re-run refuses rather than drop the rest).
            let (signing, bearer): (Vec<&str>, Vec<&str>) = (value.trim_matches('"'))
                .split_whitespace()
                .partition(|s| s.starts_with("whsec_"));
            match (&signing[..], &bearer[..]) {
                ([signing], [bearer]) => Some((signing.to_string(), bearer.to_string())),
                _ => None,
            }
        });
        let hook_secret = env.lines().find_map(|line| {
            let value = line.strip_prefix(HOOK_SECRET_LINE)?;
            Some(value.strip_prefix('"')?.strip_suffix('"')?.to_owned())
        });
        Ok(PreviousRun {
            app_id,
            app_slug,
            sweep_from,
            secrets,
            has_secrets: PRIVATE.iter().any(|name| dir.join(name).exists()),
            hook_secret,
        })
    }
}

/// Sets `app_id` in the config's `[github]` table, keeping its comment and the rest of the
/// file as they are, and says so; or says to set it in the environment when there is no config.
fn set_app_id(config: &Path, id: u64) -> Result<(), Failure> {
    let Ok(text) = std::fs::read_to_string(config) else {
        println!(
            "  no {} to update: set GITHUB_APP_ID={id}",
            config.display()
        );
        return Ok(());
    };
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("{} is not TOML", config.display()))?;
    let Some(toml_edit::Item::Value(old)) = doc.get_mut("github").and_then(|t| t.get_mut("app_id"))
    else {
        return Err(Failure::Runtime(anyhow!(
            "{} has no app_id in [github]: add app_id = {id}",
            config.display()
        )));
    };
    let decor = old.decor().clone();
    *old = i64::try_from(id)
        .context("an App id beyond TOML's integers")?
        .into();
    *old.decor_mut() = decor;
    write(config, &doc.to_string(), false)?;
    println!("  set app_id = {id} in {}", config.display());
    Ok(())
}

/// The text of `path`; `None` when there is no such file.
fn read_if_there(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        read => read
            .map(Some)
            .with_context(|| format!("cannot read {}", path.display())),
    }
}

fn write(path: &Path, text: &str, private: bool) -> Result<(), Failure> {
    use std::io::Write;
    let cannot = || format!("cannot write {}", path.display());
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).with_context(cannot)?;
    #[cfg(unix)]
    if private {
        // An existing file keeps its mode when opened: narrow it too.
        use std::os::unix::fs::PermissionsExt;
        let private = std::fs::Permissions::from_mode(0o600);
        file.set_permissions(private).with_context(cannot)?;
    }
    file.write_all(text.as_bytes()).with_context(cannot)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{set_allowed_bots, set_app_id, webhook_base};
    use crate::cmd::doctor::workflow::tests::WORKFLOW;
    use crate::cmd::doctor::workflow::{allows_bot, claude_steps};

    #[test]
    fn the_rewrite_changes_only_the_allowed_bots_line() {
        let rewritten = set_allowed_bots(WORKFLOW, "rowbranch-acme-2").unwrap();
        assert_eq!(
            rewritten,
            WORKFLOW.replace("\"rowbranch-acme[bot]\"", "\"rowbranch-acme-2[bot]\"")
        );
        assert!(allows_bot(
            &claude_steps(&rewritten).unwrap()[0].allowed_bots,
            "rowbranch-acme-2"
        ));
    }

    #[test]
    fn a_workflow_the_rewrite_cannot_follow_is_refused() {
        assert_eq!(
            set_allowed_bots("on: push\njobs: {}\n", "x"),
            Err("it has no claude-code-action step")
        );
        let no_line = WORKFLOW.replace("          allowed_bots: \"rowbranch-acme[bot]\"\n", "");
        let unmatched =
            "its claude-code-action steps and its `allowed_bots:` lines do not match one to one";
        assert_eq!(set_allowed_bots(&no_line, "x"), Err(unmatched));
        let other = format!(
            "{WORKFLOW}      - uses: someone/else@v1\n        with:\n          allowed_bots: x\n"
        );
        assert_eq!(set_allowed_bots(&other, "x"), Err(unmatched));
        // A comment that mentions the key is not a line to rewrite.
        let comment = format!("{WORKFLOW}# allowed_bots: in a comment\n");
        assert!(set_allowed_bots(&comment, "x")
            .unwrap()
            .ends_with("# allowed_bots: in a comment\n"));
    }

    #[test]
    fn the_url_is_the_base_or_the_endpoint_and_no_other_path() {
        for given in [
            "https://hooks.example.com",
            "https://hooks.example.com/",
            "https://hooks.example.com/webhook",
            "https://hooks.example.com/webhook/",
        ] {
            let base = webhook_base(given).unwrap_or_else(|e| panic!("{given}: {:#}", e.error()));
            assert_eq!(base, "https://hooks.example.com", "{given}");
        }
        let other = webhook_base("https://hooks.example.com/hooks/in").unwrap_err();
        let said = other.error().to_string();
        assert!(said.contains("has the path `/hooks/in`"), "{said}");
        assert!(webhook_base("ftp://hooks.example.com").is_err());
        assert!(webhook_base("https://hooks.example.com/?a=1").is_err());
    }

    #[test]
    fn the_app_id_is_set_in_github_alone_keeping_its_comment() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("rowbranch.toml");
        let before = "listen = \"x\"\n\n[github]\napp_id = 123456   # env GITHUB_APP_ID\n\n[[routes]]\napp_id = 1\n";
        std::fs::write(&config, before).unwrap();
        set_app_id(&config, 4242).unwrap();
        assert_eq!(
            std::fs::read_to_string(&config).unwrap(),
            before.replace("123456", "4242")
        );
        // No config: nothing is written (the environment is told to carry the id).
        let none = dir.path().join("none.toml");
        set_app_id(&none, 1).unwrap();
        assert!(!none.exists());
    }
}
