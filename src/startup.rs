//! From a loaded config to a running process. [`Application::build`] takes the config and what
//! the process supplies beside it ([`Launch`]): it opens the forge, binds the listener, compiles
//! the routes and makes the pipeline; [`Application::run`] then runs its parts until a shutdown
//! signal — the server, the queue's consumer, a first look at each repository and the scheduled
//! sweep, or the consumer alone. `serve`, `demo` and the tests all start rowbranch this way.
//! The commands that run no server (`reconcile`, `redo`, `preview`) take the pieces they need
//! from here: [`routes`], [`forge`], [`pipeline`]. Nothing below calls up.

use std::collections::BTreeSet;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::AbortHandle;

use crate::config::{Config, ForgeSettings, Route};
use crate::db::status::StatusWriter;
use crate::db::Reachability;
use crate::forge::{self, Denial, Forge, ForgeError, OpenError, WriteAccess};
use crate::http::{self, App};
use crate::identity::RepoName;
use crate::metrics::{self, Metrics};
use crate::pipeline::{Admission, Pipeline, RouteError, Routes};
use crate::queue::budget::Budgets;
use crate::queue::{Consumer, ConsumerSettings};
use crate::shutdown::Shutdown;
use crate::sweep;

/// How long the check at start of what the forge may write waits for its answers.
const WRITE_CHECK_WITHIN: Duration = Duration::from_secs(15);
/// What the process supplies beside the config: the command line's choices, and — for the
/// demo and the tests — a forge of their own and a free port. (The environment's variables are
/// read into the config by `Config::load`, the open-files limit by [`Application::run`].)
pub struct Launch {
    /// `--insecure-no-auth`: accept deliveries without credentials when no secret is set.
    pub insecure_no_auth: bool,
    /// Which parts run.
    pub mode: Mode,
    /// The forge to work on in place of the one the config names: the demo's repository, a
    /// test's `FaultyForge`.
    pub forge: Option<Arc<dyn Forge>>,
}

impl Launch {
    /// This process's: serving on the config's `listen`, on the config's forge, with
    /// credentials required.
    pub fn process() -> Launch {
        Launch {
            insecure_no_auth: false,
            mode: Mode::Serve {
                listen: Listen::Config,
                warm_up: true,
            },
            forge: None,
        }
    }
}

/// Which parts of rowbranch a run has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The server, and beside it the queue's consumer (when a route reads the queue and
    /// `DATABASE_URL` is set) and the scheduled sweep (when the config asks for one): `serve`.
    Serve {
        listen: Listen,
        /// A first look at each route's repository at start. Off in tests that count the
        /// forge's calls: it would be one they did not make.
        warm_up: bool,
    },
    /// The queue's consumer alone: no listener, no sweep. Needs a route that reads the queue,
    /// and `DATABASE_URL`.
    ConsumerOnly,
}

/// Where the server listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    /// The config's `listen` address.
    Config,
    /// A port of 127.0.0.1 that the system picks: [`Application::addr`] says which.
    FreePort,
}

/// Why rowbranch could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The forge the config names could not be opened (a key that does not parse, a local
    /// repository that is not one).
    #[error(transparent)]
    Forge(#[from] OpenError),
    /// A route's payload template could not be read or compiled; the error names the file.
    #[error(transparent)]
    Routes(#[from] RouteError),
    /// The server could not listen, or the open-files limit leaves no room for connections.
    #[error(transparent)]
    Listen(#[from] http::ListenError),
    /// The consumer alone (`drain`) and no route that reads the queue.
    #[error(
        "{}: no route reads the queue, and drain reads nothing else: set intake = \"pgmq\" \
         on the route (and run supabase-queue.sql, which `rowbranch init --intake pgmq` \
         writes)",
        .0.display()
    )]
    NoQueueRoute(PathBuf),
    /// The consumer alone (`drain`) and no database to read the queue from.
    #[error(
        "DATABASE_URL is not set: set it to the connection string of the database that \
         holds the queue (from GitHub Actions, Supabase's session pooler, \
         …pooler.supabase.com:5432: the direct host is IPv6-only)"
    )]
    NoDatabaseUrl,
    /// The forge's credentials may not write a route's repository: what they lack, and the fix.
    #[error("{0}")]
    CannotWrite(Denial),
    /// The forge refused to say whether a route's repository may be written: credentials it
    /// does not take, a repository they do not reach, an empty one.
    #[error("could not check whether {repo} may be written: {message}")]
    CannotCheck { repo: RepoName, message: String },
}

