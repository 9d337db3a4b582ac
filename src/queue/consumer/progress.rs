//! What the consumer has done and where its reading stands, for a run that ends once the queue
//! is drained (`rowbranch drain`): the rows it dispatched, found handled and dead-lettered, and
//! whether its last read found nothing while it held nothing, its hourly budget is spent, GitHub
//! stopped it, or the database cannot be read. `serve` keeps reading whatever it says.

use tokio::sync::watch;

use crate::queue::budget::Spent;
use crate::queue::settle::Fate;

/// The messages settled so far, by what they count as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub dispatched: u64,
    pub duplicates: u64,
    pub dead_lettered: u64,
}

/// Where the reading stands, and what it has settled.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Standing {
    /// Why the consumer has nothing to start now, once it has not; `None` while it reads.
    pub idle: Option<Idle>,
    /// The first run that GitHub (or the local forge) turned away past its retries: a rate
    /// limit, or the forge unreachable or refusing. Kept once seen.
    pub forge: Option<ForgeTrouble>,
    /// The last failure to read the queue, until a read succeeds again.
    pub database: Option<DatabaseTrouble>,
    /// Whether any read of the queue has succeeded.
    pub read_once: bool,
    pub counts: Counts,
}

/// Why nothing starts now.
#[derive(Debug, Clone, PartialEq)]
pub enum Idle {
    /// The last read found no visible message, and this process holds none.
    Drained,
    /// Every route's hourly budget is spent, and this process holds nothing.
    BudgetSpent(Spent),
}

/// A run the forge turned away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgeTrouble {
    /// GitHub's rate limit (primary or secondary): rows wait for it to refill.
    pub rate_limited: bool,
    pub message: String,
}

/// A failed read of the queue (or of its budgets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseTrouble {
    pub message: String,
    /// The server's SQLSTATE, when it answered with an error.
    pub code: Option<String>,
    /// Failures in a row.
    pub attempts: u32,
}

/// The standing, shared by the consumer's tasks and whoever watches.
#[derive(Debug, Default)]
pub struct Progress(watch::Sender<Standing>);

impl Progress {
    /// The standing now and as it changes (a count alone wakes no watcher).
    pub fn watch(&self) -> watch::Receiver<Standing> {
        self.0.subscribe()
    }

    pub fn counts(&self) -> Counts {
        self.0.borrow().counts
    }

    /// Counts a message settled as `fate`: its row dispatched (or dispatched again) by this
    /// process, handled already (or another claimant's), or dead-lettered; an ignored event,
    /// a retry, a release or a lost lease counts for nothing.
    pub(crate) fn count(&self, fate: &Fate) {
        self.0.send_if_modified(|s| {
            match fate {
                Fate::Dispatched | Fate::Redispatched => s.counts.dispatched += 1,
                Fate::Handled => s.counts.duplicates += 1,
                Fate::DeadLetter { .. } => s.counts.dead_lettered += 1,
                _ => {}
            }
            false
        });
    }

    /// A read succeeded: `idle` says whether anything may start.
    pub(super) fn read(&self, idle: Option<Idle>) {
        self.0.send_if_modified(|s| {
            let changed = s.idle != idle || s.database.is_some() || !s.read_once;
            s.idle = idle;
            s.database = None;
            s.read_once = true;
            changed
        });
    }

    pub(super) fn database_failed(&self, trouble: DatabaseTrouble) {
        self.0.send_modify(|s| s.database = Some(trouble));
    }

    pub(super) fn forge_failed(&self, trouble: ForgeTrouble) {
        self.0.send_if_modified(|s| {
            let first = s.forge.is_none();
            if first {
                s.forge = Some(trouble);
            }
            first
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::reason::Reason;

    #[test]
    fn each_settle_counts_as_the_summary_says() {
        let progress = Progress::default();
        for fate in [
            Fate::Dispatched,
            Fate::Redispatched,
            Fate::Handled,
            Fate::dead(Reason::BadId),
            Fate::Ignored,
            Fate::Later(Duration::from_secs(5)),
            Fate::Release,
            Fate::LeaseLost,
        ] {
            progress.count(&fate);
        }
        assert_eq!(
            progress.counts(),
            Counts {
                dispatched: 2,
                duplicates: 1,
                dead_lettered: 1
            }
        );
    }
}
