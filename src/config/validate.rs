//! From the file's shape and the environment's overlay to the plain settings (SPEC §2). Each
//! value is checked here, once, and so is each rule between values — the file's and the
//! environment's, and the ones `serve` adds; a refusal names its key (or its variable) and says
//! how to fix it, and the first refusal, in the file's order, is the one reported.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::env::{
    secret_from_init, Overlay, DATABASE_URL, GITHUB_API_URL, GITHUB_APP_ID, GITHUB_APP_PRIVATE_KEY,
    GITHUB_WEBHOOK_SECRET, LISTEN, PORT, STATUS_PASSWORD, WEBHOOK_SECRET,
};
use super::file::{
    self, RawConfig, RawForge, RawGithub, RawPgmq, RawRoute, RawRunWhen, RawWebhook,
};
use super::settings::{
    AccessToken, Config, ForgeSettings, GithubAuth, GithubSettings, Intake, ListenAddress,
    ListenHost, ListenOrigin, LocalSettings, PaceSettings, PayloadTemplateSource, PgmqSettings,
    PrivateKeySource, ReconcileSettings, Redacted, Route, RunWhen, StatusPage, WebhookSettings,
    DEFAULT_MAX_TURNS, MAX_WORK_TIMEOUT_MINUTES,
};
use super::ConfigError;
use crate::event::EventKind;
use crate::identity::{excerpt, BranchPrefix, EventType, QueueName, RepoName};
use crate::webhook::auth::{Scheme, WebhookSecrets};

/// What `serve` may run without when its command line says so; without them, a config that
/// lacks these is refused (SPEC §3). Its fields are `serve`'s flags.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct Insecure {
    /// Accept deliveries without credentials when ROWBRANCH_WEBHOOK_SECRET is not set.
    /// Anyone who can reach the port can then create branches: never on a public address.
    #[arg(long = "insecure-no-auth")]
    pub no_auth: bool,
    /// Serve the status page (status_page = true) without ROWBRANCH_STATUS_PASSWORD, or with
    /// one shorter than 16 characters. Anyone who can reach the port then reads row ids and
    /// branch names: only on a private address.
    #[arg(long = "insecure-public-status")]
    pub public_status: bool,
}

/// The shortest status page password `serve` takes: 16 characters of hex are 64 bits, which
/// ten guesses a minute (see `http::login`) would not exhaust in the age of the universe.
const MIN_STATUS_PASSWORD_CHARS: usize = 16;

/// The config of the file `raw`, read from `path`, with the environment laid over it; with
/// `serve`, checked for what `serve` needs too. Relative paths in the file are relative to
/// `path`'s folder.
pub(super) fn config(
    raw: RawConfig,
    env: &Overlay,
    path: &Path,
    serve: Option<Insecure>,
) -> Result<Config, ConfigError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let database_url = env.get(DATABASE_URL).map(|url| Redacted(url.to_owned()));
    // Each in the file's order, so that the first refusal is the first in the file.
    let config = Config {
        source: path.to_path_buf(),
        listen: listen_address(raw.listen, env)?,
        shutdown_grace: duration("shutdown_grace", &raw.shutdown_grace)?,
        status_page: raw.status_page.then(|| StatusPage {
            password: env.get(STATUS_PASSWORD).map(|p| Redacted(p.to_owned())),
        }),
        reconcile: ReconcileSettings {
            // On by default wherever it can run: a row its sender did not deliver, or that was
            // refused for a full queue, has no other way back.
            every: match raw.reconcile_every.as_deref() {
                None => database_url
                    .is_some()
                    .then_some(file::DEFAULT_RECONCILE_EVERY),
                Some("off") => None,
                Some(every) => Some(duration("reconcile_every", every)?),
            },
            window: duration("reconcile_window", &raw.reconcile_window)?,
            stale_claim_after: duration("stale_claim_after", &raw.stale_claim_after)?,
        },
        forge: forge(raw.forge, raw.github, dir, env)?,
        webhook: webhook(raw.webhook, env)?,
        pgmq: pgmq(raw.pgmq)?,
        routes: routes(raw.routes, dir)?,
        database_url,
    };
    // With a token, every route reads the queue: webhooks are the App's alone (a delivery is
    // answered within the request, which `drain` does not serve).
    let webhooks = (config.routes.iter().enumerate()).find(|(_, r)| r.takes_webhooks());
    if let (Some(token), Some((i, route))) = (config.forge.token(), webhooks) {
        return Err(invalid!(
            "[github] token_env = \"{}\" and [[routes]] number {} ({}) takes webhooks (intake = \
             \"webhook\", the default): with a token, rowbranch reads the queue (`rowbranch drain`, \
             or `serve` with every route on intake = \"pgmq\"), and only the GitHub App takes \
             webhooks. Set intake = \"pgmq\" on the route, or remove token_env and set the App's \
             app_id and private key",
            token.variable(),
            i + 1,
            route.table_name()
        ));
    }
    if let Some(insecure) = serve {
        serve_rules(&config, insecure)?;
    }
    Ok(config)
}

