//! The persistent thread pool (ggml-cpu's threadpool without OpenMP).
//!
//! `n - 1` worker threads are started once and live as long as the pool; the calling thread is
//! worker 0. [`ThreadPool::run`] hands every thread the same job (a closure taking the thread
//! index), as ggml hands every thread the same node loop, and returns when all have finished.
//! Between jobs the workers spin briefly, then sleep on a condition variable; a job is started by
//! bumping a generation counter. No thread is created per graph.
//!
//! The pool is also the [`ThreadSync`] of its jobs: a spin-then-yield barrier (an arrival
//! counter plus a generation, as `ggml_barrier`), the shared chunk counter of MUL_MAT, and an
//! abort flag. A panic on any thread sets the flag, every barrier then returns at once, and
//! [`ThreadPool::run`] reports the panic as an error instead of hanging or unwinding through
//! the workers.

use crate::params::ThreadSync;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Spins before a waiting thread starts yielding its core (a barrier) or sleeping (between jobs).
const SPINS: usize = 1 << 12;

/// A job: the closure every thread runs with its index. Its lifetime is erased while it is
/// published; [`ThreadPool::run`] does not return before every worker is done with it.
#[derive(Clone, Copy)]
struct JobPtr(*const (dyn Fn(usize) + Sync));

// SAFETY: the pointee is `Sync`, so calling it from several threads is allowed; `run` keeps it
// alive until every worker has finished calling it.
unsafe impl Send for JobPtr {}

/// State shared by the pool's threads.
struct Shared {
    n_threads: usize,
    /// The current job, set by `run` before bumping `generation`.
    job: Mutex<Option<JobPtr>>,
    /// Bumped once per job; workers compare it with the last one they ran.
    generation: AtomicUsize,
    /// Workers (not counting thread 0) done with the current job.
    done: AtomicUsize,
    /// Sleeping workers wait here for a new generation or shutdown.
    wake: Condvar,
    /// The mutex `wake` is used with.
    sleep: Mutex<()>,
    shutdown: AtomicBool,
    /// Threads arrived at the current barrier.
    barrier_arrived: AtomicUsize,
    /// Barriers passed so far.
    barrier_passed: AtomicUsize,
    /// MUL_MAT's chunk counter.
    chunk: AtomicUsize,
    /// Set by a panic or by the user; barriers return at once and the node loop stops.
    abort: Arc<AtomicBool>,
    /// The first panic message of the current job.
    panic: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic happened while it was held; the data (a pointer, a
    // message, nothing) is still valid.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn panic_message(e: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = e.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = e.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

impl Shared {
    /// Runs the job on thread `ith`, turning a panic into the abort flag and a message.
    fn run_job(&self, job: JobPtr, ith: usize) {
        // SAFETY: `run` keeps the closure alive until every thread has returned from here.
        let f = unsafe { &*job.0 };
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| f(ith))) {
            let mut p = lock(&self.panic);
            if p.is_none() {
                *p = Some(format!("thread {ith}: {}", panic_message(e.as_ref())));
            }
            self.abort.store(true, Ordering::SeqCst);
        }
    }

