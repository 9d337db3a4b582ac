//! `rowbranch init`: the setup files, filled in; the owner's account type asked of the fake
//! GitHub; and the end of "create an App from a manifest", including an App GitHub created
//! under another name than the one asked for.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use fake_github::{FakeGithub, TEST_APP_PRIVATE_KEY_PEM, TEST_APP_WEBHOOK_SECRET};
use std::time::Duration;

use rowbranch::cmd::doctor::workflow::claude_steps;
use rowbranch::cmd::doctor::PLACEHOLDER_APP_ID;
use rowbranch::cmd::init::setup::{render, SetupContext};
use rowbranch::config::{
    Config, ForgeSettings, GithubAuth, Intake, PayloadTemplateSource, PrivateKeySource,
};
use rowbranch::event::EventKind;
use rowbranch::pipeline::template::{PayloadContext, PayloadTemplate};
use serde_json::Value;

use crate::support::setup::{example, posted_manifest};

fn rowbranch(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_rowbranch"))
        .args(args)
        .env_remove("GITHUB_API_URL")
        .output()
        .expect("the binary runs")
}

/// `init` for `acme/app`, told that acme is an organization (no GitHub to ask).
fn init(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["--owner-type", "organization"];
    args.extend_from_slice(extra);
    init_asking(dir, &args)
}

/// `init` for `acme/app` with only these flags besides.
fn init_asking(dir: &Path, extra: &[&str]) -> Output {
    init_in(dir, &[&["--url", "https://hooks.example.com"], extra])
}

/// `init --dir DIR --repo acme/app` and the flags of each of `flags`.
fn init_in(dir: &Path, flags: &[&[&str]]) -> Output {
    let mut args = vec!["init", "--dir", dir.to_str().unwrap(), "--repo", "acme/app"];
    for more in flags {
        args.extend_from_slice(more);
    }
    rowbranch(&args)
}

/// Runs `init` (one of the functions above) into a folder it makes, `setup`, which must
/// succeed: the temporary folder it is in, `setup`, and what `init` printed.
fn into_new_folder(init: fn(&Path, &[&str]) -> Output) -> (tempfile::TempDir, PathBuf, Output) {
    let dir = tempfile::tempdir().unwrap();
    let setup = dir.path().join("setup");
    let out = init(&setup, &[]);
    assert!(out.status.success(), "{}", text(&out));
    (dir, setup, out)
}

/// Checks that what `init` printed names each of `steps`.
#[track_caller]
fn expect_next_steps(out: &Output, steps: &[&str]) {
    for step in steps {
        assert!(
            text(out).contains(step),
            "next steps miss {step:?}:\n{}",
            text(out)
        );
    }
}

