//! `rowbranch init --host actions`: the setup that runs `rowbranch drain` in the target
//! repository's own GitHub Actions with the job's token. Beyond the queue's setup it writes the
//! drain workflow (`rowbranch-drain.yml`), on a schedule and on demand, and the kick
//! (`supabase-kick.sql`), which asks GitHub to run it as soon as rows arrive. Here: the flags
//! that host takes and refuses, the schedule's arithmetic and the job's time budget, what the
//! drain job installs (built from git at a commit, or a release's archive at its checksum).

use serde::Serialize;

use super::{public_url, usage};
use crate::cli::{InitArgs, IntakeArg};
use crate::cmd::doctor::DRAIN_WORKFLOW_FILE;
use crate::cmd::Failure;
use crate::identity::{excerpt, BranchPrefix};

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

/// The commit this binary was built from, as `--version` names it: the default `--rev`.
pub(super) const OWN_COMMIT: &str = env!("ROWBRANCH_COMMIT");

/// How often the schedule runs the drain: a number of minutes that a cron expression can say
/// exactly, every day at the same times — a divisor of an hour, a divisor of a day in whole
/// hours, or a day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Every {
    minutes: u32,
}

impl Every {
    pub const HOURLY: Every = Every { minutes: 60 };

    /// `--every`: a duration such as `15m`, `1h` or `1d`. GitHub runs a schedule at most every
    /// 5 minutes ("The shortest interval you can run scheduled workflows is once every 5
    /// minutes",
    /// https://docs.github.com/actions/writing-workflows/choosing-when-your-workflow-runs/events-that-trigger-workflows#schedule).
    pub fn parse(text: &str) -> Result<Every, String> {
        let duration = humantime::parse_duration(text.trim())
            .map_err(|_| format!("`{text}` is not a duration: write e.g. 15m, 1h or 6h"))?;
        if duration.as_secs() < 5 * 60 {
            return Err(format!(
                "`{text}` is shorter than GitHub's shortest schedule, 5 minutes; the kick \
                 (--kick) is the way to run sooner"
            ));
        }
        let minutes = u32::try_from(duration.as_secs() / 60).unwrap_or(u32::MAX);
        let whole = duration.subsec_nanos() == 0 && duration.as_secs() % 60 == 0;
        let even =
            (minutes < 60 && 60 % minutes == 0) || (minutes % 60 == 0 && 24 % (minutes / 60) == 0);
        if !(whole && even) {
            return Err(format!(
                "`{text}` cannot be a schedule that runs at the same times every day: choose 5m, \
                 6m, 10m, 12m, 15m, 20m, 30m, 1h, 2h, 3h, 4h, 6h, 8h, 12h or 1d"
            ));
        }
        Ok(Every { minutes })
    }

    /// In words, for the workflow's comments and the steps `init` prints.
    pub fn words(self) -> String {
        match self.minutes {
            60 => "hour".into(),
            1440 => "day".into(),
            m if m % 60 == 0 => format!("{} hours", m / 60),
            m => format!("{m} minutes"),
        }
    }

    /// The cron expression, in UTC as GitHub reads it. Its minutes are never the hour's first:
    /// "High load times include the start of every hour. … To decrease the chance of delay,
    /// schedule your workflow to run at a different time of the hour" (the page above). Which
    /// minute (and hour) is taken from `seed`, the repository's name, so that repositories set
    /// up alike do not all start together, and the same repository always gets the same
    /// schedule.
    pub fn cron(self, seed: &str) -> String {
        // FNV-1a, 64 bits: a stable hash (std's is randomized per process).
        let hash = seed
            .to_ascii_lowercase()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
                (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
            });
        if self.minutes < 60 {
            // Every `minutes` from a first minute in 1..minutes: never minute 0, since the
            // interval divides the hour.
            let first = 1 + hash % u64::from(self.minutes - 1);
            return format!("{first}-59/{} * * * *", self.minutes);
        }
        let minute = 1 + hash % 59;
        match self.minutes / 60 {
            1 => format!("{minute} * * * *"),
            24 => format!("{minute} {} * * *", (hash >> 32) % 24),
            hours => format!(
                "{minute} {}-23/{hours} * * *",
                (hash >> 32) % u64::from(hours)
            ),
        }
    }
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
    /// The drain job's `timeout-minutes`: the runner and the checkout, the install at its
    /// slowest, the drain's `--max-time` (its grace included), and a minute to spare.
    pub fn timeout_minutes(&self) -> u32 {
        SETUP_MINUTES + self.install.minutes() + DRAIN_MAX_TIME_MINUTES + SPARE_MINUTES
    }

    /// What the drain workflow, the kick and the steps compute from these values, for the
    /// repository `repo`.
    pub(super) fn values(&self, repo: &str) -> minijinja::Value {
        minijinja::context! {
            cron => self.every.cron(repo),
            every => self.every.words(),
            timeout_minutes => self.timeout_minutes(),
            install_minutes => self.install.minutes(),
            // The URL the kick posts to (https://docs.github.com/rest/actions/workflows#create-a-workflow-dispatch-event:
            // "You can also pass the workflow file name as a string").
            kick_url => format!(
                "{}/repos/{repo}/actions/workflows/{DRAIN_WORKFLOW_FILE}/dispatches",
                self.api_url
            ),
        }
    }
}

