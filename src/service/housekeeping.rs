//! Housekeeping — the summary written after an answer — never delays a reply. On a backend that
//! writes one reply at a time it takes the backend only while it is free, and gives way at once
//! when a reply wants it: the summary is cancelled and tried again later (nothing is lost; the
//! chat's records are all in the store). On a concurrent backend it has its own budget of one
//! call at a time and never touches the replies' permits.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// How long a summary that gave way waits before it tries again.
const RETRY_AFTER: Duration = Duration::from_millis(500);
/// How often a summary gives way before it is left for the next answer's.
const TRIES: usize = 20;

/// Shared by the service and every reply.
#[derive(Clone, Debug)]
pub struct Housekeeping {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Summaries holding a reply permit now.
    holding: AtomicUsize,
    /// Cancelled when a reply wants the backend: every summary holding a permit gives way.
    give_way: Mutex<CancellationToken>,
    /// The budget of a concurrent backend's summaries.
    own: Semaphore,
}

/// One housekeeping call counted as holding (or about to hold) the replies' permit, until
/// dropped.
struct Holding<'a>(&'a AtomicUsize);

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why a housekeeping call did not run to its end.
#[derive(Debug, PartialEq, Eq)]
pub enum GaveUp {
    /// The service is gone.
    Closed,
    /// It gave way to replies every time it tried.
    Busy,
}

impl Default for Housekeeping {
    fn default() -> Self {
        Housekeeping::new()
    }
}

impl Housekeeping {
    /// A new gate (a concurrent backend's summaries run one at a time).
    pub fn new() -> Housekeeping {
        Housekeeping {
            inner: Arc::new(Inner {
                holding: AtomicUsize::new(0),
                give_way: Mutex::new(CancellationToken::new()),
                own: Semaphore::new(1),
            }),
        }
    }

    /// A reply wants the backend and found no permit free: summaries holding one (or about to)
    /// give way. Returns whether any did (the permit comes back within moments).
    pub fn make_way(&self) -> bool {
        let mut token = self
            .inner
            .give_way
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if self.inner.holding.load(Ordering::SeqCst) == 0 {
            return false;
        }
        token.cancel();
        *token = CancellationToken::new();
        true
    }