/// The address as [`Overlay::listen`] finds it, refused with the setting that chose it.
fn listen_address(file: String, env: &Overlay) -> Result<ListenAddress, ConfigError> {
    let (text, origin) = env.listen(file);
    host_port(&text)
        .map(|(host, port)| ListenAddress { host, port, origin })
        .map_err(|why| {
            let setting = match origin {
                ListenOrigin::Port => {
                    let port = env.get(PORT).unwrap_or_default();
                    return invalid!("{PORT}=`{port}` is not a port number (0-65535)");
                }
                ListenOrigin::Listen => format!("{LISTEN}=`{text}`"),
                ListenOrigin::File => format!("listen = `{text}`"),
            };
            invalid!(
                "{setting} is not an address: {why}; use HOST:PORT, e.g. 127.0.0.1:8080 or \
                 localhost:8080"
            )
        })
}

/// `HOST:PORT`: an IP address (IPv6 in brackets) or a host name, and a port; else why not. A
/// name is only checked for its shape here; `serve` resolves it when it starts.
fn host_port(text: &str) -> Result<(ListenHost, u16), String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok((ListenHost::Ip(addr.ip()), addr.port()));
    }
    let (host, port) = text.rsplit_once(':').ok_or("it has no port")?;
    let port = port
        .parse()
        .map_err(|_| format!("`{port}` is not a port number (0-65535)"))?;
    if host.contains(':') || host.starts_with('[') {
        return Err("an IPv6 address goes in brackets, e.g. [::1]:8080".to_owned());
    }
    let is_label = |label: &str| {
        !label.is_empty()
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if host.is_empty() || host.len() > 253 || !host.split('.').all(is_label) {
        return Err(format!("`{host}` is not an IP address or a host name"));
    }
    Ok((ListenHost::Name(host.to_ascii_lowercase()), port))
}

fn duration(key: &str, value: &str) -> Result<Duration, ConfigError> {
    let d = humantime::parse_duration(value).map_err(|e| {
        invalid!(
            "{key} = \"{value}\" is not a duration ({e}): write e.g. \"30m\", \"6h\" or \"2d\""
        )
    })?;
    ensure!(!d.is_zero(), "{key} must be longer than zero");
    Ok(d)
}

/// `value`, unless it is below `least`: the limits under which no work, or no delivery, could
/// be done.
fn at_least<T: Ord + fmt::Display>(key: &str, value: T, least: T) -> Result<T, ConfigError> {
    ensure!(value >= least, "{key} must be at least {least}");
    Ok(value)
}

fn forge(
    raw: RawForge,
    github: RawGithub,
    dir: &Path,
    env: &Overlay,
) -> Result<ForgeSettings, ConfigError> {
    match raw.kind.as_str() {
        "local" => {
            let path = raw.path.ok_or_else(|| {
                invalid!("[forge] kind = \"local\" needs path = \"…\", the git repository to use as the forge")
            })?;
            Ok(ForgeSettings::Local(LocalSettings {
                path: dir.join(path),
                on_dispatch: raw.on_dispatch.filter(|c| !c.trim().is_empty()),
            }))
        }
        "github" if raw.path.is_some() || raw.on_dispatch.is_some() => Err(invalid!(
            "[forge] path and on_dispatch belong to kind = \"local\"; remove them or set kind = \"local\""
        )),
        "github" => github_settings(github, dir, env).map(ForgeSettings::Github),
        other => Err(invalid!(
            "[forge] kind = \"{other}\" is not a forge: use \"github\" or \"local\""
        )),
    }
}

