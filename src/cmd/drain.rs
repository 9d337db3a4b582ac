//! `rowbranch drain`: the queue read until nothing is left to start, then exit — `serve`'s
//! consumer alone, with no port, for a job that a schedule starts (GitHub Actions). It stops
//! reading when the last read found nothing and it holds nothing, when the hourly budget is
//! spent, when GitHub turns a row away past its retries, or when `--max-time` less the grace
//! (`shutdown_grace`, at most half of `--max-time`) has passed; then it releases what it has
//! not started, gives the runs under way the grace, and prints one summary line. A signal
//! (Actions cancels a job with SIGINT, and kills it seconds later) stops it the same way with a
//! grace of at most [`SIGNAL_GRACE`]. With a token (no App, so no events from GitHub) a run
//! that drained the queue also writes back the states of the window's rows, as a sweep does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use tokio_util::sync::CancellationToken;

use super::Failure;
use crate::cli::DrainArgs;
use crate::config::{process_env, Config};
use crate::db::Database;
use crate::identity::QueueName;
use crate::queue::consumer::{DatabaseTrouble, ForgeTrouble, Idle, Standing};
use crate::startup::{Application, Launch, Mode};
use crate::sweep::{self, RouteSummary, SweepOptions};

/// The grace after SIGINT or SIGTERM, at most: GitHub Actions sends SIGTERM 7.5 s after
/// SIGINT and SIGKILL 2.5 s after that, so runs under way get 5 s to dispatch or release,
/// and the settles have time to follow.
const SIGNAL_GRACE: Duration = Duration::from_secs(5);

/// How long the retention's delete and the count of what is left may each take, once the run
/// is over (a delete cut short leaves the rest for the next run).
const AFTERWARDS: Duration = Duration::from_secs(5);

/// How many reads in a row may fail, once one has succeeded, before the drain gives up: a
/// blip of the connection is waited out (1 + 2 + 4 s), an outage is not. A first read that
/// fails stops it at once: the setup is what is wrong.
const DATABASE_ATTEMPTS: u32 = 4;

