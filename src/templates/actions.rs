//! What `rowbranch init --host actions` writes beyond the queue's setup: the drain workflow
//! (`rowbranch-drain.yml`), which runs `rowbranch drain` on a schedule and on demand in the
//! target repository with the job's own token, and the kick (`supabase-kick.sql`), which asks
//! GitHub to run it as soon as rows arrive. The names both sides must agree on (the workflow's
//! file, the committed config's path, the secrets, the kick's trigger) live here, with the
//! schedule's arithmetic and the job's time budget.

use std::fmt;

use serde::Serialize;

/// The drain workflow's file name in `.github/workflows/`: the kick dispatches it by this name
/// (https://docs.github.com/rest/actions/workflows#create-a-workflow-dispatch-event: "You can
/// also pass the workflow file name as a string").
pub const DRAIN_WORKFLOW_FILE: &str = "rowbranch-drain.yml";

/// Where the drain workflow reads its config, in the target repository: under `.github/`, so
/// the work workflow's finish job never pushes a change to it, and in a folder of its own, so
/// the checkout takes only it (and the database's CA beside it).
pub const CONFIG_DIR: &str = ".github/rowbranch";
pub const CONFIG_PATH: &str = ".github/rowbranch/rowbranch.toml";
/// The database's CA certificate, when it is committed: the drain job makes it libpq's default
/// root (`~/.postgresql/root.crt`), which `sslmode=verify-full` then checks the server against.
pub const CA_PATH: &str = ".github/rowbranch/supabase-ca.crt";

/// The repository secret that holds `DATABASE_URL` for the drain job.
pub const DATABASE_URL_SECRET: &str = "ROWBRANCH_DATABASE_URL";

/// The Vault secret that holds the kick's token, and the kick's trigger on the route's table
/// (`rowbranch_kick_{queue}`).
pub const KICK_SECRET: &str = "rowbranch_kick_token";
pub const KICK_TRIGGER_PREFIX: &str = "rowbranch_kick_";

/// The bot a dispatch sent with an Actions job's `GITHUB_TOKEN` runs the work workflow as,
/// `github-actions[bot]`: the work workflow's `allowed_bots` names it.
pub const ACTIONS_BOT: &str = "github-actions";

/// The most the drain runs, its grace included: `rowbranch drain`'s own default.
pub const DRAIN_MAX_TIME_MINUTES: u32 = 4;

/// The job's time before the install: a runner to start, the checkout of one folder.
const SETUP_MINUTES: u32 = 2;
/// After the drain: its exit, the runner's cleanup.
const SPARE_MINUTES: u32 = 1;
/// A `cargo install` of rowbranch on a GitHub-hosted runner (two cores for a private
/// repository): every dependency built in release mode, on every run, since nothing is cached.
const BUILD_MINUTES: u32 = 30;
/// Downloading and checking a release's archive.
const DOWNLOAD_MINUTES: u32 = 2;

/// The shortest interval GitHub runs a schedule at: "The shortest interval you can run
/// scheduled workflows is once every 5 minutes"
/// (https://docs.github.com/actions/writing-workflows/choosing-when-your-workflow-runs/events-that-trigger-workflows#schedule).
const MIN_EVERY_MINUTES: u32 = 5;

/// How often the schedule runs the drain: a number of minutes that a cron expression can say
/// exactly, every day at the same times — a divisor of an hour, a divisor of a day in whole
/// hours, or a day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Every {
    minutes: u32,
}

/// Why `--every` cannot be a schedule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EveryError {
    #[error("`{0}` is not a duration: write e.g. 15m, 1h or 6h")]
    NotADuration(String),
    #[error(
        "`{0}` is shorter than GitHub's shortest schedule, 5 minutes; the kick (--kick) is the \
         way to run sooner"
    )]
    TooOften(String),
    #[error(
        "`{0}` cannot be a schedule that runs at the same times every day: choose 5m, 6m, 10m, \
         12m, 15m, 20m, 30m, 1h, 2h, 3h, 4h, 6h, 8h, 12h or 1d"
    )]
    Uneven(String),
}

impl Every {
    pub const HOURLY: Every = Every { minutes: 60 };

    /// `--every`: a duration such as `15m`, `1h` or `1d`.
    pub fn parse(text: &str) -> Result<Every, EveryError> {
        let duration = humantime::parse_duration(text.trim())
            .map_err(|_| EveryError::NotADuration(text.to_owned()))?;
        if duration.as_secs() < u64::from(MIN_EVERY_MINUTES) * 60 {
            return Err(EveryError::TooOften(text.to_owned()));
        }
        let uneven = || EveryError::Uneven(text.to_owned());
        if duration.subsec_nanos() != 0 || duration.as_secs() % 60 != 0 {
            return Err(uneven());
        }
        let minutes = u32::try_from(duration.as_secs() / 60).map_err(|_| uneven())?;
        let even =
            (minutes < 60 && 60 % minutes == 0) || (minutes % 60 == 0 && 24 % (minutes / 60) == 0);
        if !even {
            return Err(uneven());
        }
        Ok(Every { minutes })
    }

