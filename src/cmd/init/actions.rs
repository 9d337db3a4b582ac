//! `rowbranch init --host actions`: the flags that host takes and refuses, what the drain job
//! installs (built from git at a commit, or a release's archive at its checksum), and the steps
//! that remain, in the order that works.

use std::path::Path;

use super::{public_url, usage};
use crate::cli::{HostArg, InitArgs, IntakeArg};
use crate::cmd::Failure;
use crate::identity::BranchPrefix;
use crate::templates::actions::{
    ActionsSetup, Every, Install, CA_PATH, CONFIG_PATH, DATABASE_URL_SECRET, DRAIN_WORKFLOW_FILE,
    KICK_SECRET,
};
use crate::templates::setup::SetupContext;

/// The commit this binary was built from, as `--version` names it: the default `--rev`.
const OWN_COMMIT: &str = env!("ROWBRANCH_COMMIT");

/// What `--host actions` writes: no App manifest, page or key, no webhook secret; the payload
/// template is the built-in one (a file beside the config can replace it).
pub(super) fn outputs(args: &InitArgs) -> Vec<&'static str> {
    let mut names = vec![
        "rowbranch.toml",
        "workflow.yml",
        DRAIN_WORKFLOW_FILE,
        "supabase-queue.sql",
    ];
    if args.kick {
        names.push("supabase-kick.sql");
    }
    names
}

/// The flags of an App and a server, which `--host actions` has no use for.
pub(super) fn refuse_server_flags(args: &InitArgs) -> Result<(), Failure> {
    let given: Vec<&str> = [
        ("--url", args.url.is_some()),
        ("--app-name", args.app_name.is_some()),
        ("--owner-type", args.owner_type.is_some()),
        ("--intake webhook", args.intake == Some(IntakeArg::Webhook)),
    ]
    .into_iter()
    .filter_map(|(flag, given)| given.then_some(flag))
    .collect();
    if given.is_empty() {
        return Ok(());
    }
    Err(usage(format!(
        "--host actions takes no {}: the drain job reads the queue with the repository's own \
         token, so there is no App, no public address and no webhook",
        given.join(", ")
    )))
}

/// The flags of `--host actions`, given without it.
pub(super) fn refuse_actions_flags(args: &InitArgs) -> Result<(), Failure> {
    debug_assert_eq!(args.host, HostArg::Server);
    let given: Vec<&str> = [
        ("--every", args.every.is_some()),
        ("--kick", args.kick),
        ("--default-branch", args.default_branch.is_some()),
        ("--install-from-git", args.install_from_git.is_some()),
        ("--rev", args.rev.is_some()),
        ("--release-url", args.release_url.is_some()),
        ("--release-sha256", args.release_sha256.is_some()),
    ]
    .into_iter()
    .filter_map(|(flag, given)| given.then_some(flag))
    .collect();
    if given.is_empty() {
        return Ok(());
    }
    Err(usage(format!(
        "{} {} for --host actions, which runs rowbranch in the repository's GitHub Actions: \
         add --host actions, or leave {}",
        given.join(", "),
        if given.len() == 1 { "is" } else { "are" },
        if given.len() == 1 {
            "it out"
        } else {
            "them out"
        },
    )))
}

/// The drain workflow's and the kick's values, from the flags.
pub(super) fn setup(args: &InitArgs, api_url: &str) -> Result<ActionsSetup, Failure> {
    let every = match args.every.as_deref() {
        Some(text) => Every::parse(text).map_err(|e| usage(format!("--every {e}")))?,
        None => Every::HOURLY,
    };
    let default_branch = args.default_branch.clone().unwrap_or_else(|| "main".into());
    if BranchPrefix::parse(&default_branch).is_err() {
        return Err(usage(format!(
            "--default-branch `{}` is not a branch name rowbranch can write into the kick: \
             letters, digits, . _ - and / between parts",
            crate::identity::excerpt(&default_branch)
        )));
    }
    Ok(ActionsSetup {
        every,
        install: install(args)?,
        kick: args.kick,
        default_branch,
        api_url: public_url(api_url)
            .map_err(|_| usage(format!("--api-url `{api_url}` is not an http(s) URL")))?,
    })
}