pub async fn run(args: DrainArgs) -> Result<(), Failure> {
    let started = Instant::now();
    let max_time = super::duration_flag("--max-time", &args.max_time, "4m or 90s")?;
    let config = Config::load(&args.config.config, &process_env)?;
    // Before a message is read: a route whose table is not there would dead-letter them all.
    super::check_tables(&config, args.sweep).await?;
    // The grace is part of --max-time: at most half of it, so that a short run still reads.
    let grace = config.shutdown_grace.min(max_time / 2);
    let reading = max_time - grace;
    let queue = config.pgmq.queue.clone();
    // With the database the consumer reads: without one, the build refuses to start. With a
    // token there is no App to hear GitHub's events: each run writes back the states of the
    // rows of `reconcile_window` as a sweep does (§6), `--sweep` or not.
    let states_only = !args.sweep
        && config.forge.token().is_some()
        && config.routes.iter().any(|r| r.writes_back());
    let sweep = ((args.sweep || states_only).then(|| SweepOptions {
        scheduled: args.sweep,
        states_only,
        ..SweepOptions::of(&config)
    }))
    .zip(config.database_url.clone());
    let env = Launch {
        mode: Mode::ConsumerOnly,
        ..Launch::process()
    };
    // The build refuses a config with no route on the queue or no DATABASE_URL; a token says
    // nothing of what it may do until asked, and one that cannot write would fail every row.
    let application = Application::build(config, env).await?;
    application.check_write_access().await?;
    if args.sweep {
        sweep::say_unstarted(application.routes());
    }
    let consumer = Arc::clone(application.consumer().expect("the consumer alone runs"));
    let shutdown = application.shutdown().clone();
    let routes = Arc::clone(application.routes());
    let pipeline = Arc::clone(application.pipeline());
    // The run stops once the reading has, below; the shutdown begun first keeps its grace.
    let stop_run = CancellationToken::new();
    let running = tokio::spawn(application.run(stop_run.clone().cancelled_owned()));
    let reading_ends = tokio::time::Instant::now() + reading;
    let signal_grace = grace.min(SIGNAL_GRACE);
    // At a signal the shutdown begins at once, with at most SIGNAL_GRACE.
    let signalled = || {
        let shutdown = shutdown.clone();
        async move {
            super::serve::first_signal(1, || {}).await;
            shutdown.begin(signal_grace);
            tracing::info!(
                grace_s = signal_grace.as_secs_f64(),
                "stopping: what has not started is released; runs under way get the grace"
            );
        }
    };
    let mut standing = consumer.progress().watch();
    // A consumer that is gone reads nothing more.
    let stop = tokio::select! {
        now = standing.wait_for(|standing| why(standing).is_some()) => {
            now.ok().and_then(|standing| why(&standing)).unwrap_or(Stop::Idle(Idle::Drained))
        }
        () = tokio::time::sleep_until(reading_ends) => Stop::OutOfTime,
        () = signalled() => Stop::Signal,
    };
    // The sweep, when one is asked for and the queue is drained, within the same time; the
    // states alone also once the hourly budget is spent (they are reads and database writes).
    let (stop, swept) = match (stop, sweep) {
        (stop @ Stop::Idle(_), Some((options, url)))
            if stop == Stop::Idle(Idle::Drained) || options.states_only =>
        {
            let run = async {
                let db = Database::connect(url.expose()).await?;
                let summaries = sweep::run(&routes, &db, &pipeline, &options, &|_| {}).await;
                Ok::<_, crate::db::Error>(summaries)
            };
            tokio::select! {
                swept = run => match swept {
                    Ok(summaries) => (stop, Some(summaries)),
                    Err(e) => (
                        Stop::Database(DatabaseTrouble {
                            message: format!("the sweep could not connect: {e}"),
                            code: e.code().map(|c| c.code().to_owned()),
                            attempts: 1,
                        }),
                        None,
                    ),
                },
                () = tokio::time::sleep_until(reading_ends) => (Stop::OutOfTime, None),
                () = signalled() => (Stop::Signal, None),
            }
        }
        (stop, _) => (stop, None),
    };
    shutdown.begin(grace);
    stop_run.cancel();
    running.await.context("the drain's run failed")??;
    // Nothing else may run in a drain-only setup: the archive's retention is kept here, unless
    // the job is being cancelled. A database that did not answer is not asked again.
    if !matches!(stop, Stop::Signal | Stop::Database(_)) {
        let _ = tokio::time::timeout(AFTERWARDS, consumer.forget_old()).await;
    }
    let left = match stop {
        Stop::Database(_) => None,
        _ => tokio::time::timeout(AFTERWARDS, consumer.depth())
            .await
            .ok(),
    };
    // The states alone are logged: standard output is the drain's line (and a sweep's table).
    // A route it could not finish (GitHub or the table not answering) is an error in the log,
    // not the run's failure: the rows' work is done, and the next run writes their states.
    match &swept {
        Some(summaries) if states_only => {
            for s in summaries {
                match &s.error {
                    Some(error) => tracing::error!(route = %s.route, %error,
                        "could not write back the rows' states; the next run tries again"),
                    None => tracing::info!(route = %s.route, rows = s.rows_seen,
                        states_written = s.states_written, "the rows' states written back"),
                }
            }
        }
        Some(summaries) => print!("{}", sweep::table(summaries, false)),
        None => {}
    }
    let counts = consumer.progress().counts();
    println!(
        "drain: {} dispatched, {} duplicates, {} dead-lettered, {} left in the queue, {:.1} s",
        counts.dispatched,
        counts.duplicates,
        counts.dead_lettered,
        left.and_then(Result::ok)
            .map_or_else(|| "?".to_owned(), |n| n.to_string()),
        started.elapsed().as_secs_f64()
    );
    stop.end(&queue, swept.as_deref().filter(|_| !states_only))
}

/// Why the reading stopped.
#[derive(Debug, PartialEq)]
enum Stop {
    /// The last read found nothing and nothing is held, or an hourly budget is spent.
    Idle(Idle),
    /// `--max-time` less the grace has passed.
    OutOfTime,
    /// GitHub (or the local forge) turned a row away past its retries.
    Forge(ForgeTrouble),
    /// The queue could not be read.
    Database(DatabaseTrouble),
    /// SIGINT or SIGTERM.
    Signal,
}

/// Why the reading should stop now, if it should.
fn why(standing: &Standing) -> Option<Stop> {
    if let Some(forge) = &standing.forge {
        return Some(Stop::Forge(forge.clone()));
    }
    if let Some(db) = &standing.database {
        if !standing.read_once || db.attempts >= DATABASE_ATTEMPTS {
            return Some(Stop::Database(db.clone()));
        }
    }
    standing.idle.clone().map(Stop::Idle)
}

