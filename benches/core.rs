//! The core beside `std::sync` and `parking_lot`: `cargo bench --bench core`.
//!
//! Groups are scenarios, functions are `<impl>` (jiter's `<scenario>_<impl>` naming):
//! - `uncontended_lock_unlock`: one thread, acquire and release. `ctxlock_Lock` is the
//!   raw `try_lock`/`unlock` pair, `ctxlock_Unlock` the once-only handle.
//! - `uncontended_shared`: one thread, shared acquire and release.
//! - `contended_4_threads`: four threads take turns on one lock around a small critical
//!   section, with a little work between; the time is per acquire+release.
//!
//! Contenders implement [`Contender`] (parking_lot's `benchmark/` idea), so every lock
//! runs the same workload. Measurement is kept short (2 s, 30 samples) so the whole
//! run takes about half a minute; `cargo bench --bench core -- --test` runs each once.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Bencher, Criterion};
use ctxlock::{forever, Lock, SharableLock};

/// Threads in the contended scenario.
const THREADS: usize = 4;
/// Spin-loop steps inside the critical section and between two of them.
const WORK_INSIDE: u32 = 10;
const WORK_BETWEEN: u32 = 20;

/// A lock the workloads can run on.
trait Contender: Sync {
    fn new() -> Self;
    /// Run `f` holding the lock exclusively (blocking until it is free).
    fn with(&self, f: impl FnOnce());
}

impl Contender for Lock {
    fn new() -> Self {
        Lock::new()
    }

    fn with(&self, f: impl FnOnce()) {
        self.lock(forever()).unwrap();
        f();
        self.unlock();
    }
}

/// The fair `Lock`: every release hands over in FIFO order.
struct FairLock(Lock);

impl Contender for FairLock {
    fn new() -> Self {
        FairLock(Lock::fair())
    }

    fn with(&self, f: impl FnOnce()) {
        self.0.with(f)
    }
}

impl Contender for parking_lot::Mutex<()> {
    fn new() -> Self {
        parking_lot::Mutex::new(())
    }

    fn with(&self, f: impl FnOnce()) {
        let _guard = self.lock();
        f();
    }
}

impl Contender for std::sync::Mutex<()> {
    fn new() -> Self {
        std::sync::Mutex::new(())
    }

    fn with(&self, f: impl FnOnce()) {
        let _guard = self.lock().unwrap();
        f();
    }
}

fn work(steps: u32) {
    for i in 0..steps {
        black_box(i);
    }
}

fn uncontended_lock_unlock(c: &mut Criterion) {
    let mut g = c.benchmark_group("uncontended_lock_unlock");
    let lock = Lock::new();
    g.bench_function("ctxlock_Lock", |b| {
        b.iter(|| black_box(lock.try_lock() && lock.unlock()))
    });
    g.bench_function("ctxlock_Unlock", |b| {
        b.iter(|| black_box(lock.try_acquire().map(|u| u.unlock())))
    });
    let m = parking_lot::Mutex::new(());
    g.bench_function("parking_lot_Mutex", |b| {
        b.iter(|| drop(black_box(m.lock())))
    });
    let m = std::sync::Mutex::new(());
    g.bench_function("std_Mutex", |b| {
        b.iter(|| drop(black_box(m.lock().unwrap())))
    });
    g.finish();
}

fn uncontended_shared(c: &mut Criterion) {
    let mut g = c.benchmark_group("uncontended_shared");
    let lock = SharableLock::new();
    let shared = lock.shared();
    g.bench_function("ctxlock_SharableLock", |b| {
        b.iter(|| black_box(shared.try_lock() && shared.unlock()))
    });
    let rw = parking_lot::RwLock::new(());
    g.bench_function("parking_lot_RwLock", |b| {
        b.iter(|| drop(black_box(rw.read())))
    });
    let rw = std::sync::RwLock::new(());
    g.bench_function("std_RwLock", |b| {
        b.iter(|| drop(black_box(rw.read().unwrap())))
    });
    g.finish();
}

/// `iters` acquire+release pairs shared out among `THREADS` threads; the clock runs
/// from the moment all have started until the last one is done.
fn contended<C: Contender>(b: &mut Bencher<'_>) {
    let lock = C::new();
    let counter = AtomicU64::new(0);
    b.iter_custom(|iters| {
        let per_thread = iters.div_ceil(THREADS as u64);
        let start = Barrier::new(THREADS + 1);
        let mut started = None;
        thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    start.wait();
                    for _ in 0..per_thread {
                        lock.with(|| {
                            // ORDERING: Relaxed load and store: the shared data the
                            // lock protects; the lock orders it.
                            let n = counter.load(Ordering::Relaxed);
                            work(WORK_INSIDE);
                            // ORDERING: as above.
                            counter.store(n + 1, Ordering::Relaxed);
                        });
                        work(WORK_BETWEEN);
                    }
                });
            }
            start.wait();
            started = Some(Instant::now());
        });
        let elapsed = started.expect("the scope ran").elapsed();
        // Report per pair, whatever the rounding up to a multiple of THREADS added.
        elapsed.mul_f64(iters as f64 / (per_thread * THREADS as u64) as f64)
    });
    // ORDERING: every thread was joined.
    assert!(counter.load(Ordering::Relaxed) > 0);
}

fn contended_4_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("contended_4_threads");
    g.bench_function("ctxlock_Lock", contended::<Lock>);
    g.bench_function("ctxlock_Lock_fair", contended::<FairLock>);
    g.bench_function("parking_lot_Mutex", contended::<parking_lot::Mutex<()>>);
    g.bench_function("std_Mutex", contended::<std::sync::Mutex<()>>);
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = uncontended_lock_unlock, uncontended_shared, contended_4_threads
}
criterion_main!(benches);
