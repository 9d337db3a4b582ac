//! The config file's keys, their defaults and their refusals, through [`Config::parse`].

use std::path::Path;
use std::time::Duration;

use super::*;
use crate::event::EventKind;
use crate::identity::QueueName;

/// A GitHub route with the least the github forge needs.
const GITHUB: &str = r#"
    [github]
    app_id = 123456
    private_key_path = "app.pem"
    [[routes]]
    table = "feedbacks"
    repo = "acme/app"
    branch_prefix = "feedback"
    event_type = "feedback"
"#;
const SECRET: &str = "a-webhook-secret-of-32-characters";

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("/etc/rowbranch/rowbranch.toml"), &no_env)
}

const LOCAL: &str = TEST_LOCAL_CONFIG;

#[test]
fn a_minimal_github_config_gets_the_documented_defaults() {
    let config = parse(GITHUB).unwrap();
    assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(config.reconcile.every, None);
    assert_eq!(config.reconcile.window, Duration::from_secs(48 * 3600));
    let ForgeSettings::Github(github) = &config.forge else {
        panic!("the default forge is github");
    };
    let GithubAuth::App { app_id, key } = &github.auth else {
        panic!("the App");
    };
    assert_eq!(*app_id, 123456);
    assert_eq!(github.pace.burst, 10);
    assert_eq!(github.pace.hourly_max, 450);
    assert_eq!(github.retry_budget, Duration::from_secs(30));
    assert!(matches!(key, PrivateKeySource::File(p) if p == Path::new("/etc/rowbranch/app.pem")));
    let route = &config.routes[0];
    assert_eq!(route.slug_max_len, 40);
    assert_eq!(route.events, vec![EventKind::Insert]);
    assert_eq!(route.payload_template, None);
    assert_eq!(config.webhook.respond_within, Duration::from_millis(800));
    assert_eq!(config.webhook.read_timeout, Duration::from_secs(10));
    assert_eq!(config.webhook.max_connections, 512);
    assert_eq!(github.max_concurrent_requests, 16);
    assert_eq!(github.queue_capacity, 10_000);
    assert_eq!(github.queue_bytes, 32 << 20);
    assert_eq!(config.shutdown_grace, Duration::from_secs(20));
}

#[test]
fn a_minimal_local_config_gets_the_defaults() {
    let config = parse(LOCAL).unwrap();
    let ForgeSettings::Local(LocalSettings { path, on_dispatch }) = &config.forge else {
        panic!("local forge expected");
    };
    assert_eq!(path, Path::new("/etc/rowbranch/repo.git"));
    assert!(on_dispatch.is_none());
    let route = &config.routes[0];
    assert_eq!(route.table_name(), "public.feedbacks");
    assert_eq!(route.id_column, "id");
    assert_eq!(route.text_column.as_deref(), Some("message"));
    assert_eq!(route.created_column, "created_at");
    assert_eq!(config.routes.len(), 1);
}

