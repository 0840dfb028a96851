//! A thread that writes to a database for many writers and makes their
//! writes durable at once: each writer queues a job (its write, and what
//! to run once that write is synced), and the thread runs the writes of
//! every job it finds queued, then one persist for all of them.
//!
//! Why: a store node's Raft logs share one journal
//! ([`crate::index_fjall::SharedFjall`]), and the appends a leader sends
//! together to a follower reach that follower's groups at the same moment.
//! Each group writing and syncing on its own, on the blocking pool, costs
//! a thread wake-up per append and, for the ones that miss the sync under
//! way, an fsync each; queued here they cost one wake-up of this thread
//! and one fsync between them. The writes run here too, not on the
//! caller's task: an engine may stall a write (fjall does, while its
//! flushes catch up), and a stall must not hold an async runtime's thread.
//!
//! Bounds: at most [`QUEUED`] jobs wait; [`SyncQueue::submit`] hands a job
//! back when the queue is full, and the caller writes and syncs on its
//! own. Jobs run in the order they were queued.
//!
//! The queue is a deque under a mutex with a condition variable, not a
//! channel: the thread waits for its next job on the condition variable at
//! once, where a channel's receive first spins and yields the CPU a few
//! times, which on a node whose threads share two cores cost a switch of
//! task per yield (docs/benchmarks.md, "The apply thread waits without
//! spinning").

use crate::error::StoreResult;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Most jobs queued at once.
pub const QUEUED: usize = 4096;

/// A write, run on the queue's thread.
pub type Write = Box<dyn FnOnce() -> StoreResult<()> + Send>;

/// What a job runs once its write is durable, with the write's or the
/// persist's error if either failed.
pub type Done = Box<dyn FnOnce(StoreResult<()>) + Send>;

/// A queued write and what runs after its sync.
pub struct Job {
    /// The write.
    pub write: Write,
    /// Run once the write is durable, or failed.
    pub done: Done,
}

/// The queue of one database's writes, and the thread that serves it. Clones share the thread, which ends (and is joined) when the last
/// clone is dropped.
#[derive(Clone)]
pub struct SyncQueue {
    inner: Arc<Inner>,
}

struct Inner {
    queue: Arc<Queue>,
    thread: Option<JoinHandle<()>>,
}

/// The jobs waiting, and whether the queue still takes jobs.
struct Queue {
    state: Mutex<Waiting>,
    ready: Condvar,
}

struct Waiting {
    jobs: VecDeque<Job>,
    open: bool,
}

impl Queue {
    /// The next jobs in order (at most [`QUEUED`]), waiting for the first;
    /// `None` once the queue is closed and empty.
    fn take(&self) -> Option<Vec<Job>> {
        let mut state = self.state.lock();
        while state.jobs.is_empty() {
            if !state.open {
                return None;
            }
            self.ready.wait(&mut state);
        }
        Some(state.jobs.drain(..).collect())
    }
}

