//! [`ThreadPool`]: persistent worker threads for data-parallel kernels.
//!
//! A decode step runs a few hundred small matrix products, so a broadcast must cost a few
//! microseconds at most: no thread is spawned and nothing is allocated per call. Workers wait
//! for a new *epoch*, spinning for a short while (the next kernel usually follows within
//! microseconds) and then parking; the caller wakes only the workers that parked.
//!
//! ```text
//!   caller                         worker k (k = 1..n)
//!   ------                         -------------------
//!   job := f; remaining := n-1
//!   epoch += 1  ─────────────────▶ sees epoch change (spin, or unparked)
//!   f(0, n)                        f(k, n)
//!   wait remaining == 0 ◀───────── remaining -= 1 (the last one unparks a parked caller)
//! ```
//!
//! [`SharedMut`] lets pool threads write disjoint parts of one output slice.
//!
//! Each thread adds the time it spends running jobs to its own counter ([`ThreadPool::busy_time`]):
//! the busy time of the inference threads, which over wall time and thread count is the CPU
//! utilisation of the pool (waiting for work, spinning or parked, is not counted).

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

/// The work a broadcast runs: `f(thread_index, n_threads)`.
type Job = dyn Fn(usize, usize) + Sync;

/// How long an idle thread polls before parking.
const SPIN: Duration = Duration::from_micros(100);

/// Within [`SPIN`], how long it polls without yielding its core.
const PURE_SPIN: Duration = Duration::from_micros(5);

/// Keeps hot atomics on their own cache lines (128 bytes covers adjacent-line prefetch).
#[repr(align(128))]
struct Padded<T>(T);

/// State shared between the pool handle and its workers.
struct Shared {
    n_threads: usize,
    /// Bumped once per broadcast (and once at shutdown).
    epoch: Padded<AtomicUsize>,
    /// Workers that have not finished the current job.
    remaining: Padded<AtomicUsize>,
    /// The current job, valid from an epoch bump until `remaining` reaches zero.
    job: UnsafeCell<Option<&'static Job>>,
    /// Per worker (index k-1): parked or about to park, waiting for the epoch to change.
    worker_parked: Box<[Padded<AtomicBool>]>,
    /// The caller parked (or is about to) waiting for `remaining == 0`.
    caller_parked: AtomicBool,
    /// The thread to unpark when `caller_parked` is set; written before that flag is.
    caller: Mutex<Option<Thread>>,
    /// A worker's job panicked during the current broadcast.
    panicked: AtomicBool,
    shutdown: AtomicBool,
    /// Per thread (index k, the caller's share at 0): nanoseconds spent running jobs.
    busy_ns: Box<[Padded<AtomicU64>]>,
}

impl Shared {
    /// Runs `f`, adding its duration to thread `index`'s busy time.
    fn timed<R>(&self, index: usize, f: impl FnOnce() -> R) -> R {
        let start = Instant::now();
        let r = f();
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.busy_ns[index].0.fetch_add(ns, Ordering::Relaxed);
        r
    }
}

// SAFETY: every field but `job` is Sync. `job` is written only by the broadcasting thread
// (serialized by `ThreadPool::lock`) while no worker reads it: before the epoch bump that
// publishes it (release, paired with the workers' acquire load of `epoch`) and after
// `remaining` reached zero, i.e. after every worker finished with it.
unsafe impl Sync for Shared {}
// SAFETY: `&'static Job` is `Send` (the closure is `Sync`); the other fields are `Send`.
unsafe impl Send for Shared {}

thread_local! {
    /// Address of the `Shared` whose job this thread is running (0 if none): a broadcast
    /// from inside a job on the same pool runs inline instead of deadlocking.
    static IN_POOL: Cell<usize> = const { Cell::new(0) };
}

/// Puts back the thread's previous [`IN_POOL`] value when dropped.
struct RestoreInPool(usize);

impl Drop for RestoreInPool {
    fn drop(&mut self) {
        IN_POOL.with(|c| c.set(self.0));
    }
}