/// The forms the page has, by where they post.
fn forms(page: &str) -> Vec<String> {
    page.split("<form action=\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().to_owned())
        .collect()
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The secrets `init` generated, as it wrote them for rowbranch: the value of
/// ROWBRANCH_WEBHOOK_SECRET, unquoted.
fn secret(dir: &Path) -> String {
    let env = std::fs::read_to_string(dir.join("rowbranch.env")).unwrap();
    env.lines()
        .find_map(|l| l.strip_prefix("ROWBRANCH_WEBHOOK_SECRET="))
        .expect("the env file names the secret")
        .trim_matches('"')
        .to_owned()
}

#[test]
fn init_writes_the_templates_and_the_page_filled_in_for_the_repository() {
    let (_dir, setup, out) = into_new_folder(init);
    for name in [
        "rowbranch.toml",
        "workflow.yml",
        "supabase-vault.sql",
        "supabase.sql",
        "app-manifest.json",
        "payload.json.j2",
        "create-app.html",
        "rowbranch.env",
    ] {
        assert!(setup.join(name).is_file(), "{name} missing");
    }
    let secrets = secret(&setup);
    let (signing, bearer) = secrets.split_once(' ').expect("two secrets");
    assert!(
        signing.starts_with("whsec_"),
        "a secret the Vault trigger can sign with"
    );
    assert!(!bearer.starts_with("whsec_"), "a bearer secret of its own");
    for secret in [signing, bearer] {
        assert!(!text(&out).contains(secret), "a secret is never printed");
    }
    for (sql, its, other) in [
        ("supabase-vault.sql", signing, bearer),
        ("supabase.sql", bearer, signing),
    ] {
        let text = std::fs::read_to_string(setup.join(sql)).unwrap();
        assert!(text.contains("https://hooks.example.com/webhook"), "{sql}");
        assert!(
            text.contains(its) && !text.contains(other),
            "{sql}: its own secret"
        );
        assert_eq!(mode(&setup.join(sql)), 0o600, "{sql}");
    }
    assert_eq!(mode(&setup.join("rowbranch.env")), 0o600);
    let workflow = std::fs::read_to_string(setup.join("workflow.yml")).unwrap();
    assert!(
        workflow.contains("rowbranch-acme[bot]"),
        "allowed_bots names the App"
    );
    expect_next_steps(
        &out,
        &[
            "create-app.html",
            "--manifest-code",
            "Install",
            "ANTHROPIC_API_KEY",
            "create and approve pull requests",
            ".github/workflows/rowbranch.yml",
            "Integrations → Database Webhooks → Enable",
            "supabase-vault.sql",
            "the organization acme",
            "rowbranch doctor",
        ],
    );
}

#[test]
fn the_written_config_parses_and_routes_the_table_to_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    let flags = "--table ideas --text-column body --branch-prefix idea --event-type idea";
    let out = init(dir.path(), &flags.split(' ').collect::<Vec<_>>());
    assert!(out.status.success(), "{}", text(&out));
    let secret = secret(dir.path());
    let env = |key: &str| match key {
        "ROWBRANCH_WEBHOOK_SECRET" => Some(secret.clone()),
        _ => None,
    };
    let config = Config::load(&dir.path().join("rowbranch.toml"), &env).unwrap();
    let route = config
        .routes
        .iter()
        .find(|r| r.table_name() == "public.ideas")
        .expect("the route for the table");
    assert_eq!(route.repo.to_string(), "acme/app");
    assert_eq!(route.text_column.as_deref(), Some("body"));
    assert_eq!(route.branch_prefix.as_str(), "idea");
    assert_eq!(route.event_type.as_str(), "idea");
    let ForgeSettings::Github(github) = &config.forge else {
        panic!("init writes a GitHub config");
    };
    assert!(format!("{:?}", github.auth).contains("app.pem"));

    // The config uses the payload template written beside it, so an edit there takes effect.
    let Some(PayloadTemplateSource::File(template)) = route.payload_template.clone() else {
        panic!("the config names the payload template's file");
    };
    assert_eq!(template, dir.path().join("payload.json.j2"));
    let edited = std::fs::read_to_string(&template).unwrap().replace(
        "\"id\": {{ id }},",
        "\"id\": {{ id }},\n  \"edited\": true,",
    );
    std::fs::write(&template, edited).unwrap();
    let compiled = PayloadTemplate::from_file(&template).unwrap();
    let record = serde_json::Map::new();
    let payload = compiled
        .render(&PayloadContext {
            id: "7",
            branch: "idea/7",
            base: "main",
            base_sha: "0123456789abcdef0123456789abcdef01234567",
            repo: "acme/app".into(),
            schema: "public",
            table: "ideas",
            event_type: "idea",
            text: None,
            text_truncated: false,
            record: &record,
        })
        .unwrap();
    assert_eq!(payload["edited"], true);
}

/// The config and the secrets `init` writes take the signed deliveries of supabase-vault.sql
/// and nothing else: not the bearer secret of supabase.sql until `accept` lists "bearer", and
/// never the signing key as a bearer token.
#[test]
fn the_written_setup_takes_only_signed_deliveries() {
    use crate::support::sign::{standard_webhooks_signature, verify};
    let (_dir, setup, _) = into_new_folder(init);
    let secrets = secret(&setup);
    let (signing, bearer) = secrets.split_once(' ').unwrap();
    let env_file = std::fs::read_to_string(setup.join("rowbranch.env")).unwrap();
    assert!(
        env_file.contains("supabase-vault.sql") && env_file.contains("supabase.sql"),
        "the env file says which secret is which: {env_file}"
    );
    let env = |key: &str| (key == "ROWBRANCH_WEBHOOK_SECRET").then(|| secrets.clone());
    let config = Config::load(&setup.join("rowbranch.toml"), &env).unwrap();
    let configured = config.webhook.secrets.expect("the secrets");
    assert_eq!(configured.accept_list(), r#"["standard-webhooks"]"#);
    let now = std::time::SystemTime::now();
    let unix = now.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let header = |pairs: &[(&'static str, String)]| {
        let mut map = http::HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    };
    let signed = header(&[
        ("webhook-id", "msg_1".into()),
        ("webhook-timestamp", unix.to_string()),
        (
            "webhook-signature",
            standard_webhooks_signature(signing, "msg_1", unix, b"{}"),
        ),
    ]);
    assert_eq!(verify(&configured, &signed, b"{}", now), Ok(()));
    for token in [bearer, signing] {
        let bearer = header(&[("authorization", format!("Bearer {token}"))]);
        assert!(verify(&configured, &bearer, b"{}", now).is_err(), "{token}");
    }
    // With supabase.sql, accept = ["bearer"] takes its secret, and still not the signing key.
    let toml = std::fs::read_to_string(setup.join("rowbranch.toml"))
        .unwrap()
        .replace("accept = [\"standard-webhooks\"]", "accept = [\"bearer\"]");
    let config = Config::parse(&toml, &setup.join("rowbranch.toml"), &env).unwrap();
    let configured = config.webhook.secrets.expect("the secrets");
    let with = |token: &str| header(&[("authorization", format!("Bearer {token}"))]);
    assert_eq!(verify(&configured, &with(bearer), b"{}", now), Ok(()));
    assert!(verify(&configured, &with(signing), b"{}", now).is_err());
}

#[test]
fn the_manifest_asks_for_the_least_permissions_and_the_two_events_that_move_a_row() {
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &["--app-name", "Feedback Bot"])
        .status
        .success());
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("app-manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["name"], "Feedback Bot");
    // The App's events go to POST /github, on: pull requests and the work's runs, which the
    // permissions below already let it read.
    assert_eq!(manifest["hook_attributes"]["active"], true);
    assert_eq!(
        manifest["hook_attributes"]["url"],
        "https://hooks.example.com/github"
    );
    assert_eq!(
        manifest["default_events"],
        serde_json::json!(["pull_request", "workflow_run"])
    );
    let permissions = manifest["default_permissions"].as_object().unwrap();
    assert_eq!(permissions.len(), 4, "{permissions:?}");
    assert_eq!(permissions["contents"], "write");
    assert_eq!(permissions["pull_requests"], "read");
    assert_eq!(
        permissions["actions"], "read",
        "explain lists the row's workflow runs"
    );
    assert_eq!(permissions["metadata"], "read");

    // The page posts exactly that manifest to GitHub's manifest flow, on the organization that
    // owns the repository: the only account a private App can be installed on.
    let page = std::fs::read_to_string(dir.path().join("create-app.html")).unwrap();
    assert_eq!(
        forms(&page),
        ["https://github.com/organizations/acme/settings/apps/new"]
    );
    assert!(page.contains("can be installed only on the account that owns it"));
    let posted: Value = serde_json::from_str(&posted_manifest(&page))
        .expect("the page carries the manifest as JSON");
    assert_eq!(posted, manifest);
}

#[test]
fn init_refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &[]).status.success());
    let first = secret(dir.path());
    let again = init(dir.path(), &[]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("--force"), "{}", text(&again));
    assert_eq!(secret(dir.path()), first, "nothing was overwritten");
    assert!(init(dir.path(), &["--force"]).status.success());
    assert_eq!(secret(dir.path()), first, "a re-run keeps the secrets");
    assert!(init(dir.path(), &["--force", "--rotate-secrets"])
        .status
        .success());
    assert_ne!(secret(dir.path()), first, "fresh secrets when asked");
}