fn install(args: &InitArgs) -> Result<Install, Failure> {
    if let (Some(url), Some(sha256)) = (&args.release_url, &args.release_sha256) {
        let url = https("--release-url", url)?;
        if sha256.len() != 64 || !sha256.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(usage(
                "--release-sha256 is 64 hexadecimal digits: the archive's line in the release's \
                 SHA256SUMS",
            ));
        }
        return Ok(Install::Release {
            url,
            sha256: sha256.to_ascii_lowercase(),
        });
    }
    let Some(url) = &args.install_from_git else {
        return Err(usage(format!(
            "--host actions installs rowbranch in the drain job: give --release-url URL \
             --release-sha256 HEX, a release's x86_64 Linux archive and its line in SHA256SUMS; \
             or, where there is no release, --install-from-git URL, the git repository \
             rowbranch is built from on every run (e.g. https://github.com/OWNER/rowbranch; \
             --rev defaults to this build's commit, {OWN_COMMIT})"
        )));
    };
    let url = https("--install-from-git", url)?;
    let rev =
        match args.rev.as_deref() {
            Some(rev) => rev.to_owned(),
            None if OWN_COMMIT == "unknown" => return Err(usage(
                "--rev COMMIT is required: this rowbranch does not know the commit it was built \
                 from (--version says unknown)",
            )),
            None => OWN_COMMIT.to_owned(),
        };
    if !(7..=40).contains(&rev.len()) || !rev.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(usage(format!(
            "--rev `{}` is not a commit id: 7 to 40 hexadecimal digits (a branch or tag could \
             move; a commit cannot)",
            crate::identity::excerpt(&rev)
        )));
    }
    Ok(Install::Git {
        url,
        rev: rev.to_ascii_lowercase(),
    })
}

/// An https URL: the runner fetches it without credentials, and plain http could be changed
/// on the way.
fn https(flag: &str, raw: &str) -> Result<String, Failure> {
    let url = public_url(raw).map_err(|_| usage(format!("{flag} `{raw}` is not a URL")))?;
    if !url.starts_with("https://") {
        return Err(usage(format!("{flag} `{raw}` must be an https:// URL")));
    }
    Ok(url)
}

pub(super) fn print_steps(dir: &Path, ctx: &SetupContext) {
    let d = dir.display();
    let repo = &ctx.repo;
    let setup = &ctx.actions;
    let first_run = match &setup.install {
        Install::Git { url, rev } => {
            let whose = if rev == OWN_COMMIT {
                ", the commit this rowbranch was built from"
            } else {
                ""
            };
            format!(
                "Each run builds rowbranch from {url}\n     at {rev}{whose}\n     \
                 (10 to 30 of the runner's minutes, every run: nothing is cached)."
            )
        }
        Install::Release { .. } => {
            "Each run downloads rowbranch's release and checks its SHA-256 first.".to_owned()
        }
    };
    println!(
        "\nnext steps, in this order: the queue and its trigger, a database role for the drain, the
repository's secrets and files, then a first run. No App, no server, no public address.
  1. In Supabase, enable Queues (Integrations → Queues), then run {d}/supabase-queue.sql in the
     SQL editor (as postgres): each INSERT on {schema}.{table} then puts the row into the queue
     {queue}, in the INSERT's own transaction.
  2. Give the drain a database role of its own that may read the queues (rowbranch's
     docs/queue.md, \"The database role\", has the grants). GitHub's runners reach Supabase
     over IPv4 only and the direct host is IPv6 unless the project has the IPv4 add-on, so its
     DATABASE_URL is the session pooler's (Connect → Session pooler), with sslmode=verify-full:
       postgres://ROLE.PROJECT_REF:PASSWORD@aws-0-REGION.pooler.supabase.com:5432/postgres?sslmode=verify-full
  3. In {repo}, Settings → Secrets and variables → Actions: add that as the repository secret
     {DATABASE_URL_SECRET}, and the work's ANTHROPIC_API_KEY. Settings → Actions → General:
     \"Allow GitHub Actions to create and approve pull requests\".
  4. Commit to {repo}'s default branch:
       {d}/rowbranch.toml       as {CONFIG_PATH}
       {d}/workflow.yml         as .github/workflows/rowbranch.yml
       {d}/{DRAIN_WORKFLOW_FILE}  as .github/workflows/{DRAIN_WORKFLOW_FILE}
     and Supabase's CA certificate as {CA_PATH} (Database Settings → SSL
     Configuration → Download certificate; it is public): verify-full checks the pooler with it.
  5. Run the drain once: Actions → rowbranch drain → Run workflow, or
       gh workflow run {DRAIN_WORKFLOW_FILE} --repo {repo}
     {first_run}
     From then on it runs every {every}.",
        schema = ctx.schema,
        table = ctx.table,
        queue = ctx.queue,
        every = setup.every,
    );
    let mut step = 6;
    if setup.kick {
        println!(
            "  {step}. The kick, to drain within seconds of an insert rather than on the schedule: on
     GitHub, Settings → Developer settings → Fine-grained tokens → Generate new token, with
     access to {repo} only and one permission, Actions: Read and write. In Supabase, keep it in
     Vault as {KICK_SECRET} (Integrations → Vault → Add new secret; never in a file),
     enable pg_net (Integrations → Database Webhooks → Enable), then run {d}/supabase-kick.sql.",
        );
        step += 1;
    }
    println!(
        "  {step}. rowbranch doctor --config {d}/rowbranch.toml, with DATABASE_URL and GITHUB_TOKEN (a
     token that can read {repo}) set, until every line is ✓."
    );
}