fn github_settings(
    raw: RawGithub,
    dir: &Path,
    env: &Overlay,
) -> Result<GithubSettings, ConfigError> {
    let auth = match &raw.token_env {
        Some(variable) => GithubAuth::Token(token(variable, &raw, env)?),
        None => app(&raw, dir, env)?,
    };
    let api_url = env.get(GITHUB_API_URL).unwrap_or(&raw.api_url);
    ensure!(
        api_url.starts_with("https://") || api_url.starts_with("http://"),
        "api_url = `{api_url}` is not an http(s) URL: use https://api.github.com or https://HOST/api/v3"
    );
    crate::identity::api_url_problem(api_url).map_or(Ok(()), |p| Err(invalid!("{p}")))?;
    // A plain token's default fits GITHUB_TOKEN's 1,000 requests an hour (SPEC §2).
    let hourly_max = raw.write_hourly_max.unwrap_or(match auth {
        GithubAuth::Token(_) => file::TOKEN_WRITE_HOURLY_MAX,
        GithubAuth::App { .. } => file::APP_WRITE_HOURLY_MAX,
    });
    ensure!(
        raw.queue_bytes >= file::MIN_QUEUE_BYTES,
        "[github] queue_bytes = {} is too small: it must be at least {} (1 MiB)",
        raw.queue_bytes,
        file::MIN_QUEUE_BYTES
    );
    Ok(GithubSettings {
        api_url: api_url.trim_end_matches('/').to_owned(),
        auth,
        pace: PaceSettings {
            interval: Duration::from_millis(raw.write_interval_ms),
            burst: at_least("[github] write_burst", raw.write_burst, 1)?,
            hourly_max: at_least("[github] write_hourly_max", hourly_max, 1)?,
        },
        queue_capacity: at_least("[github] queue_capacity", raw.queue_capacity, 1)?,
        queue_bytes: raw.queue_bytes,
        max_concurrent_requests: at_least(
            "[github] max_concurrent_requests",
            raw.max_concurrent_requests,
            1,
        )?,
        retry_budget: Duration::from_millis(raw.retry_budget_ms),
        base_cache: Duration::from_millis(raw.base_cache_ms),
        webhook_secret: github_webhook_secret(env)?,
    })
}

/// `GITHUB_WEBHOOK_SECRET`, taken whole: it is what the App's settings page holds, in which a
/// space is a character like any other. A space or line break at either end is refused rather
/// than trimmed: it would make every signature wrong while looking right, and no secret GitHub
/// makes has one.
fn github_webhook_secret(env: &Overlay) -> Result<Option<Redacted>, ConfigError> {
    let secret = env.get(GITHUB_WEBHOOK_SECRET);
    ensure!(
        secret.is_none_or(|secret| secret.trim() == secret),
        "{GITHUB_WEBHOOK_SECRET} begins or ends with a space or a line break: set it to the \
         secret alone, exactly as the App's settings page (Webhook secret) has it"
    );
    Ok(secret.map(|secret| Redacted(secret.to_owned())))
}

