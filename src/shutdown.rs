//! The process's shutdown as the parts that bound their work see it: `serve` begins it on
//! SIGTERM or SIGINT with a grace; the server, the pipeline and the forge's pacing and retries
//! read the deadline (SPEC §5, Shutdown).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// A handle on the shutdown; clones share it.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    deadline: Arc<watch::Sender<Option<Instant>>>,
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Begins the shutdown: what is under way has `grace` to finish. A second call keeps the
    /// first deadline.
    pub fn begin(&self, grace: Duration) {
        self.deadline.send_if_modified(|deadline| {
            if deadline.is_some() {
                return false;
            }
            *deadline = Some(Instant::now() + grace);
            true
        });
    }

    /// When the grace ends, once the shutdown has begun.
    pub fn deadline(&self) -> Option<Instant> {
        *self.deadline.borrow()
    }

    pub fn is_draining(&self) -> bool {
        self.deadline().is_some()
    }

    /// Waits until the shutdown begins.
    pub async fn begun(&self) {
        let mut seen = self.deadline.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = seen.wait_for(Option::is_some).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_grace_counts_from_the_first_begin() {
        let shutdown = Shutdown::new();
        assert!(!shutdown.is_draining());
        assert_eq!(shutdown.deadline(), None);
        let waiter = {
            let shutdown = shutdown.clone();
            tokio::spawn(async move { shutdown.begun().await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished());
        shutdown.begin(Duration::from_secs(20));
        waiter.await.unwrap();
        let deadline = shutdown.deadline().expect("begun");
        tokio::time::sleep(Duration::from_secs(5)).await;
        shutdown.begin(Duration::from_secs(60));
        assert_eq!(shutdown.deadline(), Some(deadline));
        assert_eq!(deadline - Instant::now(), Duration::from_secs(15));
    }
}