#[test]
fn an_unknown_key_is_named_with_the_file() {
    let err = parse(&LOCAL.replace("event_type", "evnt_type"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("/etc/rowbranch/rowbranch.toml"), "{err}");
    assert!(err.contains("evnt_type"), "{err}");
}

#[test]
fn a_secret_in_the_file_is_refused_with_the_variable_to_use() {
    let err = parse(&format!("[webhook]\nsecret = \"x\"\n{LOCAL}"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("ROWBRANCH_WEBHOOK_SECRET"), "{err}");
}

#[test]
fn each_missing_required_route_key_is_named() {
    for key in ["table", "repo", "branch_prefix", "event_type"] {
        let text: String = LOCAL
            .lines()
            .filter(|l| !l.trim_start().starts_with(&format!("{key} =")))
            .collect::<Vec<_>>()
            .join("\n");
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains(&format!("`{key}` is missing")), "{key}: {err}");
    }
}

/// The events a gated route takes.
const BOTH: &str = "events = [\"INSERT\", \"UPDATE\"]";

#[test]
fn a_gate_holds_a_column_and_a_scalar() {
    let config = parse(&format!(
        "{LOCAL}\n{BOTH}\nrun_when = {{ column = \"approved\", equals = true }}"
    ))
    .unwrap();
    let gate = config.routes[0].run_when.as_ref().unwrap();
    assert_eq!(gate.to_string(), "approved = true");
    assert!(gate.passes(Some(&serde_json::json!(true))));
    assert!(parse(LOCAL).unwrap().routes[0].run_when.is_none());
    // Whole numbers past 2^53 compare exactly, as the trigger's jsonb does.
    let big = parse(&format!(
        "{LOCAL}\n{BOTH}\nrun_when = {{ column = \"n\", equals = 9007199254740993 }}"
    ))
    .unwrap();
    let big = big.routes[0].run_when.as_ref().unwrap();
    assert!(big.passes(Some(&serde_json::json!(9007199254740993_i64))));
    assert!(!big.passes(Some(&serde_json::json!(9007199254740992_i64))));
}

#[test]
fn bad_values_say_what_is_wrong() {
    let cases = [
        (LOCAL.replace("acme/app", "acme"), "owner/name"),
        (
            LOCAL.replace(
                "branch_prefix = \"feedback\"",
                "branch_prefix = \"feed back\"",
            ),
            "branch_prefix",
        ),
        (
            format!("reconcile_every = \"soon\"\n{LOCAL}"),
            "reconcile_every",
        ),
        (format!("listen = \"localhost\"\n{LOCAL}"), "HOST:PORT"),
        (
            LOCAL.replace("kind = \"local\"", "kind = \"gitlab\""),
            "\"gitlab\" is not a forge",
        ),
        (format!("{LOCAL}\nevents = [\"DELETE\"]"), "DELETE"),
        (format!("{LOCAL}\nslug_max_len = 500"), "slug_max_len"),
        (format!("{LOCAL}\nmax_turns = 0"), "max_turns = 0"),
        (
            format!("{LOCAL}\nsweep_from = \"2026-12-05 21:04\""),
            "sweep_from = \"2026-12-05 21:04\" is not an RFC 3339 instant",
        ),
        (
            format!("{LOCAL}\nmax_rows_per_hour = 60"),
            "max_rows_per_hour is set on a route with intake = \"webhook\"",
        ),
        (
            format!("{LOCAL}\nintake = \"pgmq\"\nmax_rows_per_hour = 0"),
            "max_rows_per_hour = 0",
        ),
        (
            format!("{LOCAL}\nwork_timeout_minutes = 0"),
            "work_timeout_minutes = 0 is out of range: 1 to 360",
        ),
        (
            format!("{LOCAL}\nwork_timeout_minutes = 361"),
            "work_timeout_minutes = 361",
        ),
        (
            LOCAL.replace(
                "event_type = \"feedback\"",
                &format!("event_type = \"{}\"", "e".repeat(101)),
            ),
            "100 characters",
        ),
        (
            "[forge]\nkind = \"local\"\npath = \"r.git\"".to_owned(),
            "no [[routes]]",
        ),
        (
            format!("{LOCAL}\nrun_when = {{ column = \"status\", equals = \"approved\" }}"),
            "set events = [\"INSERT\", \"UPDATE\"]",
        ),
        (
            format!("{LOCAL}\n{BOTH}\nrun_when = {{ column = \"status\", equals = [1] }}"),
            "run_when's equals is array [1]: give a string, a boolean or a number",
        ),
        (
            format!("{LOCAL}\n{BOTH}\nrun_when = {{ column = \" \", equals = true }}"),
            "run_when's column is empty",
        ),
        (
            format!("{LOCAL}\n{BOTH}\nrun_when = {{ column = \"status\" }}"),
            "missing field `equals`",
        ),
        (
            format!("{LOCAL}\n{BOTH}\nrun_when = {{ column = \"status\", equals = 1 }}\nstatus_column = \"status\""),
            "status_column = \"status\" is the route's run_when's column too",
        ),
        (
            format!("{LOCAL}\nstatus_column = \"id\""),
            "status_column = \"id\" is the route's id_column too",
        ),
        (
            format!("{LOCAL}\npull_request_column = \"message\""),
            "pull_request_column = \"message\" is the route's text_column too",
        ),
        (
            format!("{LOCAL}\nstatus_column = \"s\"\npull_request_column = \"s\""),
            "status_column and pull_request_column name the same column",
        ),
    ];
    for (text, expected) in cases {
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains(expected), "expected {expected:?} in: {err}");
    }
}