/// A fixed set of threads that run data-parallel jobs. `n_threads` includes the thread
/// that calls [`broadcast`](ThreadPool::broadcast), which does its share of the work.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serializes broadcasts from different threads.
    lock: Mutex<()>,
}

impl ThreadPool {
    /// A pool of `n_threads` threads (at least 1): the caller plus `n_threads - 1` workers.
    pub fn new(n_threads: usize) -> ThreadPool {
        let n_threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            n_threads,
            epoch: Padded(AtomicUsize::new(0)),
            remaining: Padded(AtomicUsize::new(0)),
            job: UnsafeCell::new(None),
            worker_parked: (1..n_threads)
                .map(|_| Padded(AtomicBool::new(false)))
                .collect(),
            caller_parked: AtomicBool::new(false),
            caller: Mutex::new(None),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            busy_ns: (0..n_threads).map(|_| Padded(AtomicU64::new(0))).collect(),
        });
        let workers = (1..n_threads)
            .map(|k| {
                let shared = shared.clone();
                thread::Builder::new()
                    .name(format!("kestrel-pool-{k}"))
                    .spawn(move || worker_loop(&shared, k))
                    .expect("failed to spawn a thread-pool worker")
            })
            .collect();
        ThreadPool {
            shared,
            workers,
            lock: Mutex::new(()),
        }
    }

    /// The process-wide pool, sized by the `KESTREL_THREADS` environment variable, else by
    /// the available parallelism.
    pub fn global() -> &'static ThreadPool {
        static GLOBAL: OnceLock<ThreadPool> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let from_env = std::env::var("KESTREL_THREADS")
                .ok()
                .and_then(|s| s.parse().ok());
            let n =
                from_env.unwrap_or_else(|| thread::available_parallelism().map_or(1, |n| n.get()));
            ThreadPool::new(n)
        })
    }

    /// Number of threads a broadcast runs on, the caller included.
    pub fn n_threads(&self) -> usize {
        self.shared.n_threads
    }

    /// Time all threads together have spent running jobs since the pool started (the
    /// caller's share of broadcasts and the work `for_rows` keeps on the caller included).
    pub fn busy_time(&self) -> Duration {
        let ns: u64 = self
            .shared
            .busy_ns
            .iter()
            .map(|b| b.0.load(Ordering::Relaxed))
            .sum();
        Duration::from_nanos(ns)
    }

    /// Whether the current thread is running a job of this pool.
    fn in_this_pool(&self) -> bool {
        IN_POOL.with(Cell::get) == Arc::as_ptr(&self.shared) as usize
    }

    /// Runs `f(first_row, rows)` over contiguous shares of the `row_len`-long rows of
    /// `data`, one share per thread, or once over all of them on the calling thread when there
    /// are fewer than `min_rows` rows (less work than waking the pool costs).
    pub fn for_rows<T: Send>(
        &self,
        data: &mut [T],
        row_len: usize,
        min_rows: usize,
        f: &(dyn Fn(usize, &mut [T]) + Sync),
    ) {
        let rows = data.len().checked_div(row_len).unwrap_or(0);
        assert_eq!(
            rows * row_len,
            data.len(),
            "for_rows: data must be whole rows"
        );
        if rows < min_rows.max(2) || self.n_threads() == 1 {
            if self.in_this_pool() {
                return f(0, data);
            }
            return self.shared.timed(0, || f(0, data));
        }
        let shared = SharedMut::new(data);
        self.broadcast(&|t, n| {
            let (r0, r1) = (rows * t / n, rows * (t + 1) / n);
            if r0 < r1 {
                // SAFETY: thread t takes rows r0..r1, and the shares of different threads
                // are disjoint.
                let part = unsafe { shared.slice_mut(r0 * row_len, (r1 - r0) * row_len) };
                f(r0, part);
            }
        });
    }

    /// Run `f(thread_index, n_threads)` once for every `thread_index` in `0..n_threads`,
    /// index 0 on the calling thread; returns when all have finished. A panic in any of them
    /// is re-raised here after all have finished. Called from inside a job of this same pool,
    /// it runs `f(0, 1)` inline.
    pub fn broadcast(&self, f: &(dyn Fn(usize, usize) + Sync)) {
        let shared = &*self.shared;
        let id = shared as *const Shared as usize;
        if IN_POOL.with(Cell::get) == id {
            f(0, 1);
            return;
        }
        if shared.n_threads == 1 {
            // Marked as in the pool (restored on unwind too), so that a nested broadcast runs
            // inline without counting its time twice.
            let _restore = RestoreInPool(IN_POOL.with(|c| c.replace(id)));
            shared.timed(0, || f(0, 1));
            return;
        }
        // A panic never leaves the shared state inconsistent (we always wait for the
        // workers), so a poisoned lock is still usable.
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the lifetime is erased only for the duration of this call: workers use the
        // reference between the epoch bump below and their decrement of `remaining`, and we
        // do not return (or unwind) before `remaining` is zero. See `Shared`'s Sync impl for
        // why this write does not race.
        unsafe {
            *shared.job.get() = Some(std::mem::transmute::<
                &(dyn Fn(usize, usize) + Sync),
                &'static Job,
            >(f))
        };
        shared
            .remaining
            .0
            .store(shared.n_threads - 1, Ordering::Relaxed);
        shared.epoch.0.fetch_add(1, Ordering::SeqCst);
        self.wake_workers();
        let own = catch_unwind(AssertUnwindSafe(|| {
            let prev = IN_POOL.with(|c| c.replace(id));
            shared.timed(0, || f(0, shared.n_threads));
            IN_POOL.with(|c| c.set(prev));
        }));
        wait_for_workers(shared);
        // SAFETY: all workers are done with the job (remaining == 0, acquired above).
        unsafe { *shared.job.get() = None };
        if let Err(payload) = own {
            IN_POOL.with(|c| c.set(0));
            resume_unwind(payload);
        }
        if shared.panicked.swap(false, Ordering::Relaxed) {
            panic!("a thread-pool job panicked on a worker thread");
        }
    }

    /// Unpark the workers that parked; spinning ones see the epoch change by themselves.
    fn wake_workers(&self) {
        for (flag, worker) in self.shared.worker_parked.iter().zip(&self.workers) {
            if flag.0.swap(false, Ordering::SeqCst) {
                worker.thread().unpark();
            }
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.shared.epoch.0.fetch_add(1, Ordering::SeqCst);
        for worker in &self.workers {
            worker.thread().unpark();
        }
        for worker in self.workers.drain(..) {
            // A worker only exits through shutdown; job panics are caught inside it.
            let _ = worker.join();
        }
    }
}