/// rowbranch, built and ready to run: the parts every run shares, and what runs — the server,
/// the consumer, or both; never neither.
pub struct Application {
    config: Arc<Config>,
    routes: Arc<Routes>,
    pipeline: Arc<Pipeline>,
    shutdown: Shutdown,
    /// `None` when the consumer runs alone.
    server: Option<Server>,
    /// When a route reads the queue and `DATABASE_URL` is set.
    consumer: Option<Arc<Consumer>>,
}

/// The listener and the state of the requests it will take.
struct Server {
    listener: TcpListener,
    app: Arc<App>,
    /// Whether to take a first look at each route's repository.
    warm_up: bool,
}

impl Application {
    /// Opens the forge (or takes the one `env` supplies), binds the listener, compiles the
    /// routes and makes the pipeline, the server's state and the consumer. Makes no request:
    /// the port answers before GitHub is reached.
    pub async fn build(config: Config, env: Launch) -> Result<Application, StartupError> {
        let consumer_settings = consumer_settings(&config, env.mode);
        if env.mode == Mode::ConsumerOnly && consumer_settings.is_none() {
            return Err(match config.reads_the_queue() {
                false => StartupError::NoQueueRoute(config.source.clone()),
                true => StartupError::NoDatabaseUrl,
            });
        }
        let shared = Shared::default();
        let github = env.forge.is_none() && matches!(config.forge, ForgeSettings::Github(_));
        let forge = match env.forge {
            Some(forge) => forge,
            None => self::forge(&config, &shared).await?,
        };
        let listener = match env.mode {
            Mode::Serve { listen, warm_up } => {
                let listener = http::listen(&config, listen == Listen::FreePort).await?;
                Some((listener, warm_up))
            }
            Mode::ConsumerOnly => None,
        };
        let routes = Arc::new(Routes::compile(&config)?);
        let pipeline = pipeline(&config, forge, &shared);
        let config = Arc::new(config);
        // The consumer finds whether the database answers; `/readyz` says so.
        let database = Arc::new(Reachability::default());
        let consumer = consumer_settings.map(|settings| {
            Consumer::new(
                settings,
                Arc::clone(&routes),
                Arc::clone(&pipeline),
                shared.shutdown.clone(),
                Arc::clone(&database),
            )
        });
        let scope = metrics_scope(&config, listener.is_some(), consumer.is_some(), github);
        shared.metrics.start_at_zero(&scope);
        let server = listener.map(|(listener, warm_up)| Server {
            listener,
            app: App::new(
                Arc::clone(&config),
                Arc::clone(&routes),
                Arc::clone(&pipeline),
                Arc::clone(&shared.metrics),
                database,
                env.insecure_no_auth,
            ),
            warm_up,
        });
        Ok(Application {
            config,
            routes,
            pipeline,
            shutdown: shared.shutdown,
            server,
            consumer,
        })
    }

    /// Asks the forge, once for each route's repository, whether its credentials may write
    /// there — on GitHub, the probe that changes nothing (`forge::github::access`) — before a
    /// row is read: a token without the permission is an error that names it and says where to
    /// grant it, and one GitHub refuses outright (bad credentials, a repository it does not
    /// reach) an error that says so. GitHub not answering in time, or not saying, is logged,
    /// and the run goes on: the first write says the same. Only a token is asked: an App's
    /// installation says what it may do, and its start makes no request.
    pub async fn check_write_access(&self) -> Result<(), StartupError> {
        if self.config.forge.token().is_none() {
            return Ok(());
        }
        let forge = self.pipeline.forge();
        let repos: BTreeSet<&RepoName> = self.config.routes.iter().map(|r| &r.repo).collect();
        for repo in repos {
            let answer = tokio::time::timeout(WRITE_CHECK_WITHIN, forge.write_access(repo)).await;
            let why = match answer {
                Ok(Ok(WriteAccess::Granted)) => {
                    tracing::info!(%repo, "the forge's credentials may write the repository");
                    continue;
                }
                Ok(Ok(WriteAccess::Denied(denial))) => {
                    return Err(StartupError::CannotWrite(denial))
                }
                Ok(Err(ForgeError::Refused { message })) => {
                    let repo = repo.clone();
                    return Err(StartupError::CannotCheck { repo, message });
                }
                Ok(Ok(WriteAccess::Untold { why })) => why,
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {} s", WRITE_CHECK_WITHIN.as_secs()),
            };
            tracing::warn!(%repo, %why,
                "could not tell at start whether the repository may be written; the first write will");
        }
        Ok(())
    }