/// The App's id and key: the variables win over the file.
fn app(raw: &RawGithub, dir: &Path, env: &Overlay) -> Result<GithubAuth, ConfigError> {
    let app_id = match env.get(GITHUB_APP_ID) {
        Some(v) => v.parse().map_err(|_| {
            invalid!("{GITHUB_APP_ID}=`{v}` is not a number: use the App ID from the App's settings page")
        })?,
        None => raw.app_id.ok_or_else(|| {
            invalid!("[github] app_id is missing: set it (the App ID from the App's settings page) or set {GITHUB_APP_ID}; or set token_env to authenticate with a token instead")
        })?,
    };
    let key = match (env.get(GITHUB_APP_PRIVATE_KEY), &raw.private_key_path) {
        (Some(pem), _) => PrivateKeySource::Pem(Redacted(pem.to_owned())),
        (None, Some(path)) => PrivateKeySource::File(dir.join(path)),
        (None, None) => return Err(invalid!(
            "no GitHub App private key: set [github] private_key_path or {GITHUB_APP_PRIVATE_KEY} (the PEM text)"
        )),
    };
    Ok(GithubAuth::App { app_id, key })
}

/// The token in the variable `token_env` names. The App's settings beside it are refused,
/// naming both: which of the two rowbranch is would otherwise be a guess. The token's value
/// is never part of a message.
fn token(variable: &str, raw: &RawGithub, env: &Overlay) -> Result<AccessToken, ConfigError> {
    let setting = format!("[github] token_env = \"{}\"", excerpt(variable));
    let is_name = !variable.starts_with(|c: char| c.is_ascii_digit())
        && !variable.is_empty()
        && variable
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
    ensure!(
        is_name,
        "{setting} is not the name of an environment variable: use letters, digits and _, \
         e.g. token_env = \"GITHUB_TOKEN\""
    );
    let variables = [GITHUB_APP_ID, GITHUB_APP_PRIVATE_KEY].map(|v| (v, env.get(v).is_some()));
    let app: Vec<&str> = [
        ("[github] app_id", raw.app_id.is_some()),
        ("[github] private_key_path", raw.private_key_path.is_some()),
    ]
    .into_iter()
    .chain(variables)
    .filter_map(|(name, set)| set.then_some(name))
    .collect();
    ensure!(
        app.is_empty(),
        "{setting} and {} are both set: rowbranch authenticates with a token or as a GitHub \
         App, not both. For the token, remove {0}; for the App, remove token_env",
        app.join(", ")
    );
    let value = (env.named)(variable)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            invalid!(
                "{setting}, but {variable} is not set: set {variable} to a token that can write \
                 the routes' repositories (in a workflow, `{variable}: ${{{{ github.token }}}}` \
                 in the step's env)"
            )
        })?;
    ensure!(
        value.chars().all(|c| c.is_ascii_graphic()),
        "{setting}, but {variable} holds a space, a line break or another character no \
         token has: set it to the token alone"
    );
    let variable = variable.to_owned();
    let value = Redacted(value);
    Ok(AccessToken { variable, value })
}