/// Refuses, with `--host actions`, the flags of an App and a server, which it has no use for;
/// without it, the flags of `--host actions`.
pub(super) fn refuse_other_hosts_flags(args: &InitArgs, actions: bool) -> Result<(), Failure> {
    let flags: &[(&str, bool)] = if actions {
        &[
            ("--url", args.url.is_some()),
            ("--app-name", args.app_name.is_some()),
            ("--owner-type", args.owner_type.is_some()),
            ("--intake webhook", args.intake == Some(IntakeArg::Webhook)),
        ]
    } else {
        &[
            ("--every", args.every.is_some()),
            ("--kick", args.kick),
            ("--default-branch", args.default_branch.is_some()),
            ("--install-from-git", args.install_from_git.is_some()),
            ("--rev", args.rev.is_some()),
            ("--release-url", args.release_url.is_some()),
            ("--release-sha256", args.release_sha256.is_some()),
        ]
    };
    let given: Vec<&str> = flags.iter().filter(|f| f.1).map(|f| f.0).collect();
    let given = given.join(", ");
    match given.is_empty() {
        true => Ok(()),
        false if actions => Err(usage(format!(
            "--host actions takes no {given}: the drain job reads the queue with the \
             repository's own token, so there is no App, no public address and no webhook"
        ))),
        false => Err(usage(format!(
            "{given}: only for --host actions, which runs rowbranch in the repository's GitHub \
             Actions: add --host actions, or leave out {given}"
        ))),
    }
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
            excerpt(&default_branch)
        )));
    }
    Ok(ActionsSetup {
        every,
        install: install(args)?,
        kick: args.kick,
        default_branch,
        api_url: public_url(api_url)
            .map_err(|_| usage(format!("--api-url `{api_url}` is not an http(s) URL")))?
            .0,
    })
}

fn install(args: &InitArgs) -> Result<Install, Failure> {
    if let (Some(url), Some(sha256)) = (&args.release_url, &args.release_sha256) {
        if sha256.len() != 64 || !sha256.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(usage(
                "--release-sha256 is 64 hexadecimal digits: the archive's line in the release's \
                 SHA256SUMS",
            ));
        }
        return Ok(Install::Release {
            url: https("--release-url", url)?,
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
    if args.rev.is_none() && OWN_COMMIT == "unknown" {
        return Err(usage(
            "--rev COMMIT is required: this rowbranch does not know the commit it was built from \
             (--version says unknown)",
        ));
    }
    let rev = args.rev.as_deref().unwrap_or(OWN_COMMIT);
    if !(7..=40).contains(&rev.len()) || !rev.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(usage(format!(
            "--rev `{}` is not a commit id: 7 to 40 hexadecimal digits (a branch or tag could \
             move; a commit cannot)",
            excerpt(rev)
        )));
    }
    let rev = rev.to_ascii_lowercase();
    Ok(Install::Git { url, rev })
}

/// An https URL: the runner fetches it without credentials, and plain http could be changed
/// on the way.
fn https(flag: &str, raw: &str) -> Result<String, Failure> {
    let (url, _) = public_url(raw).map_err(|_| usage(format!("{flag} `{raw}` is not a URL")))?;
    if !url.starts_with("https://") {
        return Err(usage(format!("{flag} `{raw}` must be an https:// URL")));
    }
    Ok(url)
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
            assert_eq!(every.minutes, minutes, "{text}");
            assert_eq!(every.words(), words, "{text}");
        }
    }

    #[test]
    fn shorter_than_five_minutes_or_uneven_intervals_are_refused_with_the_choices() {
        let too_often = Every::parse("1m").unwrap_err();
        assert!(
            too_often.starts_with("`1m` is shorter than GitHub's shortest schedule"),
            "{too_often}"
        );
        for uneven in [
            "7m",
            "45m",
            "90m",
            "5h",
            "2d",
            "5m30s",
            "400s",
            "100000000h",
        ] {
            let err = Every::parse(uneven).unwrap_err();
            assert!(
                err.starts_with(&format!("`{uneven}` cannot be a schedule")),
                "{uneven}: {err}"
            );
            assert!(err.contains("15m, 20m, 30m, 1h"), "{err}");
        }
        let soon = Every::parse("soon").unwrap_err();
        assert!(soon.contains("is not a duration"), "{soon}");
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
                assert_eq!(minutes.len() as u32, 60 / every.minutes, "{cron}");
                assert!(minutes.windows(2).all(|w| w[1] - w[0] == every.minutes));
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
                assert_eq!(runs, 24 * 60 / every.minutes, "{repo} {text}: {cron}");
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

    fn example() -> ActionsSetup {
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

    #[test]
    fn the_job_has_time_for_the_install_the_drain_and_a_minute_more() {
        let mut setup = example();
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
        let values = example().values("acme/app");
        assert_eq!(
            values.get_attr("kick_url").unwrap().as_str().unwrap(),
            "https://api.github.com/repos/acme/app/actions/workflows/rowbranch-drain.yml/dispatches"
        );
    }
}