fn worker_loop(shared: &Shared, index: usize) {
    IN_POOL.with(|c| c.set(shared as *const Shared as usize));
    let mut seen = 0;
    loop {
        seen = wait_for_epoch(shared, index, seen);
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: the job was written before the epoch bump we acquired, and is not
        // rewritten before our decrement of `remaining` below.
        let job = unsafe { *shared.job.get() };
        if let Some(job) = job {
            let run = shared.timed(index, || {
                catch_unwind(AssertUnwindSafe(|| job(index, shared.n_threads)))
            });
            if run.is_err() {
                shared.panicked.store(true, Ordering::Relaxed);
            }
        }
        if shared.remaining.0.fetch_sub(1, Ordering::SeqCst) == 1
            && shared.caller_parked.swap(false, Ordering::SeqCst)
        {
            if let Some(caller) = &*shared.caller.lock().unwrap_or_else(|e| e.into_inner()) {
                caller.unpark();
            }
        }
    }
}

/// Spin, then park, until the epoch differs from `seen`; returns the new epoch.
fn wait_for_epoch(shared: &Shared, index: usize, seen: usize) -> usize {
    let changed = || {
        let e = shared.epoch.0.load(Ordering::Acquire);
        (e != seen).then_some(e)
    };
    if let Some(e) = spin_until(changed) {
        return e;
    }
    let flag = &shared.worker_parked[index - 1].0;
    loop {
        // Store-then-check, against the caller's bump-then-swap (both SeqCst): either we see
        // the new epoch or the caller sees our flag and unparks us.
        flag.store(true, Ordering::SeqCst);
        let e = shared.epoch.0.load(Ordering::SeqCst);
        if e != seen {
            flag.store(false, Ordering::Relaxed);
            return e;
        }
        thread::park();
    }
}