fn webhook(raw: RawWebhook, env: &Overlay) -> Result<WebhookSettings, ConfigError> {
    ensure!(
        raw.secret.is_none(),
        "[webhook] secret: the secret is never read from the file; set {WEBHOOK_SECRET} instead"
    );
    ensure!(
        !raw.accept.is_empty(),
        "[webhook] accept is empty: every delivery would be refused; list the schemes the \
         trigger uses, e.g. accept = [\"standard-webhooks\"]"
    );
    let accept = raw
        .accept
        .iter()
        .map(|name| {
            Scheme::parse(name).ok_or_else(|| {
                invalid!(
                    "[webhook] accept: \"{}\" is not a scheme: use \"bearer\", \
                     \"standard-webhooks\" or \"hub-signature\"",
                    excerpt(name)
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let secrets = env
        .get(WEBHOOK_SECRET)
        .map(WebhookSecrets::parse)
        .transpose()
        .map_err(|e| invalid!("{WEBHOOK_SECRET}: {e}"))?
        .map(|secrets| secrets.accepting(&accept));
    let max_body_bytes = at_least("[webhook] max_body_bytes", raw.max_body_bytes, 1024)?;
    ensure!(
        raw.read_timeout_ms >= 100,
        "[webhook] read_timeout_ms must be at least 100: a sender needs time to send"
    );
    Ok(WebhookSettings {
        secrets,
        respond_within: Duration::from_millis(raw.respond_within_ms),
        max_body_bytes,
        read_timeout: Duration::from_millis(raw.read_timeout_ms),
        max_connections: at_least("[webhook] max_connections", raw.max_connections, 1)?,
    })
}

/// The `[pgmq]` settings.
fn pgmq(raw: RawPgmq) -> Result<PgmqSettings, ConfigError> {
    let queue_name = |key: &'static str, name: &str| {
        QueueName::parse(name).map_err(|_| {
            invalid!(
                "[pgmq] {key} = \"{}\" is not a queue name rowbranch takes: use 1 to 47 of \
                 a-z, 0-9 and _, not starting with a digit (pgmq prefixes and lowercases it)",
                excerpt(name)
            )
            .in_key("pgmq", key)
        })
    };
    let queue = queue_name("queue", &raw.queue)?;
    let dead_letter = match &raw.dead_letter {
        Some(name) => queue_name("dead_letter", name)?,
        // The queue's own: what `init --queue` creates, and for the default queue, the
        // default `rowbranch_dead`.
        None => queue.default_dead_letter().map_err(|_| {
            invalid!(
                "[pgmq] queue = \"{queue}\" leaves no room for its dead-letter queue's default name \
                 (\"{queue}_dead\" is over 47 characters): set [pgmq] dead_letter, or use a shorter queue name"
            )
            .in_key("pgmq", "queue")
        })?,
    };
    ensure!(
        queue != dead_letter,
        "[pgmq] queue and dead_letter are both \"{queue}\": give the dead letters a queue of their own, e.g. \"{queue}_dead\""
    );
    ensure!(
        (1..=1000).contains(&raw.batch),
        "[pgmq] batch = {}: read 1 to 1000 messages at once",
        raw.batch
    );
    ensure!(
        raw.visibility_timeout_s >= 10,
        "[pgmq] visibility_timeout_s must be at least 10: a message is renewed every third \
         of it, and a shorter lease would be lost to a slow round trip"
    );
    ensure!(
        raw.backoff_base_ms > 0 && raw.backoff_cap_ms >= raw.backoff_base_ms,
        "[pgmq] backoff_base_ms must be at least 1 and backoff_cap_ms at least backoff_base_ms"
    );
    Ok(PgmqSettings {
        queue,
        dead_letter,
        batch: raw.batch,
        // Never a busy loop, whatever the file says.
        poll_interval: Duration::from_millis(raw.poll_interval_ms).max(Duration::from_millis(10)),
        visibility_timeout: Duration::from_secs(raw.visibility_timeout_s),
        archive_retention: duration("[pgmq] archive_retention", &raw.archive_retention)?,
        backoff_base: Duration::from_millis(raw.backoff_base_ms),
        backoff_cap: Duration::from_millis(raw.backoff_cap_ms),
    })
}

/// At least one route, and at most one per table.
fn routes(raw: Vec<RawRoute>, dir: &Path) -> Result<Vec<Arc<Route>>, ConfigError> {
    ensure!(
        !raw.is_empty(),
        "no [[routes]]: add one that names the table and the repository, e.g.\n\n[[routes]]\ntable = \"feedbacks\"\nrepo = \"owner/name\"\nbranch_prefix = \"feedback\"\nevent_type = \"feedback\""
    );
    let mut routes: Vec<Arc<Route>> = Vec::with_capacity(raw.len());
    for (number, raw) in (1..).zip(raw) {
        let route = route(raw, dir).map_err(|e| e.within(format!("[[routes]] number {number}")))?;
        ensure!(
            !(routes.iter()).any(|r| (&r.schema, &r.table) == (&route.schema, &route.table)),
            "[[routes]] number {number}: table {} has a route already; one table takes one route",
            route.table_name()
        );
        routes.push(Arc::new(route));
    }
    Ok(routes)
}

fn route(raw: RawRoute, dir: &Path) -> Result<Route, ConfigError> {
    let required = |value: Option<String>, key: &'static str, example: &str| {
        value.filter(|v| !v.trim().is_empty()).ok_or_else(|| {
            invalid!("`{key}` is missing: e.g. {key} = \"{example}\"").in_key("routes", key)
        })
    };
    let table = required(raw.table, "table", "feedbacks")?;
    let repo = required(raw.repo, "repo", "owner/name")?;
    let repo =
        RepoName::parse(&repo).map_err(|e| invalid!("repo: {e}").in_key("routes", "repo"))?;
    let prefix = required(raw.branch_prefix, "branch_prefix", "feedback")?;
    let branch_prefix = BranchPrefix::parse(&prefix).map_err(|e| {
        invalid!("branch_prefix = \"{prefix}\": {e}").in_key("routes", "branch_prefix")
    })?;
    ensure!(
        raw.slug_max_len <= 100,
        "slug_max_len = {} is too long: branch names stay readable (and within git's \
         limits) at 100 or less; 0 means no slug",
        raw.slug_max_len
    );
    let event_type = required(raw.event_type, "event_type", "feedback")?;
    let event_type = EventType::parse(&event_type)
        .map_err(|e| invalid!("event_type: {e}").in_key("routes", "event_type"))?;
    let events = raw
        .events
        .iter()
        .map(|e| match EventKind::parse(&e.to_ascii_uppercase()) {
            Some(kind @ (EventKind::Insert | EventKind::Update)) => Ok(kind),
            _ => Err(invalid!(
                "events: `{e}` is not an event a route can take: use \"INSERT\" and/or \"UPDATE\""
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    ensure!(
        !events.is_empty(),
        "events is empty: the route would take nothing; use [\"INSERT\"]"
    );
    let intake = match (raw.intake.as_str(), raw.max_rows_per_hour) {
        ("webhook", None) => Ok(Intake::Webhook),
        ("webhook", Some(_)) => Err(invalid!(
            "max_rows_per_hour is set on a route with intake = \"webhook\": a webhook row \
             turned away is lost until a sweep, which would have to keep the same bound past \
             its window; read the rows from the queue (intake = \"pgmq\"), where rows over the \
             bound wait, or remove max_rows_per_hour"
        )),
        ("pgmq", Some(0)) => Err(invalid!(
            "max_rows_per_hour = 0 would start no row at all: give the most rows an hour may \
             start, e.g. max_rows_per_hour = 60, or remove it for no bound"
        )),
        ("pgmq", max_rows_per_hour) => Ok(Intake::Pgmq { max_rows_per_hour }),
        (other, _) => Err(invalid!(
            "intake = \"{other}\" is not an intake: use \"webhook\" (Supabase's Database \
             Webhooks, the default) or \"pgmq\" (a Supabase Queue the INSERT fills)"
        )
        .in_key("routes", "intake")),
    }?;
    ensure!(
        raw.max_turns > 0,
        "max_turns = 0 would let Claude take no turn at all: give the most turns one run \
         may take, e.g. max_turns = {DEFAULT_MAX_TURNS}"
    );
    let minutes = raw.work_timeout_minutes;
    ensure!(
        (1..=MAX_WORK_TIMEOUT_MINUTES).contains(&minutes),
        "work_timeout_minutes = {minutes} is out of range: 1 to {MAX_WORK_TIMEOUT_MINUTES} \
         (a job on a GitHub-hosted runner stops after {MAX_WORK_TIMEOUT_MINUTES} minutes \
         anyway)"
    );
    let payload_template = match (raw.payload_template, raw.payload_template_inline) {
        (Some(_), Some(_)) => Err(invalid!(
            "payload_template and payload_template_inline are both set: keep the file, or the \
             template's text, not both"
        )),
        (Some(file), None) => Ok(Some(PayloadTemplateSource::File(dir.join(file)))),
        (None, Some(text)) => Ok(Some(PayloadTemplateSource::Inline(text))),
        (None, None) => Ok(None),
    }?;
    let sweep_from = raw.sweep_from.map(|from| {
        let instant = chrono::DateTime::parse_from_rfc3339(from.trim());
        instant.map(|instant| instant.to_utc()).map_err(|e| {
            invalid!(
                "sweep_from = \"{from}\" is not an RFC 3339 instant ({e}): write the date, the \
                 time and the offset, quoted, e.g. sweep_from = \"{}\"",
                sweep_from_now()
            )
            .in_key("routes", "sweep_from")
        })
    });
    let sweep_from = sweep_from.transpose()?;
    let run_when = raw.run_when.map(run_when).transpose()?;
    ensure!(
        run_when.is_none() || events.contains(&EventKind::Update),
        "run_when is set but events does not take \"UPDATE\": a row approved after it was \
         written would never run; set events = [\"INSERT\", \"UPDATE\"]"
    );
    // The columns rowbranch writes are its own: a user's column written over would be lost,
    // and a gate rowbranch wrote would open itself.
    let own = |key: &str, example: &str, column: Option<String>| {
        let Some(column) = column.map(|c| c.trim().to_owned()) else {
            return Ok(None);
        };
        let gate = run_when.as_ref().map(|gate| gate.column.as_str());
        let taken = [
            ("id_column", Some(raw.id_column.as_str())),
            ("created_column", Some(raw.created_column.as_str())),
            ("run_when's column", gate),
            ("text_column", Some(raw.text_column.as_str())),
        ];
        match taken.into_iter().find(|(_, c)| *c == Some(column.as_str())) {
            _ if column.is_empty() => Err(invalid!(
                "{key} is empty: name a text column, e.g. {key} = \"{example}\""
            )),
            Some((other, _)) => Err(invalid!(
                "{key} = \"{column}\" is the route's {other} too: rowbranch writes {key}, so it \
                 needs a text column of its own, e.g. {key} = \"{example}\""
            )),
            None => Ok(Some(column)),
        }
    };
    let status_column = own("status_column", "rowbranch_status", raw.status_column)?;
    let pull_request_column = own(
        "pull_request_column",
        "pull_request_url",
        raw.pull_request_column,
    )?;
    ensure!(
        status_column.is_none() || status_column != pull_request_column,
        "status_column and pull_request_column name the same column: give each its own"
    );
    Ok(Route {
        table,
        schema: raw.schema,
        repo,
        events,
        id_column: raw.id_column,
        // An empty text column means "no slug".
        text_column: Some(raw.text_column).filter(|c| !c.trim().is_empty()),
        branch_prefix,
        slug_max_len: raw.slug_max_len,
        event_type,
        payload_template,
        created_column: raw.created_column,
        intake,
        max_turns: raw.max_turns,
        work_timeout_minutes: minutes,
        sweep_from,
        run_when,
        status_column,
        pull_request_column,
    })
}

/// The gate: a column, and a value a column can hold and a webhook's JSON can carry.
fn run_when(raw: RawRunWhen) -> Result<RunWhen, ConfigError> {
    let example = "e.g. run_when = { column = \"status\", equals = \"approved\" }";
    let column = raw.column.trim().to_owned();
    ensure!(
        !column.is_empty(),
        "run_when's column is empty: name the column the gate reads, {example}"
    );
    // A float that is not finite becomes JSON's null; a date, an array or a table is not a
    // scalar.
    match serde_json::to_value(&raw.equals) {
        Ok(equals) if equals.is_string() || equals.is_boolean() || equals.is_number() => {
            Ok(RunWhen { column, equals })
        }
        _ => Err(invalid!(
            "run_when's equals is {} {}: give a string, a boolean or a number, the value the \
             column holds once a row may run, {example}",
            raw.equals.type_str(),
            raw.equals
        )),
    }
}

/// `sweep_from`'s value for "from now on", as `init` writes it and messages suggest it.
pub fn sweep_from_now() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S+00:00")
        .to_string()
}

/// The rules `serve` adds: what its parts need of the environment — the database for the
/// queue, a webhook secret for webhook routes, a password for the status page — unless
/// `insecure` lets it do without; and, said once at start, what would make it run worse than
/// its config suggests.
fn serve_rules(config: &Config, insecure: Insecure) -> Result<(), ConfigError> {
    if let Some(route) = config.routes.iter().find(|r| r.writes_back()) {
        ensure!(
            config.database_url.is_some(),
            "the route for {} writes the row's state back (status_column or \
             pull_request_column) but {DATABASE_URL} is not set: set it to the database's \
             connection string, or remove those keys",
            route.table_name()
        );
    }
    ensure!(
        !config.reads_the_queue() || config.database_url.is_some(),
        "a route reads the queue (intake = \"pgmq\") but {DATABASE_URL} is not set: set it \
         to the database's connection string (Supabase: Project Settings → Database → \
         Connection string; sslmode=verify-full with the project's CA)"
    );
    let webhooks = config.takes_webhooks();
    if webhooks && config.webhook.secrets.is_none() && !insecure.no_auth {
        let set = secret_from_init(&config.source).unwrap_or_else(|| {
            format!(
                "set {WEBHOOK_SECRET} (at least 24 characters; several separated by spaces to \
                 rotate)"
            )
        });
        return Err(invalid!(
            "no webhook secret: {set}; or pass --insecure-no-auth to accept deliveries without \
             credentials (never on a public address)"
        ));
    }
    #[cfg(unix)]
    warn_if_key_exposed(&config.forge);
    let secrets = config.webhook.secrets.as_ref();
    if let Some(secrets) = secrets.filter(|s| webhooks && !s.can_authenticate_any()) {
        tracing::warn!(
            "[webhook] accept = {} takes none of the secrets in {WEBHOOK_SECRET}: every \
             delivery will be refused (\"bearer\" takes a secret that does not start with \
             whsec_, \"standard-webhooks\" one that does)",
            secrets.accept_list()
        );
    }
    if let Some(page) = &config.status_page {
        status_page_password(page, insecure.public_status)?;
    }
    if config.reconcile.every.is_some() && config.database_url.is_none() {
        tracing::warn!("reconcile_every is set but {DATABASE_URL} is not: no scheduled sweep");
    }
    Ok(())
}

/// Says once, at start, when the App's private key file is open to group or others, as ssh says
/// of a private key: whoever can read it can act as the App on every repository it is installed
/// on. A key that cannot be read at all is the forge's error, not this warning.
#[cfg(unix)]
fn warn_if_key_exposed(forge: &ForgeSettings) {
    use std::os::unix::fs::PermissionsExt;
    let Some(GithubAuth::App {
        key: PrivateKeySource::File(path),
        ..
    }) = forge.github().map(|github| &github.auth)
    else {
        return;
    };
    // 0 for a file that cannot be read.
    let mode = std::fs::metadata(path).map_or(0, |m| m.permissions().mode() & 0o777);
    if mode & 0o077 != 0 {
        tracing::warn!(
            path = %path.display(),
            mode = %format!("{mode:04o}"),
            fix = %format!("chmod 600 {}", path.display()),
            "the GitHub App private key file is accessible by group or others: whoever can read it can act as the App"
        );
    }
}

/// Refuses a status page anyone could read, or whose password a guesser could find: none, or
/// one under [`MIN_STATUS_PASSWORD_CHARS`] characters, unless `--insecure-public-status`.
fn status_page_password(page: &StatusPage, insecure: bool) -> Result<(), ConfigError> {
    let problem = match page.password.as_ref().map(|p| p.expose().chars().count()) {
        None => {
            format!("{STATUS_PASSWORD} is not set (or empty), so the status page would be public")
        }
        Some(n) if n < MIN_STATUS_PASSWORD_CHARS => format!(
            "{STATUS_PASSWORD} has {n} characters, fewer than the {MIN_STATUS_PASSWORD_CHARS} \
             required"
        ),
        Some(_) => return Ok(()),
    };
    if insecure {
        tracing::warn!(
            "{problem}: served anyway (--insecure-public-status); the page shows row ids and branch names"
        );
        return Ok(());
    }
    Err(invalid!(
        "status_page = true, but {problem}: the page shows row ids and branch names made from the \
         rows' text. Set {STATUS_PASSWORD} to a random password of {MIN_STATUS_PASSWORD_CHARS} \
         or more characters (e.g. `openssl rand -hex 16`), turn the page off, or pass \
         --insecure-public-status (never on a public address)"
    ))
}