    /// Runs `call` when the backend can spare it. With `replies` one permit (a one-at-a-time
    /// backend), it runs only while the permit is free and is cancelled when a reply wants it,
    /// then tried again; otherwise it runs under its own budget.
    pub async fn run<F, Fut, T>(
        &self,
        replies: &Arc<Semaphore>,
        one_at_a_time: bool,
        call: F,
    ) -> Result<T, GaveUp>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        if !one_at_a_time {
            let _budget = self.inner.own.acquire().await.map_err(|_| GaveUp::Closed)?;
            let mut call = call;
            return Ok(call().await);
        }
        self.run_tries(replies, TRIES, call).await
    }

    /// Runs `call` once on a one-at-a-time backend while the replies' permit is free (it waits
    /// for it), cancelled when a reply wants it: then it is not tried again.
    pub async fn run_once<F, Fut, T>(&self, replies: &Arc<Semaphore>, call: F) -> Result<T, GaveUp>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        self.run_tries(replies, 1, call).await
    }

    async fn run_tries<F, Fut, T>(
        &self,
        replies: &Arc<Semaphore>,
        tries: usize,
        mut call: F,
    ) -> Result<T, GaveUp>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        for tried in 1..=tries {
            // Counted as holding from before the permit is asked for: a released permit is handed
            // to its waiter at once, before the waiter runs, and a reply that finds it gone must
            // already see who has it. (Under the lock, so a reply's make_way cancels exactly the
            // token taken here, or comes before it.)
            let give_way = {
                let token = self
                    .inner
                    .give_way
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                self.inner.holding.fetch_add(1, Ordering::SeqCst);
                token.clone()
            };
            // Counted down however this ends — its task aborted included (a warm-up replaced by
            // the next): a count left up would make every queued reply wait for a give-way that
            // never comes.
            let held = Holding(&self.inner.holding);
            let permit: Result<OwnedSemaphorePermit, _> = replies.clone().acquire_owned().await;
            let Ok(permit) = permit else {
                return Err(GaveUp::Closed);
            };
            let outcome = tokio::select! {
                biased;
                _ = give_way.cancelled() => None,
                done = call() => Some(done),
            };
            drop(held);
            drop(permit);
            match outcome {
                Some(done) => return Ok(done),
                None => {
                    tracing::debug!("housekeeping gave way to a reply");
                    if tried < tries {
                        tokio::time::sleep(RETRY_AFTER).await;
                    }
                }
            }
        }
        Err(GaveUp::Busy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_summary_handed_the_permit_as_a_reply_ends_gives_way_before_it_even_runs() {
        let gate = Housekeeping::new();
        let permits = Arc::new(Semaphore::new(1));
        let first_reply = permits.clone().try_acquire_owned().unwrap();
        let task = {
            let (gate, permits) = (gate.clone(), permits.clone());
            tokio::spawn(async move {
                gate.run(&permits, true, || async {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                })
                .await
            })
        };
        // The summary now waits for the permit behind the first reply.
        tokio::time::sleep(Duration::from_millis(20)).await;
        // The reply ends: its permit goes straight to the waiting summary (which has not run
        // since), and a follow-up asked at that moment finds none free.
        drop(first_reply);
        assert!(permits.clone().try_acquire_owned().is_err());
        assert!(gate.make_way(), "the summary is told to give way");
        let follow_up =
            tokio::time::timeout(Duration::from_secs(1), permits.clone().acquire_owned())
                .await
                .expect("the follow-up gets the backend at once")
                .unwrap();
        drop(follow_up);
        task.abort();
    }

    #[tokio::test]
    async fn a_summary_gives_way_to_a_reply_and_runs_again_once_the_backend_is_free() {
        let gate = Housekeeping::new();
        let permits = Arc::new(Semaphore::new(1));
        let runs = Arc::new(AtomicUsize::new(0));
        let task = {
            let (gate, permits, runs) = (gate.clone(), permits.clone(), runs.clone());
            tokio::spawn(async move {
                gate.run(&permits, true, || {
                    let runs = runs.clone();
                    async move {
                        let n = runs.fetch_add(1, Ordering::SeqCst);
                        if n == 0 {
                            // The first try is slow: it is the one a reply interrupts.
                            tokio::time::sleep(Duration::from_secs(30)).await;
                        }
                        n
                    }
                })
                .await
            })
        };
        while gate.inner.holding.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            permits.clone().try_acquire_owned().is_err(),
            "the summary holds it"
        );
        assert!(gate.make_way());
        let reply = tokio::time::timeout(Duration::from_secs(1), permits.clone().acquire_owned())
            .await
            .expect("the reply gets the backend at once")
            .unwrap();
        drop(reply);
        assert_eq!(task.await.unwrap(), Ok(1), "tried again, and done");
        assert!(!gate.make_way(), "nothing holds the backend now");
    }

    #[tokio::test]
    async fn a_call_whose_task_is_ended_no_longer_holds_the_backend_for_the_replies() {
        let gate = Housekeeping::new();
        let permits = Arc::new(Semaphore::new(1));
        // A warm-up that holds the backend, its task then ended (a newer warm-up replaces it).
        let task = {
            let (gate, permits) = (gate.clone(), permits.clone());
            tokio::spawn(async move { gate.run_once(&permits, std::future::pending::<()>).await })
        };
        while permits.available_permits() == 1 {
            tokio::task::yield_now().await;
        }
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        assert_eq!(permits.available_permits(), 1, "the permit is back");
        assert!(
            !gate.make_way(),
            "a reply that queues is not told a call is giving way"
        );
    }
}