    /// The address the server listens on; `None` when the consumer runs alone.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.server.as_ref()?.listener.local_addr().ok()
    }

    /// The pipeline every row runs through: to report the runs left at a second signal, or
    /// for a test to wait for them.
    pub fn pipeline(&self) -> &Arc<Pipeline> {
        &self.pipeline
    }

    /// The compiled routes: for a sweep that shares the pipeline.
    pub fn routes(&self) -> &Arc<Routes> {
        &self.routes
    }

    /// The queue's consumer, when one runs: what it has done and where its reading stands.
    pub fn consumer(&self) -> Option<&Arc<Consumer>> {
        self.consumer.as_ref()
    }

    /// The process's shutdown. Begun by the caller before [`run`](Self::run)'s `shutdown`
    /// resolves, its grace (a shorter one, at a signal) is the one the run keeps.
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// The server's routes over this application's state, for tests that send requests
    /// without a socket; `None` when the consumer runs alone.
    pub fn router(&self) -> Option<axum::Router> {
        (self.server.as_ref()).map(|server| http::router(Arc::clone(&server.app)))
    }

    /// Runs until `shutdown` resolves, then shuts down within `shutdown_grace`.
    ///
    /// With the server: the consumer, the scheduled sweep and the first look beside it (see
    /// [`Mode::Serve`]); at `shutdown` the jobs stop, the server stops accepting (see
    /// [`http::serve`]), and its requests and runs finish within the grace, here. An error,
    /// before anything starts, when the open-files limit leaves no room for connections.
    ///
    /// The consumer alone: at `shutdown` it stops reading, releases what it read and has not
    /// started (visible again at once), and the runs under way get the grace — or what is left
    /// of one the caller began already. Either way the consumer then settles the messages of the
    /// runs that ended; past the grace, what is left is read again once its lease lapses.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartupError> {
        // The open-files limit (`None`: unlimited), which may lower the connection cap.
        let open_files = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        let cap = (self.server.as_ref())
            .map(|_| http::connection_cap(&self.config, open_files))
            .transpose()?;
        let consumer = self.consumer.map(|consumer| tokio::spawn(consumer.run()));
        let connections = match self.server.zip(cap) {
            Some((server, cap)) => {
                // Beside the server: the scheduled sweep, and the first look at each route's
                // repository (in the background, so that the port answers at once even when
                // GitHub is slow or down). They stop first, so that they start no run once the
                // server drains its runs; the consumer stops reading by itself once the shutdown
                // begins.
                let (config, pipeline) = (&self.config, &self.pipeline);
                let sweeps = sweep::every(Arc::clone(config), self.routes, Arc::clone(pipeline));
                let mut jobs = vec![tokio::spawn(sweeps).abort_handle()];
                if server.warm_up {
                    let look = warm_up(Arc::clone(config), Arc::clone(pipeline));
                    jobs.push(tokio::spawn(look).abort_handle());
                }
                let stop = async move {
                    shutdown.await;
                    jobs.iter().for_each(AbortHandle::abort);
                };
                Some(http::serve(server.listener, server.app, cap, stop).await)
            }
            None => {
                shutdown.await;
                None
            }
        };
        // The shutdown begins unless it has (its deadline stays): the requests in flight and the
        // runs get the grace; what is still running at its end is logged by id, and left.
        self.shutdown.begin(self.config.shutdown_grace);
        let deadline = self.shutdown.deadline().expect("the shutdown has begun");
        let finished = tokio::time::timeout_at(deadline, async {
            if let Some(connections) = connections {
                connections.wait().await;
            }
            self.pipeline.drain().await;
        })
        .await;
        if finished.is_err() {
            let left = self.pipeline.report_unfinished();
            tracing::warn!(rows = left, "the shutdown grace ran out");
        }
        if let Some(consumer) = consumer {
            let _ = tokio::time::timeout_at(deadline + Duration::from_secs(1), consumer).await;
        }
        Ok(())
    }
}

/// What a run of `config` can count: the server's webhook routes when it `serves`, the queue
/// routes, and whether the consumer, the scheduled sweep (beside the server) and GitHub run.
fn metrics_scope(config: &Config, serves: bool, consumer: bool, github: bool) -> metrics::Scope {
    let tables = |of: &dyn Fn(&Route) -> bool| -> Vec<String> {
        let routes = config.routes.iter().filter(|r| of(r));
        routes.map(|r| r.table_name()).collect()
    };
    metrics::Scope {
        webhook_routes: tables(&|r| serves && r.takes_webhooks()),
        queue_routes: tables(&Route::reads_the_queue),
        consumer,
        sweep: serves && config.reconcile.every.is_some() && config.database_url.is_some(),
        github,
        status_routes: tables(&|r| config.database_url.is_some() && r.writes_back()),
        github_hook: (serves && github).then(|| config.forge.github_webhook_secret().is_some()),
    }
}