impl Stop {
    /// Says why the drain stopped (on standard error) and how it ends: 0 when it stopped
    /// cleanly, 1 with the fix when it could not work.
    fn end(self, queue: &QueueName, swept: Option<&[RouteSummary]>) -> Result<(), Failure> {
        match self {
            Stop::Idle(Idle::Drained) => tracing::info!("the queue is drained"),
            Stop::OutOfTime => {
                tracing::info!("--max-time is reached: the rows left wait for the next run")
            }
            Stop::Idle(Idle::BudgetSpent(spent)) => tracing::info!(
                budget = %spent.setting,
                frees_in_s = spent.frees_in.map(|d| d.as_secs()),
                "the hourly budget is spent: the rows left wait for the next run"
            ),
            Stop::Signal => tracing::info!("stopped by a signal"),
            Stop::Forge(trouble) if trouble.rate_limited => tracing::warn!(
                error = %trouble.message,
                "GitHub's rate limit is reached: the rows left wait for the next run"
            ),
            Stop::Forge(trouble) => {
                return Err(Failure::Runtime(anyhow!(
                    "could not claim or dispatch a row: {}; the rows wait in the queue. Fix what \
                     it says (`rowbranch doctor` checks the credentials, the permissions and the \
                     repository), or run again once GitHub answers",
                    trouble.message
                )))
            }
            Stop::Database(trouble) => {
                return Err(Failure::Runtime(anyhow!(
                    "cannot read the queue {queue}: {}; {}",
                    trouble.message,
                    database_fix(trouble.code.as_deref(), queue)
                )))
            }
        }
        match swept.and_then(RouteSummary::trouble) {
            Some(trouble) => Err(Failure::Runtime(anyhow!("the sweep: {trouble}"))),
            None => Ok(()),
        }
    }
}

/// What to do about a queue that cannot be read, by the server's SQLSTATE.
fn database_fix(code: Option<&str>, queue: &QueueName) -> String {
    match code {
        // undefined_table, invalid_schema_name: no queue, or no pgmq.
        Some("42P01" | "3F000") => format!(
            "the queue {queue} is not in DATABASE_URL's database: run supabase-queue.sql \
             (written by `rowbranch init --intake pgmq`) in Supabase's SQL editor"
        ),
        // undefined_function: pgmq is not installed.
        Some("42883") => "pgmq is not installed in DATABASE_URL's database: enable Queues \
                          (Integrations → Queues), then run supabase-queue.sql"
            .to_owned(),
        Some("42501") => "DATABASE_URL's role may not read the queue: `rowbranch doctor` \
                          prints the grants it lacks"
            .to_owned(),
        _ => "check DATABASE_URL (from GitHub Actions, Supabase's session pooler, \
              …pooler.supabase.com:5432, since the direct host is IPv6-only; `sslmode=verify-full` \
              with Supabase's CA certificate); `rowbranch doctor` checks the rest"
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standing() -> Standing {
        Standing::default()
    }

    #[test]
    fn a_first_read_that_fails_stops_at_once_and_a_later_one_after_a_few_tries() {
        let trouble = |attempts| DatabaseTrouble {
            message: "connection refused".into(),
            code: None,
            attempts,
        };
        let first = Standing {
            database: Some(trouble(1)),
            ..standing()
        };
        assert!(matches!(why(&first), Some(Stop::Database(_))));
        let blip = Standing {
            database: Some(trouble(2)),
            read_once: true,
            ..standing()
        };
        assert!(why(&blip).is_none());
        let outage = Standing {
            database: Some(trouble(DATABASE_ATTEMPTS)),
            read_once: true,
            ..standing()
        };
        assert!(matches!(why(&outage), Some(Stop::Database(_))));
    }

    #[test]
    fn the_forge_stops_it_before_an_idle_queue_does() {
        let both = Standing {
            idle: Some(Idle::Drained),
            forge: Some(ForgeTrouble {
                rate_limited: true,
                message: "rate limited (403 Forbidden)".into(),
            }),
            read_once: true,
            ..standing()
        };
        assert!(matches!(why(&both), Some(Stop::Forge(t)) if t.rate_limited));
        let reading = Standing {
            read_once: true,
            ..standing()
        };
        assert!(why(&reading).is_none());
    }

    #[test]
    fn a_rate_limit_ends_cleanly_and_a_refusal_with_the_fix() {
        let queue = QueueName::parse("rowbranch").unwrap();
        let limited = Stop::Forge(ForgeTrouble {
            rate_limited: true,
            message: "rate limited".into(),
        });
        assert!(limited.end(&queue, None).is_ok());
        let refused = Stop::Forge(ForgeTrouble {
            rate_limited: false,
            message: "claiming the branch: GitHub answered 403 Forbidden".into(),
        });
        let failure = refused.end(&queue, None).unwrap_err();
        assert_eq!(failure.exit_code(), 1);
        assert!(failure.error().to_string().contains("rowbranch doctor"));
        let missing = Stop::Database(DatabaseTrouble {
            message: "relation \"pgmq.q_rowbranch\" does not exist".into(),
            code: Some("42P01".into()),
            attempts: 1,
        });
        let failure = missing.end(&queue, None).unwrap_err().error().to_string();
        assert!(failure.contains("supabase-queue.sql"), "{failure}");
    }
}