impl SyncQueue {
    /// Start the thread `name`, which makes writes durable with `persist`
    /// (called once for every set of jobs it finds queued).
    pub fn start(
        name: &str,
        persist: impl Fn() -> StoreResult<()> + Send + 'static,
    ) -> std::io::Result<SyncQueue> {
        let queue = Arc::new(Queue {
            state: Mutex::new(Waiting {
                jobs: VecDeque::new(),
                open: true,
            }),
            ready: Condvar::new(),
        });
        let served = Arc::clone(&queue);
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || serve(&served, &persist))?;
        Ok(SyncQueue {
            inner: Arc::new(Inner {
                queue,
                thread: Some(thread),
            }),
        })
    }

    /// Queue `job`: its write runs on the queue's thread, and its `done`
    /// once the write is durable. A full queue hands the job back.
    pub fn submit(&self, job: Job) -> Result<(), Job> {
        let queue = &self.inner.queue;
        let mut state = queue.state.lock();
        if !state.open || state.jobs.len() >= QUEUED {
            return Err(job);
        }
        state.jobs.push_back(job);
        let first = state.jobs.len() == 1;
        drop(state);
        // The thread waits only on an empty queue.
        if first {
            queue.ready.notify_one();
        }
        Ok(())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the queue ends the thread once it has served what is
        // queued; joining it lets the database close before this returns.
        self.queue.state.lock().open = false;
        self.queue.ready.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The thread: wait for a job, take every other one queued behind it, run
/// their writes in order, persist once, answer them all in order.
fn serve(queue: &Queue, persist: &dyn Fn() -> StoreResult<()>) {
    while let Some(jobs) = queue.take() {
        let written: Vec<(StoreResult<()>, Done)> =
            jobs.into_iter().map(|j| ((j.write)(), j.done)).collect();
        let synced = if written.iter().any(|(w, _)| w.is_ok()) {
            persist()
        } else {
            Ok(())
        };
        for (wrote, done) in written {
            done(wrote.and_then(|()| same(&synced)));
        }
    }
}

/// `result` again, for each job a persist answers.
fn same(result: &StoreResult<()>) -> StoreResult<()> {
    match result {
        Ok(()) => Ok(()),
        Err(e) => Err(crate::error::StoreError::Engine(format!("sync: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::StoreError;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    /// A job that notes `i` in `log` when it writes and when it is done.
    fn job(i: usize, log: &Arc<Mutex<Vec<String>>>, fail: bool) -> Job {
        let (w, d) = (Arc::clone(log), Arc::clone(log));
        Job {
            write: Box::new(move || {
                w.lock().unwrap().push(format!("w{i}"));
                if fail {
                    Err(StoreError::Engine("bad write".into()))
                } else {
                    Ok(())
                }
            }),
            done: Box::new(move |r| {
                let mark = if r.is_ok() { "ok" } else { "err" };
                d.lock().unwrap().push(format!("{mark}{i}"));
            }),
        }
    }

    /// A queue whose persist notes itself in `log` and waits for `go`.
    fn gated(log: &Arc<Mutex<Vec<String>>>, fails: bool) -> (SyncQueue, mpsc::Sender<()>) {
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let go_rx = Mutex::new(go_rx);
        let l = Arc::clone(log);
        let q = SyncQueue::start("sync-test", move || {
            go_rx
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(10))
                .ok();
            l.lock().unwrap().push("persist".into());
            if fails {
                Err(StoreError::Engine("disk gone".into()))
            } else {
                Ok(())
            }
        })
        .expect("start");
        (q, go_tx)
    }

    #[test]
    fn jobs_queued_during_a_persist_share_the_next_one_and_run_in_order() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let (q, go) = gated(&log, false);
        assert!(q.submit(job(0, &log, false)).is_ok());
        // Until the first write is seen, the thread may not have taken it.
        while log.lock().unwrap().is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        for i in 1..=3 {
            assert!(q.submit(job(i, &log, i == 2)).is_ok());
        }
        go.send(()).ok();
        go.send(()).ok();
        drop(q);
        let log = log.lock().unwrap().join(" ");
        assert_eq!(
            log, "w0 persist ok0 w1 w2 w3 persist ok1 err2 ok3",
            "a failed write fails alone; the rest share one persist"
        );
    }

    #[test]
    fn a_failed_persist_reaches_every_job_and_a_full_queue_hands_back() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let (q, go) = gated(&log, true);
        // The thread takes a first job whose write waits; the queue then
        // holds QUEUED more, and the next two are handed back.
        let (hold_tx, hold_rx) = mpsc::channel::<()>();
        let (taken_tx, taken_rx) = mpsc::channel::<()>();
        let first = Job {
            write: Box::new(move || {
                taken_tx.send(()).ok();
                hold_rx.recv_timeout(Duration::from_secs(10)).ok();
                Ok(())
            }),
            done: Box::new(|r| assert!(r.is_err(), "the persist failed")),
        };
        assert!(q.submit(first).is_ok());
        taken_rx.recv().expect("the thread took the first job");
        let failed = Arc::new(AtomicUsize::new(0));
        let mut handed_back = 0;
        for _ in 0..QUEUED + 2 {
            let f = Arc::clone(&failed);
            let j = Job {
                write: Box::new(|| Ok(())),
                done: Box::new(move |r| {
                    if r.is_err() {
                        f.fetch_add(1, Ordering::SeqCst);
                    }
                }),
            };
            if q.submit(j).is_err() {
                handed_back += 1;
            }
        }
        assert_eq!(handed_back, 2);
        hold_tx.send(()).ok();
        go.send(()).ok();
        go.send(()).ok();
        drop(q);
        assert_eq!(failed.load(Ordering::SeqCst), QUEUED);
    }
}