    pub fn minutes(self) -> u32 {
        self.minutes
    }

    /// How many times a day the schedule runs.
    pub fn runs_a_day(self) -> u32 {
        24 * 60 / self.minutes
    }

    /// The cron expression, in UTC as GitHub reads it. Its minutes are never the hour's first:
    /// "High load times include the start of every hour. … To decrease the chance of delay,
    /// schedule your workflow to run at a different time of the hour"
    /// (https://docs.github.com/actions/writing-workflows/choosing-when-your-workflow-runs/events-that-trigger-workflows#schedule).
    /// Which minute (and hour) is taken from `seed`, the repository's name, so that
    /// repositories set up alike do not all start together, and the same repository always
    /// gets the same schedule.
    pub fn cron(self, seed: &str) -> String {
        let hash = fnv1a(&seed.to_ascii_lowercase());
        if self.minutes < 60 {
            // Every `minutes` from a first minute in 1..minutes: never minute 0, since the
            // interval divides the hour.
            let first = 1 + (hash % u64::from(self.minutes - 1)) as u32;
            return format!("{first}-59/{} * * * *", self.minutes);
        }
        let minute = 1 + (hash % 59) as u32;
        let hours = self.minutes / 60;
        match hours {
            1 => format!("{minute} * * * *"),
            24 => format!("{minute} {} * * *", (hash >> 32) % 24),
            _ => format!(
                "{minute} {}-23/{hours} * * *",
                (hash >> 32) % u64::from(hours)
            ),
        }
    }
}

impl fmt::Display for Every {
    /// In words, for the workflow's comments and the steps `init` prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.minutes {
            60 => write!(f, "hour"),
            1440 => write!(f, "day"),
            m if m % 60 == 0 => write!(f, "{} hours", m / 60),
            m => write!(f, "{m} minutes"),
        }
    }
}

/// FNV-1a, 64 bits: a stable hash (std's is randomized per process).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// How the drain job gets rowbranch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Install {
    /// `cargo install --locked --git URL --rev REV rowbranch` (the crate is not published), on
    /// every run: a binary kept in the Actions cache could be one another job wrote there.
    Git { url: String, rev: String },
    /// A release's archive, downloaded on every run and checked against its SHA-256 first: the
    /// documented way.
    Release { url: String, sha256: String },
}

impl Install {
    /// The most the install takes: a cold build, or a download.
    pub fn minutes(&self) -> u32 {
        match self {
            Install::Git { .. } => BUILD_MINUTES,
            Install::Release { .. } => DOWNLOAD_MINUTES,
        }
    }
}

/// What the drain workflow and the kick are filled in with, beyond the route's own values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActionsSetup {
    /// How often the schedule drains, as the insurance: the kick is the latency.
    #[serde(skip)]
    pub every: Every,
    pub install: Install,
    /// Whether `supabase-kick.sql` is written.
    pub kick: bool,
    /// The branch the kick dispatches the drain workflow on: the default branch, where a
    /// scheduled or dispatched workflow's file must be.
    pub default_branch: String,
    /// GitHub's API, for the kick's request: https://api.github.com, or a GitHub Enterprise
    /// Server's `https://HOST/api/v3`.
    pub api_url: String,
}

impl ActionsSetup {
    /// Example values, for the documentation's own checks.
    pub fn example() -> ActionsSetup {
        ActionsSetup {
            every: Every::HOURLY,
            install: Install::Git {
                url: "https://github.com/acme/rowbranch".into(),
                rev: "0123456789abcdef0123456789abcdef01234567".into(),
            },
            kick: false,
            default_branch: "main".into(),
            api_url: "https://api.github.com".into(),
        }
    }

    /// The drain job's `timeout-minutes`: the runner and the checkout, the install at its
    /// slowest, the drain's `--max-time` (its grace included), and a minute to spare.
    pub fn timeout_minutes(&self) -> u32 {
        SETUP_MINUTES + self.install.minutes() + DRAIN_MAX_TIME_MINUTES + SPARE_MINUTES
    }

    /// The URL the kick posts to.
    pub fn kick_url(&self, repo: &str) -> String {
        format!(
            "{}/repos/{repo}/actions/workflows/{DRAIN_WORKFLOW_FILE}/dispatches",
            self.api_url
        )
    }