#[test]
fn two_routes_for_one_table_are_refused() {
    let route = LOCAL.split("[[routes]]").nth(1).unwrap();
    let err = parse(&format!("{LOCAL}\n[[routes]]{route}"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("one table takes one route"), "{err}");
}

#[test]
fn the_environment_beats_the_file() {
    let env = |key: &str| match key {
        "ROWBRANCH_LISTEN" => Some("127.0.0.1:9999".to_owned()),
        "PORT" => Some("7000".to_owned()),
        "GITHUB_APP_ID" => Some("42".to_owned()),
        "GITHUB_APP_PRIVATE_KEY" => Some("-----BEGIN PRIVATE KEY-----".to_owned()),
        "GITHUB_API_URL" => Some("https://ghe.example.com/api/v3/".to_owned()),
        "ROWBRANCH_WEBHOOK_SECRET" => Some(SECRET.to_owned()),
        _ => None,
    };
    let config = Config::parse(GITHUB, Path::new("rowbranch.toml"), &env).unwrap();
    assert_eq!(config.listen.to_string(), "127.0.0.1:9999");
    let ForgeSettings::Github(github) = &config.forge else {
        panic!("github forge expected");
    };
    let GithubAuth::App { app_id, key } = &github.auth else {
        panic!("the App");
    };
    assert_eq!(*app_id, 42);
    assert!(matches!(key, PrivateKeySource::Pem(_)));
    assert_eq!(github.api_url, "https://ghe.example.com/api/v3");
    assert!(!format!("{config:?}").contains("BEGIN PRIVATE KEY"));
    assert!(config.webhook.secrets.is_some());
}

#[test]
fn port_alone_listens_on_every_interface() {
    let env = |key: &str| (key == "PORT").then(|| "7000".to_owned());
    let config = Config::parse(LOCAL, Path::new("rowbranch.toml"), &env).unwrap();
    assert_eq!(config.listen.to_string(), "0.0.0.0:7000");
}

#[test]
fn a_listen_address_may_name_a_host_and_says_which_setting_chose_it() {
    let listen = |file: &str, env: &[(&str, &str)]| {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let lookup = move |key: &str| env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
        Config::parse(
            &format!("listen = \"{file}\"\n{LOCAL}"),
            Path::new("rowbranch.toml"),
            &lookup,
        )
        .map(|c| c.listen)
    };
    let named = listen("localhost:8080", &[]).unwrap();
    assert_eq!(named.host, ListenHost::Name("localhost".into()));
    assert_eq!((named.port, named.origin), (8080, ListenOrigin::File));
    assert_eq!(named.to_string(), "localhost:8080");
    let from_env = listen(
        "127.0.0.1:1",
        &[("ROWBRANCH_LISTEN", "Rowbranch.Internal:9000")],
    );
    let from_env = from_env.unwrap();
    assert_eq!(from_env.host, ListenHost::Name("rowbranch.internal".into()));
    assert_eq!(from_env.origin, ListenOrigin::Listen);
    let v6 = listen("[::1]:8080", &[]).unwrap();
    assert_eq!(v6.host, ListenHost::Ip("::1".parse().unwrap()));
    assert_eq!(v6.to_string(), "[::1]:8080");
    assert_eq!(
        listen("127.0.0.1:1", &[("PORT", "7000")]).unwrap().origin,
        ListenOrigin::Port
    );
    for (bad, why) in [
        ("localhost", "no port"),
        ("localhost:http", "not a port number"),
        ("::1:8080", "brackets"),
        ("bad_host:8080", "not an IP address or a host name"),
        ("-x:8080", "not an IP address or a host name"),
        (":8080", "not an IP address or a host name"),
    ] {
        let err = listen(bad, &[]).unwrap_err().to_string();
        assert!(
            err.contains(why) && err.contains("HOST:PORT"),
            "{bad}: {err}"
        );
    }
    let err = listen("127.0.0.1:1", &[("ROWBRANCH_LISTEN", "localhost")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("ROWBRANCH_LISTEN=`localhost`"), "{err}");
}

#[test]
fn a_short_webhook_secret_is_a_config_error() {
    let env = |key: &str| (key == "ROWBRANCH_WEBHOOK_SECRET").then(|| "short".to_owned());
    let err = Config::parse(LOCAL, Path::new("rowbranch.toml"), &env)
        .unwrap_err()
        .to_string();
    assert!(err.contains("ROWBRANCH_WEBHOOK_SECRET"), "{err}");
    assert!(
        !err.contains("short\""),
        "the secret must not be echoed: {err}"
    );
}

#[test]
fn a_payload_template_is_named_relative_to_the_config_and_not_read() {
    let config = parse(&format!("{LOCAL}\npayload_template = \"payload.json.j2\"")).unwrap();
    assert_eq!(
        config.routes[0].payload_template,
        Some(PayloadTemplateSource::File(
            "/etc/rowbranch/payload.json.j2".into()
        ))
    );
}
#[test]
fn a_payload_template_inline_is_the_template_itself_and_excludes_the_file() {
    let template = "{\"id\": {{ id | tojson }}}\n";
    let config = parse(&format!(
        "{LOCAL}\npayload_template_inline = '''\n{template}'''"
    ))
    .unwrap();
    assert_eq!(
        config.routes[0].payload_template,
        Some(PayloadTemplateSource::Inline(template.to_owned()))
    );
    let err = parse(&format!(
        "{LOCAL}\npayload_template = \"p.j2\"\npayload_template_inline = \"{{}}\""
    ))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("payload_template and payload_template_inline are both set"),
        "{err}"
    );
}

#[test]
fn an_empty_text_column_means_no_slug() {
    let config = parse(&format!("{LOCAL}\ntext_column = \"\"")).unwrap();
    assert_eq!(config.routes[0].text_column, None);
}

#[test]
fn a_pgmq_route_reads_the_queue_of_the_pgmq_table() {
    let config = parse(&format!("{LOCAL}\nintake = \"pgmq\"")).unwrap();
    let unbounded = Intake::Pgmq {
        max_rows_per_hour: None,
    };
    assert_eq!(config.routes[0].intake, unbounded);
    assert!(config.reads_the_queue() && !config.takes_webhooks());
    assert_eq!(config.pgmq.queue, "rowbranch");
    assert_eq!(config.pgmq.dead_letter, "rowbranch_dead");
    assert_eq!(config.pgmq.visibility_timeout, Duration::from_secs(60));
    assert_eq!(
        config.pgmq.archive_retention,
        Duration::from_secs(7 * 86_400)
    );
    let text =
        format!("[pgmq]\nqueue = \"rows_q\"\nbatch = 10\narchive_retention = \"2d\"\n{LOCAL}");
    let config = parse(&text).unwrap();
    assert_eq!(config.pgmq.queue, "rows_q");
    assert_eq!(
        config.pgmq.dead_letter, "rows_q_dead",
        "the queue's own by default"
    );
    assert_eq!(config.pgmq.batch, 10);
    assert_eq!(
        config.pgmq.archive_retention,
        Duration::from_secs(2 * 86_400)
    );
    assert!(parse(LOCAL).unwrap().takes_webhooks());
}

#[test]
fn queue_names_are_checked_as_pgmq_would_store_them() {
    for (pgmq, expected) in [
        ("queue = \"Rows\"", "not a queue name"),
        ("queue = \"9rows\"", "not a queue name"),
        (
            &format!("queue = \"{}\"", "q".repeat(48)),
            "not a queue name",
        ),
        ("dead_letter = \"a-b\"", "not a queue name"),
        (
            &format!("queue = \"{}\"", "q".repeat(45)),
            "set [pgmq] dead_letter",
        ),
        ("queue = \"x\"\ndead_letter = \"x\"", "both \"x\""),
        ("batch = 0", "batch"),
        ("visibility_timeout_s = 3", "at least 10"),
    ] {
        let err = parse(&format!("[pgmq]\n{pgmq}\n{LOCAL}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{pgmq}: {err}");
    }
    assert!(QueueName::parse(&"q".repeat(47)).is_ok() && QueueName::parse("_a1").is_ok());
    let err = parse(&format!("{LOCAL}\nintake = \"kafka\""))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not an intake"), "{err}");
}

#[test]
fn the_sweep_is_on_by_default_wherever_database_url_is_set() {
    let with_url = |text: &str| {
        Config::parse(
            text,
            Path::new("/etc/rowbranch/rowbranch.toml"),
            &|key: &str| (key == "DATABASE_URL").then(|| "postgres://u@db/x".to_owned()),
        )
    };
    let six_hours = Some(Duration::from_secs(6 * 3600));
    assert_eq!(with_url(GITHUB).unwrap().reconcile.every, six_hours);
    assert_eq!(parse(GITHUB).unwrap().reconcile.every, None);
    let off = format!("reconcile_every = \"off\"\n{GITHUB}");
    assert_eq!(with_url(&off).unwrap().reconcile.every, None);
    let hourly = format!("reconcile_every = \"1h\"\n{GITHUB}");
    assert_eq!(
        with_url(&hourly).unwrap().reconcile.every,
        Some(Duration::from_secs(3600))
    );
}

#[test]
fn queue_bytes_is_at_least_a_mebibyte() {
    let at = |bytes: usize| {
        parse(&GITHUB.replace("[github]\n", &format!("[github]\nqueue_bytes = {bytes}\n")))
    };
    let err = at(1000).unwrap_err().to_string();
    assert!(
        err.contains("queue_bytes") && err.contains("1 MiB"),
        "{err}"
    );
    let ForgeSettings::Github(github) = at(1 << 20).unwrap().forge else {
        panic!("the github forge");
    };
    assert_eq!(github.queue_bytes, 1 << 20);
}

/// [`Config::load_for_serve`] of `text` in a file of its own, with `vars` and `insecure`.
fn serve(text: &str, vars: &[(&str, &str)], insecure: Insecure) -> Result<Config, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rowbranch.toml");
    std::fs::write(&path, text).unwrap();
    let env = |key: &str| {
        vars.iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.to_string())
    };
    Config::load_for_serve(&path, &env, insecure).map_err(|e| e.to_string())
}