    fn worker(&self, ith: usize) {
        let mut seen = 0usize;
        loop {
            // Spin a little: graphs often come back to back (one per generated token).
            let mut spins = 0;
            while self.generation.load(Ordering::Acquire) == seen
                && !self.shutdown.load(Ordering::Acquire)
                && spins < SPINS
            {
                std::hint::spin_loop();
                spins += 1;
            }
            {
                let mut g = lock(&self.sleep);
                while self.generation.load(Ordering::Acquire) == seen
                    && !self.shutdown.load(Ordering::Acquire)
                {
                    g = self.wake.wait(g).unwrap_or_else(|e| e.into_inner());
                }
            }
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            seen = self.generation.load(Ordering::Acquire);
            let job = lock(&self.job).expect("a job is published before the generation moves");
            self.run_job(job, ith);
            self.done.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl ThreadSync for Shared {
    fn barrier(&self) {
        let n = self.n_threads;
        if n == 1 {
            return;
        }
        let passed = self.barrier_passed.load(Ordering::Acquire);
        if self.barrier_arrived.fetch_add(1, Ordering::AcqRel) == n - 1 {
            // Last to arrive: reset the count, then let the others go.
            self.barrier_arrived.store(0, Ordering::Release);
            self.barrier_passed.fetch_add(1, Ordering::AcqRel);
            return;
        }
        let mut spins = 0usize;
        while self.barrier_passed.load(Ordering::Acquire) == passed {
            if self.abort.load(Ordering::Relaxed) {
                return;
            }
            spins += 1;
            if spins < SPINS {
                std::hint::spin_loop();
            } else {
                // More threads than free cores (e.g. 3 threads on 2): give the core away.
                std::thread::yield_now();
            }
        }
    }

    fn chunk_counter(&self) -> &AtomicUsize {
        &self.chunk
    }
}

/// A fixed set of threads that run jobs together.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool").field("n_threads", &self.shared.n_threads).finish()
    }
}

impl ThreadPool {
    /// Starts `n_threads - 1` workers (the caller of [`run`](Self::run) is the first thread),
    /// pinned to cores `0..n` when `pin` is set and the OS allows it.
    pub fn new(n_threads: usize, pin: bool, abort: Arc<AtomicBool>) -> std::io::Result<Self> {
        let n_threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            n_threads,
            job: Mutex::new(None),
            generation: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            wake: Condvar::new(),
            sleep: Mutex::new(()),
            shutdown: AtomicBool::new(false),
            barrier_arrived: AtomicUsize::new(0),
            barrier_passed: AtomicUsize::new(0),
            chunk: AtomicUsize::new(0),
            abort,
            panic: Mutex::new(None),
        });
        let cores =
            if pin { core_affinity::get_core_ids().unwrap_or_default() } else { Vec::new() };
        let mut workers = Vec::with_capacity(n_threads - 1);
        for ith in 1..n_threads {
            let s = shared.clone();
            let core = (!cores.is_empty()).then(|| cores[ith % cores.len()]);
            let handle = std::thread::Builder::new().name(format!("tessera-cpu-{ith}")).spawn(
                move || {
                    if let Some(c) = core {
                        core_affinity::set_for_current(c);
                    }
                    s.worker(ith)
                },
            )?;
            workers.push(handle);
        }
        Ok(ThreadPool { shared, workers })
    }

    /// Number of threads, the caller included.
    pub fn n_threads(&self) -> usize {
        self.shared.n_threads
    }

    /// Runs `f(ith)` on every thread `ith` in `0..n_threads` at once (the caller runs `f(0)`)
    /// and waits for all. `f` may call [`ThreadSync::barrier`] on [`sync`](Self::sync); every
    /// thread must call it the same number of times. Returns the first panic's message, if any
    /// thread panicked (the others are released from their barriers and finish early).
    pub fn run(&self, f: &(dyn Fn(usize) + Sync)) -> Result<(), String> {
        let s = &*self.shared;
        *lock(&s.panic) = None;
        s.barrier_arrived.store(0, Ordering::Relaxed);
        if s.n_threads > 1 {
            // SAFETY: only the lifetime is erased; the pointer is cleared and no worker calls it
            // after `done` reaches n - 1, which this function waits for before returning.
            let job: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(f) };
            *lock(&s.job) = Some(JobPtr(job));
            s.done.store(0, Ordering::Release);
            {
                let _g = lock(&s.sleep);
                s.generation.fetch_add(1, Ordering::AcqRel);
            }
            s.wake.notify_all();
        }
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| f(0))) {
            let mut p = lock(&s.panic);
            if p.is_none() {
                *p = Some(format!("thread 0: {}", panic_message(e.as_ref())));
            }
            s.abort.store(true, Ordering::SeqCst);
        }
        let mut spins = 0usize;
        while s.done.load(Ordering::Acquire) < s.n_threads - 1 {
            spins += 1;
            if spins < SPINS {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        *lock(&s.job) = None;
        match lock(&s.panic).take() {
            Some(msg) => Err(msg),
            None => Ok(()),
        }
    }

    /// Runs `f(0)` on the calling thread alone, the other threads left asleep (work too small
    /// to wake them for); `f` must not use the barrier. A panic's message as from `run`.
    pub fn run_alone(&self, f: &(dyn Fn(usize) + Sync)) -> Result<(), String> {
        catch_unwind(AssertUnwindSafe(|| f(0)))
            .map_err(|e| format!("thread 0: {}", panic_message(e.as_ref())))
    }

    /// The barrier and chunk counter of this pool's jobs.
    pub fn sync(&self) -> &dyn ThreadSync {
        &*self.shared
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        {
            let _g = lock(&self.shared.sleep);
            self.shared.shutdown.store(true, Ordering::Release);
        }
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_runs_each_job_once_and_barriers_order_phases() {
        for n in [1, 2, 3, 5] {
            let pool = ThreadPool::new(n, false, Arc::new(AtomicBool::new(false))).unwrap();
            for _ in 0..50 {
                let phase1 = AtomicUsize::new(0);
                let seen = AtomicUsize::new(0);
                pool.run(&|_ith| {
                    phase1.fetch_add(1, Ordering::SeqCst);
                    pool.sync().barrier();
                    // After the barrier every thread must see all of phase 1.
                    if phase1.load(Ordering::SeqCst) == n {
                        seen.fetch_add(1, Ordering::SeqCst);
                    }
                    pool.sync().barrier();
                })
                .unwrap();
                assert_eq!(seen.load(Ordering::SeqCst), n);
            }
        }
    }

    #[test]
    fn a_panicking_thread_becomes_an_error_and_releases_the_others() {
        let abort = Arc::new(AtomicBool::new(false));
        let pool = ThreadPool::new(3, false, abort.clone()).unwrap();
        let r = pool.run(&|ith| {
            if ith == 2 {
                panic!("boom");
            }
            pool.sync().barrier();
        });
        assert!(r.unwrap_err().contains("boom"));
        // The pool is still usable afterwards.
        abort.store(false, Ordering::SeqCst);
        let count = AtomicUsize::new(0);
        pool.run(&|_| {
            count.fetch_add(1, Ordering::SeqCst);
            pool.sync().barrier();
        })
        .unwrap();
        assert_eq!(count.load(Ordering::SeqCst), 3);
    }
}
