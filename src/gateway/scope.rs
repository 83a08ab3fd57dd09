//! The tasks of one run's gateway on the shared runtime: every connection, tunnel and
//! stream of the run is spawned through its [`Scope`], so the run's end cancels them all
//! at once (whatever each was doing) and can wait until the last is gone, as a runtime of
//! its own used to when it was dropped.

use std::future::Future;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The run's gateway tasks. Clones share them.
#[derive(Clone, Default)]
pub struct Scope {
    cancel: CancellationToken,
    tasks: TaskTracker,
}

impl Scope {
    /// Run `task` on the current runtime until it ends or the scope is cancelled.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let cancel = self.cancel.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = task => {}
            }
        });
    }

    /// End every task now: each is dropped at its next wake-up.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Whether the scope was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Cancel every task and wait until all are gone.
    pub async fn end(&self) {
        self.cancel.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[tokio::test(flavor = "current_thread")]
    async fn ending_the_scope_drops_every_task_and_waits_for_them() {
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let scope = Scope::default();
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = Flag(dropped.clone());
        scope.spawn(async move {
            let _held = flag;
            std::future::pending::<()>().await;
        });
        tokio::task::yield_now().await;
        assert!(!dropped.load(Ordering::SeqCst));
        scope.end().await;
        assert!(dropped.load(Ordering::SeqCst));
        assert!(scope.is_cancelled());
    }
}