#[test]
fn init_without_a_repository_or_with_a_bad_one_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = rowbranch(&["init", "--dir", d, "--url", "https://x.example"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = rowbranch(&[
        "init",
        "--dir",
        d,
        "--repo",
        "acme",
        "--url",
        "https://x.example",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("owner/name"), "{}", text(&out));
    let out = rowbranch(&["init", "--dir", d, "--repo", "acme/app", "--url", "ftp://x"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[tokio::test]
async fn the_manifest_code_is_traded_for_the_apps_id_and_key() {
    let fake = FakeGithub::start().await;
    fake.add_manifest_code("one-time-code");
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &[]).status.success());
    let d = dir.path().to_str().unwrap().to_owned();
    let url = fake.url();
    let run = |d: String, url: String| {
        tokio::task::spawn_blocking(move || {
            rowbranch(&[
                "init",
                "--dir",
                &d,
                "--manifest-code",
                "one-time-code",
                "--api-url",
                &url,
            ])
        })
    };
    let out = run(d.clone(), url.clone()).await.unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let key = dir.path().join("app.pem");
    assert_eq!(
        std::fs::read_to_string(&key).unwrap(),
        TEST_APP_PRIVATE_KEY_PEM
    );
    assert_eq!(mode(&key), 0o600);
    assert!(
        !text(&out).contains("PRIVATE KEY"),
        "the key is never printed"
    );
    // The App's webhook secret, beside the key: in rowbranch.env, private, never printed.
    let env_file = dir.path().join("rowbranch.env");
    let env_text = std::fs::read_to_string(&env_file).unwrap();
    let line = format!("GITHUB_WEBHOOK_SECRET=\"{TEST_APP_WEBHOOK_SECRET}\"");
    assert!(env_text.lines().any(|l| l == line), "{env_text}");
    assert_eq!(mode(&env_file), 0o600);
    assert!(
        !text(&out).contains(&TEST_APP_WEBHOOK_SECRET[25..]),
        "the secret is never printed: {}",
        text(&out)
    );
    let config = std::fs::read_to_string(dir.path().join("rowbranch.toml")).unwrap();
    assert!(
        config.contains(&format!("app_id = {}", fake.app_id())),
        "{config}"
    );
    let secret = secret(dir.path());
    let env = |key: &str| (key == "ROWBRANCH_WEBHOOK_SECRET").then(|| secret.clone());
    let loaded = Config::load(&dir.path().join("rowbranch.toml"), &env).unwrap();
    let ForgeSettings::Github(github) = &loaded.forge else {
        panic!("a GitHub config");
    };
    assert!(
        matches!(github.auth, GithubAuth::App { app_id, .. } if app_id == fake.app_id()),
        "{:?}",
        github.auth
    );

    // The code works once; the key is not replaced without --force.
    std::fs::remove_file(&key).unwrap();
    let again = run(d, url).await.unwrap();
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(text(&again).contains("works once"), "{}", text(&again));
    fake.assert_no_unexpected();
}

/// `init` asking the fake GitHub what the owner is.
async fn init_against(fake: &FakeGithub, dir: &Path, extra: &[&str]) -> Output {
    let mut args: Vec<String> = vec!["--api-url".into(), fake.url()];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        init_asking(&dir, &args)
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn the_page_offers_only_the_form_for_the_kind_of_account_github_says_owns_the_repository() {
    let fake = FakeGithub::start().await;
    for (kind, form) in [
        ("User", "https://github.com/settings/apps/new"),
        (
            "Organization",
            "https://github.com/organizations/acme/settings/apps/new",
        ),
    ] {
        fake.add_account("acme", kind);
        let dir = tempfile::tempdir().unwrap();
        let out = init_against(&fake, dir.path(), &[]).await;
        assert!(out.status.success(), "{kind}: {}", text(&out));
        let page = std::fs::read_to_string(dir.path().join("create-app.html")).unwrap();
        assert_eq!(forms(&page), [form], "{kind}");
    }
    let asked = fake
        .requests()
        .iter()
        .filter(|r| r.path == "/users/acme")
        .count();
    assert_eq!(asked, 2, "GitHub was asked each time");
    fake.assert_no_unexpected();
}

#[tokio::test]
async fn an_owner_github_does_not_know_is_a_usage_error_and_nothing_is_written() {
    let fake = FakeGithub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let out = init_against(&fake, dir.path(), &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("no account named acme"),
        "{}",
        text(&out)
    );
    assert!(!dir.path().join("workflow.yml").exists());
}

#[test]
fn when_github_cannot_be_asked_init_says_which_flag_to_pass_in_one_clear_line() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let api = format!("http://127.0.0.1:{port}");
    let out = init_asking(dir.path(), &["--api-url", &api]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let all = text(&out);
    assert!(
        all.contains("--owner-type user or --owner-type organization"),
        "{all}"
    );
    assert!(
        !all.contains("octocrab") && !all.contains("ERROR"),
        "no library log lines: {all}"
    );
    assert_eq!(all.trim().lines().count(), 1, "one line: {all}");
    assert!(!dir.path().join("workflow.yml").exists());

    // Told, it needs no GitHub at all.
    let out = init_asking(dir.path(), &["--api-url", &api, "--owner-type", "user"]);
    assert!(out.status.success(), "{}", text(&out));
    let page = std::fs::read_to_string(dir.path().join("create-app.html")).unwrap();
    assert_eq!(forms(&page), ["https://github.com/settings/apps/new"]);
}

#[test]
fn a_quote_in_a_name_is_written_so_that_every_file_still_parses() {
    let dir = tempfile::tempdir().unwrap();
    let out = init(
        dir.path(),
        &[
            "--table",
            "a\"b",
            "--schema",
            "we'ird\\",
            "--app-name",
            "<b>Bot</b> \"x\"",
            "--event-type",
            "row \"inserted\" # yes",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    let config: toml::Table = toml::from_str(&read("rowbranch.toml")).expect("TOML");
    assert_eq!(config["routes"][0]["table"].as_str(), Some("a\"b"));
    assert_eq!(config["routes"][0]["schema"].as_str(), Some("we'ird\\"));
    let manifest: Value = serde_json::from_str(&read("app-manifest.json")).expect("JSON");
    assert_eq!(manifest["name"], "<b>Bot</b> \"x\"");
    let workflow = yaml_rust2::YamlLoader::load_from_str(&read("workflow.yml")).expect("YAML");
    assert_eq!(
        workflow[0]["on"]["repository_dispatch"]["types"][0].as_str(),
        Some("row \"inserted\" # yes")
    );
    let page = read("create-app.html");
    assert!(
        page.contains("&lt;b&gt;Bot&lt;&#x2f;b&gt; &quot;x&quot;"),
        "escaped"
    );
    assert!(!page.contains("<b>Bot"), "no markup added");
}

#[test]
fn a_line_break_or_an_invisible_character_in_a_name_is_refused_by_name() {
    for (flag, value, code) in [
        ("--table", "feed\nbacks", "U+000A"),
        ("--app-name", "Bot\u{202E}x", "U+202E"),
        ("--event-type", "row\rinserted", "U+000D"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = init(dir.path(), &[flag, value]);
        assert_eq!(out.status.code(), Some(2), "{flag}: {}", text(&out));
        let message = text(&out);
        assert!(
            message.contains(flag) && message.contains(code),
            "{message}"
        );
        assert!(!message.contains("panicked"), "{message}");
        assert!(
            !dir.path().join("rowbranch.toml").exists(),
            "nothing written"
        );
    }
}

#[test]
fn names_postgresql_would_cut_or_urls_with_a_query_are_refused() {
    for (extra, says) in [
        (vec!["--table", &*"t".repeat(64)], "at most 63 bytes"),
        (vec!["--table", "   "], "--table is empty"),
        (vec!["--app-name", &*"a".repeat(35)], "at most 34"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = init(dir.path(), &extra);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", text(&out));
        assert!(text(&out).contains(says), "{extra:?}: {}", text(&out));
    }
    let dir = tempfile::tempdir().unwrap();
    for url in [
        "https://hooks.example.com/?a=1",
        "https://",
        "https://h.example/a b",
    ] {
        let out = init_for_a_user(dir.path(), &["--url", url]);
        assert_eq!(out.status.code(), Some(2), "{url}: {}", text(&out));
        assert!(text(&out).contains("--url"), "{}", text(&out));
    }
}

#[tokio::test]
async fn an_app_github_created_under_another_name_gets_its_own_bot_into_the_workflow() {
    let fake = FakeGithub::start().await;
    // The name asked for was taken: the person creating the App called it something else.
    fake.add_manifest_code_for_app("renamed-code", "Rowbranch Acme 2", "rowbranch-acme-2");
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &[]).status.success());
    let workflow = dir.path().join("workflow.yml");
    let before = std::fs::read_to_string(&workflow).unwrap();
    assert_eq!(
        claude_steps(&before).unwrap()[0].allowed_bots,
        "rowbranch-acme[bot]"
    );

    let d = dir.path().to_str().unwrap().to_owned();
    let url = fake.url();
    let out = tokio::task::spawn_blocking(move || {
        rowbranch(&[
            "init",
            "--dir",
            &d,
            "--manifest-code",
            "renamed-code",
            "--api-url",
            &url,
        ])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let after = std::fs::read_to_string(&workflow).unwrap();
    assert_eq!(
        claude_steps(&after).unwrap()[0].allowed_bots,
        "rowbranch-acme-2[bot]"
    );
    assert!(
        text(&out).contains("GitHub named the App rowbranch-acme-2")
            && text(&out).contains("rowbranch-acme-2[bot]"),
        "it says so: {}",
        text(&out)
    );
    // Nothing else in the workflow changed.
    let changed: Vec<(&str, &str)> = before
        .lines()
        .zip(after.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(before.lines().count(), after.lines().count());
    fake.assert_no_unexpected();
}

/// `init` for `acme/app`, owned by a user, with only `extra` besides.
fn init_for_a_user(dir: &Path, extra: &[&str]) -> Output {
    init_in(dir, &[&["--owner-type", "user"], extra])
}

/// `init --intake pgmq` for `acme/app`, without `--url`.
fn init_queue(dir: &Path, extra: &[&str]) -> Output {
    let queue = ["--owner-type", "organization", "--intake", "pgmq"];
    init_in(dir, &[&queue, extra])
}

#[test]
fn the_queue_intake_writes_the_queue_sql_and_a_config_whose_route_reads_the_queue() {
    let (_dir, setup, out) = into_new_folder(init_queue);
    for name in ["supabase.sql", "supabase-vault.sql", "rowbranch.env"] {
        assert!(
            !setup.join(name).exists(),
            "{name} is for the webhook intake, and no secret is needed"
        );
    }
    for name in [
        "rowbranch.toml",
        "workflow.yml",
        "supabase-queue.sql",
        "app-manifest.json",
        "payload.json.j2",
        "create-app.html",
    ] {
        assert!(setup.join(name).is_file(), "{name} missing");
    }
    let config = Config::load(&setup.join("rowbranch.toml"), &|_| None).unwrap();
    let intake = Intake::Pgmq {
        max_rows_per_hour: Some(60),
    };
    assert_eq!(config.routes[0].intake, intake);
    assert!(config.reads_the_queue() && !config.takes_webhooks());
    assert_eq!(
        (config.pgmq.queue.as_str(), config.pgmq.dead_letter.as_str()),
        ("rowbranch", "rowbranch_dead")
    );
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(setup.join("app-manifest.json")).unwrap())
            .unwrap();
    assert!(
        manifest.get("hook_attributes").is_none(),
        "no webhook URL: nothing reaches rowbranch from outside"
    );
    assert_eq!(manifest["redirect_url"], "http://127.0.0.1:8080/");
    let sql = std::fs::read_to_string(setup.join("supabase-queue.sql")).unwrap();
    assert!(sql.contains("execute function rowbranch.enqueue(E'rowbranch')"));
    assert!(sql.contains("pg_catalog.set_config('rowbranch.queue', E'rowbranch', true)"));
    expect_next_steps(
        &out,
        &[
            "create-app.html",
            "--manifest-code",
            "supabase-queue.sql",
            "Integrations → Queues",
            "DATABASE_URL",
            "sslmode=verify-full",
            "rowbranch doctor",
        ],
    );
    assert!(!text(&out).contains("Database Webhooks"), "{}", text(&out));
}

#[test]
fn the_queue_is_named_with_queue_and_its_dead_letters_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = init_queue(
        dir.path(),
        &["--queue", "feedback_rows", "--url", "https://h.example"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let config = Config::load(&dir.path().join("rowbranch.toml"), &|_| None).unwrap();
    assert_eq!(config.pgmq.queue, "feedback_rows");
    assert_eq!(config.pgmq.dead_letter, "feedback_rows_dead");
    let sql = std::fs::read_to_string(dir.path().join("supabase-queue.sql")).unwrap();
    assert!(sql.contains("E'feedback_rows_dead'"));
    let manifest = std::fs::read_to_string(dir.path().join("app-manifest.json")).unwrap();
    assert!(manifest.contains("\"redirect_url\": \"https://h.example/\""));
}

#[test]
fn a_bad_queue_name_or_a_webhook_without_a_url_is_a_usage_error_that_says_what_to_pass() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["Feedback", "9rows", "a-b", &"q".repeat(43)] {
        let out = init_queue(dir.path(), &["--queue", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", text(&out));
        assert!(text(&out).contains("--queue"), "{}", text(&out));
    }
    assert!(
        !dir.path().join("rowbranch.toml").exists(),
        "nothing written"
    );
    let out = init_for_a_user(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("--url") && text(&out).contains("--intake pgmq"),
        "{}",
        text(&out)
    );
}

#[test]
fn the_shipped_example_config_parses_with_the_documented_defaults() {
    let text = render("rowbranch.toml", &example()).unwrap();
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
    assert_eq!(github.queue_bytes, rowbranch::config::DEFAULT_QUEUE_BYTES);
    assert!(matches!(key, PrivateKeySource::File(p) if p == Path::new("/etc/rowbranch/app.pem")));
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
        ..example()
    };
    let text = render("rowbranch.toml", &ctx).unwrap();
    let config =
        Config::parse(&text, Path::new("/etc/rowbranch/rowbranch.toml"), &|_| None).unwrap();
    assert_eq!(config.routes[0].intake, intake);
}

#[test]
fn the_url_is_the_base_or_the_endpoint_and_any_other_path_is_refused_writing_nothing() {
    for url in [
        "https://h.example",
        "https://h.example/",
        "https://h.example/webhook",
        "https://h.example/webhook/",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = init_for_a_user(dir.path(), &["--url", url]);
        assert!(out.status.success(), "{url}: {}", text(&out));
        let sql = std::fs::read_to_string(dir.path().join("supabase.sql")).unwrap();
        assert!(sql.contains("https://h.example/webhook'"), "{url}: {sql}");
        assert!(!sql.contains("/webhook/webhook"), "{url}: {sql}");
        let manifest = std::fs::read_to_string(dir.path().join("app-manifest.json")).unwrap();
        assert!(
            manifest.contains("\"redirect_url\": \"https://h.example/\""),
            "{url}: {manifest}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let setup = dir.path().join("setup");
    let out = init_for_a_user(&setup, &["--url", "https://h.example/hooks/rowbranch"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("`/hooks/rowbranch`"), "{}", text(&out));
    assert!(!setup.exists(), "nothing written");
}

#[test]
fn init_writes_when_it_ran_as_sweep_from_and_a_rerun_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let before = chrono::Utc::now() - chrono::Duration::seconds(1);
    assert!(init(dir.path(), &[]).status.success());
    let path = dir.path().join("rowbranch.toml");
    let config = Config::load(&path, &|_| None).unwrap();
    let from = config.routes[0].sweep_from.expect("init writes sweep_from");
    assert!(from >= before && from <= chrono::Utc::now(), "{from}");

    let text = std::fs::read_to_string(&path).unwrap();
    let written = format!(
        "sweep_from = \"{}\"",
        from.format("%Y-%m-%dT%H:%M:%S+00:00")
    );
    assert!(text.contains(&written), "{text}");
    let earlier = "sweep_from = \"2026-01-02T03:04:05+00:00\"";
    std::fs::write(&path, text.replace(&written, earlier)).unwrap();
    assert!(init(dir.path(), &["--force"]).status.success());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(earlier), "a re-run keeps the start: {text}");
}

/// Lets the fake GitHub create the App from `code` into `dir`, as `init --manifest-code` does
/// after the first run.
async fn create_the_app(fake: &FakeGithub, dir: &Path, code: &str) -> Output {
    let args = [
        "init",
        "--dir",
        dir.to_str().unwrap(),
        "--manifest-code",
        code,
    ];
    let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    args.extend(["--api-url".to_owned(), fake.url()]);
    tokio::task::spawn_blocking(move || {
        rowbranch(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap()
}

/// Every file `init` wrote into `dir`, by name, with its bytes.
fn files(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect()
}

#[tokio::test]
async fn a_rerun_after_the_app_exists_applies_the_flag_and_keeps_what_is_deployed() {
    let fake = FakeGithub::start().await;
    fake.add_manifest_code_for_app("the-code", "Rowbranch Acme 2", "rowbranch-acme-2");
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &[]).status.success());
    let created = create_the_app(&fake, dir.path(), "the-code").await;
    assert!(created.status.success(), "{}", text(&created));
    let before = files(dir.path());
    let config_path = dir.path().join("rowbranch.toml");
    let sweep_from = |config: &Config| config.routes[0].sweep_from;
    let loaded = Config::load(&config_path, &|_| None).unwrap();
    let (first_from, first_secrets) = (sweep_from(&loaded), secret(dir.path()));

    // The same flags again: every file as it was, and it says so.
    let same = init(dir.path(), &["--force"]);
    assert!(same.status.success(), "{}", text(&same));
    assert_eq!(files(dir.path()), before);
    let unchanged = text(&same)
        .lines()
        .filter(|l| l.starts_with("  unchanged: "))
        .count();
    assert_eq!(
        unchanged,
        before.len() - 1,
        "all but app.pem:\n{}",
        text(&same)
    );

    let again = init(dir.path(), &["--force", "--max-turns", "12"]);
    assert!(again.status.success(), "{}", text(&again));
    let after = files(dir.path());
    let config = Config::load(&config_path, &|_| None).unwrap();
    let ForgeSettings::Github(github) = &config.forge else {
        panic!("a GitHub config");
    };
    assert!(
        matches!(github.auth, GithubAuth::App { app_id, .. } if app_id == fake.app_id()),
        "the App's id stays: {:?}",
        github.auth
    );
    assert_eq!(config.routes[0].max_turns, 12, "the new flag is applied");
    assert_eq!(sweep_from(&config), first_from);
    assert_eq!(
        after["app.pem"], before["app.pem"],
        "the key, byte for byte"
    );
    assert_eq!(secret(dir.path()), first_secrets);
    for name in ["rowbranch.env", "supabase.sql", "supabase-vault.sql"] {
        assert_eq!(after[name], before[name], "{name}: the secrets stay");
    }
    let workflow = String::from_utf8(after["workflow.yml"].clone()).unwrap();
    let steps = claude_steps(&workflow).unwrap();
    assert_eq!(
        steps[0].allowed_bots, "rowbranch-acme-2[bot]",
        "GitHub's name"
    );
    assert!(workflow.contains("--max-turns 12"), "{workflow}");
    let out = text(&again);
    for line in [
        "changed: rowbranch.toml",
        "changed: workflow.yml",
        "unchanged: rowbranch.env",
        "unchanged: supabase-vault.sql",
    ] {
        assert!(out.lines().any(|l| l.trim() == line), "{line}:\n{out}");
    }
    assert!(
        !out.contains("--manifest-code") && !out.contains("Create the GitHub App"),
        "no step to create the App again:\n{out}"
    );
    assert!(
        out.contains(&format!("the GitHub App exists (id {};", fake.app_id())),
        "{out}"
    );

    // Rotating makes new secrets, everywhere they are written, and keeps the App.
    let rotated = init(dir.path(), &["--force", "--rotate-secrets"]);
    assert!(rotated.status.success(), "{}", text(&rotated));
    let new_secrets = secret(dir.path());
    assert_ne!(new_secrets, first_secrets);
    let (signing, bearer) = new_secrets.split_once(' ').expect("two secrets");
    for (sql, its) in [("supabase-vault.sql", signing), ("supabase.sql", bearer)] {
        let text = std::fs::read_to_string(dir.path().join(sql)).unwrap();
        assert!(text.contains(its), "{sql} holds the new secret");
    }
    for old in first_secrets.split(' ') {
        assert!(!text(&rotated).contains(old) && !text(&rotated).contains(signing));
    }
    assert!(
        text(&rotated).contains("run the SQL file again"),
        "{}",
        text(&rotated)
    );
    let config = std::fs::read_to_string(&config_path).unwrap();
    assert!(
        config.contains(&format!("app_id = {}", fake.app_id())),
        "{config}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("app.pem")).unwrap(),
        before["app.pem"]
    );
    fake.assert_no_unexpected();
}

#[test]
fn a_rerun_that_cannot_read_the_secrets_back_makes_none_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &[]).status.success());
    let vault = std::fs::read(dir.path().join("supabase-vault.sql")).unwrap();
    std::fs::remove_file(dir.path().join("rowbranch.env")).unwrap();
    let again = init(dir.path(), &["--force"]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(
        text(&again).contains("--rotate-secrets"),
        "{}",
        text(&again)
    );
    assert_eq!(
        std::fs::read(dir.path().join("supabase-vault.sql")).unwrap(),
        vault,
        "nothing written"
    );
    let rotated = init(dir.path(), &["--force", "--rotate-secrets"]);
    assert!(rotated.status.success(), "{}", text(&rotated));
    assert!(secret(dir.path()).starts_with("whsec_"));
}

/// A rotation under way (a third secret beside the two `init` wrote) is not cut back to two by a
/// re-run: it refuses, writes nothing, and says how to go on.
#[test]
fn a_rerun_during_a_rotation_refuses_rather_than_drop_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &[]).status.success());
    let env = dir.path().join("rowbranch.env");
    let text_before = std::fs::read_to_string(&env).unwrap();
    let rotating = text_before.replacen(
        "ROWBRANCH_WEBHOOK_SECRET=\"",
        "ROWBRANCH_WEBHOOK_SECRET=\"whsec_bmV3IHNpZ25pbmcga2V5IGZvciByb3RhdGlvbg== ",
        1,
    );
    std::fs::write(&env, &rotating).unwrap();
    let again = init(dir.path(), &["--force", "--max-turns", "12"]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("rotation"), "{}", text(&again));
    assert_eq!(
        std::fs::read_to_string(&env).unwrap(),
        rotating,
        "nothing written"
    );
}

#[test]
fn run_when_writes_the_gate_its_events_and_triggers_on_the_column_s_update() {
    let dir = tempfile::tempdir().unwrap();
    let out = init(dir.path(), &["--run-when", "status=approved"]);
    assert!(out.status.success(), "{}", text(&out));
    let secret = secret(dir.path());
    let env = |key: &str| (key == "ROWBRANCH_WEBHOOK_SECRET").then(|| secret.clone());
    let config = Config::load(&dir.path().join("rowbranch.toml"), &env).unwrap();
    let route = &config.routes[0];
    let gate = route.run_when.as_ref().expect("the gate");
    assert_eq!(gate.to_string(), r#"status = "approved""#);
    assert_eq!(route.events.len(), 2, "{:?}", route.events);
    for name in ["supabase.sql", "supabase-vault.sql"] {
        let sql = std::fs::read_to_string(dir.path().join(name)).unwrap();
        assert!(
            sql.contains(r#"after insert or update of "status" on "public"."feedbacks""#),
            "{name}: {sql}"
        );
    }

    // A boolean, a number and a quoted text, each as the column holds it; in the queue's
    // triggers too.
    for (flag, written, literal) in [
        ("approved=true", "approved = true", "E'true'::jsonb"),
        ("priority=2", "priority = 2", "E'2'::jsonb"),
        (r#"flag="true""#, r#"flag = "true""#, r#"E'"true"'::jsonb"#),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = init_queue(dir.path(), &["--run-when", flag]);
        assert!(out.status.success(), "{}", text(&out));
        let config = Config::load(&dir.path().join("rowbranch.toml"), &|_| None).unwrap();
        assert_eq!(
            config.routes[0].run_when.as_ref().unwrap().to_string(),
            written
        );
        let sql = std::fs::read_to_string(dir.path().join("supabase-queue.sql")).unwrap();
        assert!(sql.contains(literal), "{flag}: {sql}");
        assert!(
            sql.contains(r#"create trigger "rowbranch_ready_rowbranch""#),
            "{sql}"
        );
    }

    // Without a column or a value: a usage error that shows the form.
    let dir = tempfile::tempdir().unwrap();
    let out = init(dir.path(), &["--run-when", "approved"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("status=approved"), "{}", text(&out));
    assert!(!dir.path().join("rowbranch.toml").exists());
}

#[test]
fn run_when_s_steps_keep_the_gate_s_column_the_owner_s_before_the_trigger_goes_in() {
    let dir = tempfile::tempdir().unwrap();
    let out = init(dir.path(), &["--run-when", "status=approved"]);
    assert!(out.status.success(), "{}", text(&out));
    let steps = String::from_utf8_lossy(&out.stdout).into_owned();
    // One statement a line, indented under the step.
    let revoke = [
        r#"       revoke insert, update on "public"."feedbacks" from anon, authenticated;"#,
        r#"       grant insert ("message") on "public"."feedbacks" to anon, authenticated;"#,
    ]
    .join("\n");
    let at = steps
        .find(&revoke)
        .unwrap_or_else(|| panic!("no revoke and grant:\n{steps}"));
    assert!(
        steps.contains("\n  7. Keep the yes the table owner's")
            && steps.contains("never \"status\""),
        "{steps}"
    );
    // Before the trigger's step, which comes next, and doctor's after it.
    let trigger = steps.find("supabase-vault.sql in the SQL editor").unwrap();
    assert!(at < trigger, "{steps}");
    assert!(
        steps.contains("\n  8. In Supabase, turn Database Webhooks on"),
        "{steps}"
    );
    assert!(steps.contains("\n  9. rowbranch doctor"), "{steps}");

    // The queue's, for a table and a text column whose names need quoting.
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--run-when", "Approved=true", "--table", "my \"feedback\""];
    let out = init_queue(
        dir.path(),
        &[&flags[..], &["--text-column", "Body"]].concat(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let steps = String::from_utf8_lossy(&out.stdout).into_owned();
    let table = r#""public"."my ""feedback""""#;
    for line in [
        format!("revoke insert, update on {table} from anon, authenticated;"),
        format!("grant insert (\"Body\") on {table} to anon, authenticated;"),
        "never \"Approved\"".to_owned(),
        "\n  4. In Supabase, enable Queues".to_owned(),
    ] {
        assert!(steps.contains(&line), "no {line:?}:\n{steps}");
    }

    // Without a gate, nothing to keep.
    let dir = tempfile::tempdir().unwrap();
    let out = init(dir.path(), &[]);
    assert!(!text(&out).contains("revoke"), "{}", text(&out));
}