#[test]
fn serve_refuses_a_webhook_route_without_a_secret_unless_told_to_take_deliveries_without() {
    let err = serve(LOCAL, &[], Insecure::default()).unwrap_err();
    assert!(
        err.contains("no webhook secret") && err.contains("--insecure-no-auth"),
        "{err}"
    );
    let no_auth = Insecure {
        no_auth: true,
        ..Insecure::default()
    };
    assert!(serve(LOCAL, &[], no_auth).is_ok());
    assert!(serve(
        LOCAL,
        &[("ROWBRANCH_WEBHOOK_SECRET", SECRET)],
        Insecure::default()
    )
    .is_ok());
    // The other commands load it all the same: only serve takes deliveries.
    assert!(parse(LOCAL).is_ok());
}

#[test]
fn serve_refuses_a_route_that_writes_its_rows_states_without_database_url() {
    let text = format!("{LOCAL}\nstatus_column = \"rowbranch_status\"");
    let err = serve(
        &text,
        &[("ROWBRANCH_WEBHOOK_SECRET", &"s".repeat(32))],
        Insecure::default(),
    )
    .unwrap_err();
    assert!(
        err.contains("writes the row's state back") && err.contains("DATABASE_URL"),
        "{err}"
    );
    let url = [
        ("ROWBRANCH_WEBHOOK_SECRET", &*"s".repeat(32)),
        ("DATABASE_URL", "postgres://h/db"),
    ];
    assert!(serve(&text, &url, Insecure::default()).is_ok());
}