/// What the parts of one process share: its shutdown and its metrics.
#[derive(Clone, Default)]
pub struct Shared {
    pub shutdown: Shutdown,
    pub metrics: Arc<Metrics>,
}

/// The forge the config names, for its routes, its waits bounded by the shutdown's grace.
/// Makes no request.
pub async fn forge(config: &Config, shared: &Shared) -> Result<Arc<dyn Forge>, OpenError> {
    forge::open(
        &config.forge,
        shared.shutdown.clone(),
        Arc::clone(&shared.metrics),
    )
    .await
}

/// A pipeline over `forge` that admits the config's `queue_capacity` rows at once, holding at
/// most `queue_bytes` between them.
pub fn pipeline(config: &Config, forge: Arc<dyn Forge>, shared: &Shared) -> Arc<Pipeline> {
    // The rows hear back where a route asks it and the database is known (serve refuses to
    // start without it).
    let statuses = (config.database_url.clone())
        .filter(|_| config.routes.iter().any(|r| r.writes_back()))
        .map(|url| StatusWriter::start(url, Arc::clone(&shared.metrics)));
    Pipeline::new(
        forge,
        Admission::for_forge(&config.forge),
        shared.shutdown.clone(),
        Arc::clone(&shared.metrics),
        statuses,
    )
}

/// The queue consumer's settings, when a route reads the queue and `DATABASE_URL` is set. Its
/// budgets: each route's `max_rows_per_hour`; and for the consumer alone (a drain, which ends
/// and starts again, each time with a fresh pacer) or with a plain token (whose hour every
/// process and job using it shares) the installation's `write_hourly_max` too, counted from
/// the archive. Beside that, the pacer's own rolling hour keeps the cap in each process.
fn consumer_settings(config: &Config, mode: Mode) -> Option<ConsumerSettings> {
    let url = config
        .database_url
        .clone()
        .filter(|_| config.reads_the_queue())?;
    Some(ConsumerSettings {
        url,
        pgmq: config.pgmq.clone(),
        queue_capacity: config.forge.queue_capacity(),
        window_rows: window_rows(config),
        budgets: Budgets::new(
            &config.routes,
            &config.forge,
            mode == Mode::ConsumerOnly || config.forge.token().is_some(),
        ),
    })
}

/// How many rows this process can start within one visibility window at its pace: two writes
/// a row (claim and dispatch), out of the burst and one write per interval, within the hourly
/// cap. The local forge has no pace: `queue_capacity`.
pub fn window_rows(config: &Config) -> usize {
    let ForgeSettings::Github(github) = &config.forge else {
        return config.forge.queue_capacity();
    };
    let window = config.pgmq.visibility_timeout;
    let pace = &github.pace;
    // The interval is whole milliseconds (`write_interval_ms`): none at 0.
    let paced = (window.as_millis())
        .checked_div(pace.interval.as_millis())
        .map_or(u64::MAX, |writes| writes as u64);
    let writes = paced
        .saturating_add(u64::from(pace.burst))
        .min(u64::from(pace.hourly_max));
    usize::try_from(writes / 2).unwrap_or(usize::MAX).max(1)
}

/// Reads each route's default branch once: a repository that cannot take claims yet (the App
/// not installed, an empty repository) is worth saying at start, not at the first row.
async fn warm_up(config: Arc<Config>, pipeline: Arc<Pipeline>) {
    for route in &config.routes {
        if let Err(e) = pipeline.forge().base(&route.repo).await {
            tracing::warn!(repo = %route.repo, error = %format!("reading the default branch: {e}"),
                "the forge cannot take claims for this route yet");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn config(text: &str, env: &[(&str, &str)]) -> Config {
        let env = |key: &str| {
            env.iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (*v).to_owned())
        };
        Config::parse(text, Path::new("/etc/rowbranch/rowbranch.toml"), &env).unwrap()
    }

    #[tokio::test]
    async fn the_consumer_alone_needs_a_route_on_the_queue_and_database_url() {
        let text = crate::config::TEST_LOCAL_CONFIG;
        let env = || Launch {
            mode: Mode::ConsumerOnly,
            ..Launch::process()
        };
        let webhooks_only = config(text, &[("DATABASE_URL", "postgres://u@db/x")]);
        let refused = Application::build(webhooks_only, env()).await.err();
        assert!(
            matches!(refused, Some(StartupError::NoQueueRoute(_))),
            "{refused:?}"
        );
    }
}