/// Spin, then park, until every worker has finished the current job.
fn wait_for_workers(shared: &Shared) {
    let done = || (shared.remaining.0.load(Ordering::Acquire) == 0).then_some(());
    if spin_until(done).is_some() {
        return;
    }
    *shared.caller.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread::current());
    loop {
        shared.caller_parked.store(true, Ordering::SeqCst);
        if shared.remaining.0.load(Ordering::SeqCst) == 0 {
            shared.caller_parked.store(false, Ordering::Relaxed);
            return;
        }
        thread::park();
    }
}

/// Poll `ready` for up to [`SPIN`]; `None` if it never returned `Some`.
fn spin_until<T>(ready: impl Fn() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        for _ in 0..64 {
            if let Some(v) = ready() {
                return Some(v);
            }
            std::hint::spin_loop();
        }
        let waited = start.elapsed();
        if waited > SPIN {
            return None;
        }
        if waited > PURE_SPIN {
            // Under oversubscription, let the thread we are waiting for run.
            thread::yield_now();
        }
    }
}

/// A mutable slice that pool threads share, each writing a set of indices disjoint from
/// every other thread's. Bounds are checked; disjointness is the caller's obligation.
pub(crate) struct SharedMut<'a, T> {
    ptr: *mut T,
    len: usize,
    _slice: PhantomData<&'a mut [T]>,
}

// SAFETY: a `SharedMut` is only a `&mut [T]` split among threads; sending or sharing it is
// sound for `T: Send` as long as the threads write disjoint indices, which every unsafe
// method requires of its caller.
unsafe impl<T: Send> Send for SharedMut<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SharedMut<'_, T> {}

impl<'a, T> SharedMut<'a, T> {
    pub(crate) fn new(slice: &'a mut [T]) -> Self {
        SharedMut {
            ptr: slice.as_mut_ptr(),
            len: slice.len(),
            _slice: PhantomData,
        }
    }

    /// Write `value` at `index`.
    ///
    /// # Safety
    /// No other thread reads or writes `index` while this `SharedMut` is shared.
    #[inline]
    pub(crate) unsafe fn write(&self, index: usize, value: T) {
        assert!(
            index < self.len,
            "SharedMut index {index} out of bounds ({})",
            self.len
        );
        // SAFETY: in bounds (checked), and exclusive by the caller's contract.
        unsafe { self.ptr.add(index).write(value) }
    }

    /// The sub-slice `start..start + len`, to read.
    ///
    /// # Safety
    /// No thread writes that range while the returned slice lives.
    #[inline]
    pub(crate) unsafe fn slice(&self, start: usize, len: usize) -> &[T] {
        assert!(
            start <= self.len && len <= self.len - start,
            "SharedMut range out of bounds"
        );
        // SAFETY: in bounds (checked), and not written meanwhile by the caller's contract.
        unsafe { std::slice::from_raw_parts(self.ptr.add(start), len) }
    }

    /// The sub-slice `start..start + len`.
    ///
    /// # Safety
    /// No other thread accesses that range while the returned slice lives.
    #[inline]
    // A shared view hands out disjoint mutable ranges; the caller upholds the contract above.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice_mut(&self, start: usize, len: usize) -> &mut [T] {
        assert!(
            start <= self.len && len <= self.len - start,
            "SharedMut range out of bounds"
        );
        // SAFETY: in bounds (checked), and exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}