#[test]
fn serve_refuses_a_queue_route_without_database_url() {
    let queue = format!("{LOCAL}\nintake = \"pgmq\"");
    let err = serve(&queue, &[], Insecure::default()).unwrap_err();
    assert!(
        err.contains("a route reads the queue (intake = \"pgmq\") but DATABASE_URL is not set"),
        "{err}"
    );
    let url = ("DATABASE_URL", "postgres://u@db/x");
    assert!(serve(&queue, &[url], Insecure::default()).is_ok());
    assert!(parse(&queue).is_ok(), "preview and doctor need no database");
}

#[test]
fn serve_refuses_a_status_page_without_a_long_password_unless_told_it_may_be_public() {
    let page = format!("status_page = true\n{LOCAL}");
    let secret = ("ROWBRANCH_WEBHOOK_SECRET", SECRET);
    for password in [None, Some("fifteen-chars-x")] {
        let vars: Vec<(&str, &str)> = [
            Some(secret),
            password.map(|p| ("ROWBRANCH_STATUS_PASSWORD", p)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let err = serve(&page, &vars, Insecure::default()).unwrap_err();
        assert!(err.contains("ROWBRANCH_STATUS_PASSWORD"), "{err}");
        assert!(
            !err.contains("fifteen-chars-x"),
            "the password is never shown: {err}"
        );
        let public = Insecure {
            public_status: true,
            ..Insecure::default()
        };
        assert!(serve(&page, &vars, public).is_ok());
    }
    let long = ("ROWBRANCH_STATUS_PASSWORD", "sixteen-chars-xy");
    assert!(serve(&page, &[secret, long], Insecure::default()).is_ok());
}

#[test]
fn healthcheck_finds_the_listen_address_as_serve_does_without_a_valid_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rowbranch.toml");
    let none = |_: &str| None;
    let find = |env: &dyn Fn(&str) -> Option<String>| listen_as_written(&path, env);
    assert_eq!(
        find(&none),
        ("127.0.0.1:8080".to_owned(), "the default".to_owned())
    );
    std::fs::write(&path, "listen = \"0.0.0.0:9\"\nno_such_key = 1\n").unwrap();
    let written = format!("listen in {}", path.display());
    assert_eq!(find(&none), ("0.0.0.0:9".to_owned(), written));
    let port = |key: &str| (key == "PORT").then(|| "7000".to_owned());
    assert_eq!(find(&port), ("0.0.0.0:7000".to_owned(), "PORT".to_owned()));
    let both = |key: &str| match key {
        "PORT" => Some("7000".to_owned()),
        "ROWBRANCH_LISTEN" => Some("localhost:1".to_owned()),
        _ => None,
    };
    let listen = ("localhost:1".to_owned(), "ROWBRANCH_LISTEN".to_owned());
    assert_eq!(find(&both), listen);
    std::fs::write(&path, "this is not TOML [").unwrap();
    assert_eq!(find(&none).1, "the default");
}