    /// The text values, for the check that refuses control and invisible characters.
    pub fn texts(&self) -> Vec<(&'static str, &str)> {
        let mut texts = vec![
            ("default_branch", self.default_branch.as_str()),
            ("api_url", self.api_url.as_str()),
        ];
        match &self.install {
            Install::Git { url, rev } => {
                texts.push(("install_from_git", url));
                texts.push(("rev", rev));
            }
            Install::Release { url, sha256 } => {
                texts.push(("release_url", url));
                texts.push(("release_sha256", sha256));
            }
        }
        texts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_intervals_a_cron_can_keep_are_taken_and_named() {
        for (text, minutes, words) in [
            ("5m", 5, "5 minutes"),
            ("15m", 15, "15 minutes"),
            ("30min", 30, "30 minutes"),
            ("1h", 60, "hour"),
            ("60m", 60, "hour"),
            ("6h", 360, "6 hours"),
            ("12h", 720, "12 hours"),
            ("1d", 1440, "day"),
            ("24h", 1440, "day"),
        ] {
            let every = Every::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(every.minutes(), minutes, "{text}");
            assert_eq!(every.to_string(), words, "{text}");
        }
    }

    #[test]
    fn shorter_than_five_minutes_or_uneven_intervals_are_refused_with_the_choices() {
        assert!(matches!(
            Every::parse("1m"),
            Err(EveryError::TooOften(t)) if t == "1m"
        ));
        for uneven in ["7m", "45m", "90m", "5h", "2d", "5m30s", "400s"] {
            let err = Every::parse(uneven).unwrap_err();
            assert!(
                matches!(&err, EveryError::Uneven(t) if t == uneven),
                "{uneven}: {err:?}"
            );
            assert!(err.to_string().contains("15m, 20m, 30m, 1h"), "{err}");
        }
        assert!(matches!(
            Every::parse("soon"),
            Err(EveryError::NotADuration(_))
        ));
    }

    /// The minutes of the hour a cron expression's minute field names.
    fn minutes_of(field: &str) -> Vec<u32> {
        if let Some((range, step)) = field.split_once('/') {
            let (first, last) = range.split_once('-').unwrap();
            let (first, last, step): (u32, u32, u32) = (
                first.parse().unwrap(),
                last.parse().unwrap(),
                step.parse().unwrap(),
            );
            (first..=last).step_by(step as usize).collect()
        } else {
            vec![field.parse().unwrap()]
        }
    }

    #[test]
    fn the_schedule_keeps_the_interval_and_never_starts_on_the_hour() {
        for repo in ["acme/app", "a/b", "Someone/Else", "x/y-z", "org/repo.rs"] {
            for text in ["5m", "6m", "10m", "12m", "15m", "20m", "30m"] {
                let every = Every::parse(text).unwrap();
                let cron = every.cron(repo);
                let fields: Vec<&str> = cron.split(' ').collect();
                assert_eq!(&fields[1..], ["*", "*", "*", "*"], "{cron}");
                let minutes = minutes_of(fields[0]);
                assert!(!minutes.contains(&0), "{repo} {text}: {cron}");
                assert_eq!(minutes.len() as u32, 60 / every.minutes(), "{cron}");
                assert!(minutes.windows(2).all(|w| w[1] - w[0] == every.minutes()));
            }
            for text in ["1h", "2h", "3h", "4h", "6h", "8h", "12h", "1d"] {
                let every = Every::parse(text).unwrap();
                let cron = every.cron(repo);
                let fields: Vec<&str> = cron.split(' ').collect();
                let minute: u32 = fields[0].parse().unwrap();
                assert!((1..=59).contains(&minute), "{cron}");
                assert_eq!(&fields[2..], ["*", "*", "*"], "{cron}");
                let runs = match fields[1] {
                    "*" => 24,
                    hours if hours.contains('/') => minutes_of(hours).len() as u32,
                    hour => {
                        assert!(hour.parse::<u32>().unwrap() < 24, "{cron}");
                        1
                    }
                };
                assert_eq!(runs, every.runs_a_day(), "{repo} {text}: {cron}");
            }
        }
    }

    #[test]
    fn the_same_repository_gets_the_same_schedule_and_others_are_spread() {
        let every = Every::HOURLY;
        assert_eq!(every.cron("acme/app"), every.cron("ACME/App"));
        let minutes: std::collections::BTreeSet<String> = (0..40)
            .map(|i| every.cron(&format!("acme/app-{i}")))
            .collect();
        assert!(minutes.len() > 10, "{minutes:?}");
    }

    #[test]
    fn the_job_has_time_for_the_install_the_drain_and_a_minute_more() {
        let mut setup = ActionsSetup::example();
        assert_eq!(
            setup.timeout_minutes(),
            SETUP_MINUTES + BUILD_MINUTES + DRAIN_MAX_TIME_MINUTES + SPARE_MINUTES
        );
        setup.install = Install::Release {
            url: "https://example.com/r.tar.gz".into(),
            sha256: "0".repeat(64),
        };
        assert_eq!(setup.timeout_minutes(), 2 + 2 + 4 + 1);
    }

    #[test]
    fn the_kick_posts_to_the_drain_workflows_dispatches() {
        assert_eq!(
            ActionsSetup::example().kick_url("acme/app"),
            "https://api.github.com/repos/acme/app/actions/workflows/rowbranch-drain.yml/dispatches"
        );
    }
}
