//! The core beside `std::sync` and `parking_lot`: `cargo bench --bench core`.
//!
//! Groups are scenarios, functions are `<impl>` (jiter's `<scenario>_<impl>` naming):
//! - `uncontended_lock_unlock`: one thread, acquire and release. `ctxlock_Lock` is the
//!   raw `try_lock`/`unlock` pair, `ctxlock_Unlock` the once-only handle.
//! - `uncontended_shared`: one thread, shared acquire and release.
//! - `contended_4_threads`: four threads take turns on one lock around a small critical
//!   section, with a little work between; the time is per acquire+release.
//! - `named_uncontended`: one thread takes and releases names of `LockManager("memory:")`
//!   in turn (`try_lock_recorded`, then `release` with the fence), as the
//!   `named_acquire_unlock` row does under its Python calls. Beside it, [`ModelTable`],
//!   the least a table can do and keep the named contract (with a release that probes
//!   for its entry again, and one that goes to the bucket its acquire found), and the
//!   two mutex critical sections that all of them run per operation.
//!
//! Contenders implement [`Contender`] (parking_lot's `benchmark/` idea), so every lock
//! runs the same workload. Measurement is kept short (2 s, 30 samples) so the whole
//! run takes about half a minute; `cargo bench --bench core -- --test` runs each once.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use std::sync::{Arc, Mutex};

use criterion::{criterion_group, criterion_main, Bencher, Criterion};
use ctxlock::{connect, forever, Key, Lock, Mode, SharableLock, Who};
use hashbrown::HashTable;

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

/// How many names the named workloads take in turn (as the Python row does).
const NAMES: usize = 1_000;

/// The least a table of named locks can do and keep the contract of `LockManager`: per
/// name, its holds' records (fence, owner thread, grant time) for `query()`, under a mutex
/// per shard, with fences that increase per shard. What the real scope does besides is
/// left out: no entry is ever freed nor reused (names pile up), no waiter can queue (a
/// held name is simply refused), no closing, fork or lost-token bookkeeping. So it is a
/// lower bound for any table with one critical section per acquire and per release.
struct ModelTable {
    shards: Box<[Mutex<ModelShard>]>,
}

#[derive(Default)]
struct ModelShard {
    entries: HashTable<ModelEntry>,
    fence: u64,
}

struct ModelEntry {
    name: Arc<str>,
    hash: u64,
    /// Held while not empty (exclusive holds only).
    holds: Vec<ModelHold>,
}

struct ModelHold {
    fence: u64,
    thread: u64,
    since: f64,
}

impl ModelTable {
    fn new() -> ModelTable {
        ModelTable {
            shards: (0..64).map(|_| Mutex::default()).collect(),
        }
    }

    fn shard(&self, key: &Key) -> &Mutex<ModelShard> {
        &self.shards[(key.hash() >> 40) as usize % self.shards.len()]
    }

    /// Take `key` if nobody holds it: the hold's fence, and the bucket of the table where
    /// its entry was found (for [`ModelTable::release_at`]).
    ///
    /// Not inlined, as the scope's calls through `dyn Session` are not: a profile then
    /// counts both the same way (`valgrind --tool=callgrind` on this bench).
    #[inline(never)]
    fn try_lock_recorded(&self, key: &Key) -> Option<(u64, usize)> {
        let since = coarse_time();
        // SAFETY: `pthread_self` has no preconditions and always succeeds.
        let thread = unsafe { libc::pthread_self() } as u64;
        let mut shard = self.shard(key).lock().unwrap();
        let ModelShard { entries, fence } = &mut *shard;
        let mut found = match entries.find_entry(key.hash(), same_model(key)) {
            Ok(found) => found,
            Err(absent) => absent.into_table().insert_unique(
                key.hash(),
                ModelEntry {
                    name: key.name().into(),
                    hash: key.hash(),
                    holds: Vec::new(),
                },
                |e| e.hash,
            ),
        };
        let place = found.bucket_index();
        let entry = found.get_mut();
        if !entry.holds.is_empty() {
            return None;
        }
        *fence += 1;
        entry.holds.push(ModelHold {
            fence: *fence,
            thread,
            since,
        });
        Some((*fence, place))
    }

    /// Give back the hold with this fence, finding its entry by a probe.
    #[inline(never)]
    fn release(&self, key: &Key, fence: u64) -> bool {
        let mut shard = self.shard(key).lock().unwrap();
        match shard.entries.find_mut(key.hash(), same_model(key)) {
            Some(entry) => entry.take_hold(fence),
            None => false,
        }
    }

    /// [`ModelTable::release`] that first looks in the bucket the acquire found the
    /// entry in: a fence is unique in its shard, so the entry there that has a record
    /// with this fence is the hold's, and no name need be compared. If the table moved
    /// its entries since (it grew), the probe finds it.
    #[inline(never)]
    fn release_at(&self, key: &Key, place: usize, fence: u64) -> bool {
        let mut shard = self.shard(key).lock().unwrap();
        if let Some(entry) = shard.entries.get_bucket_mut(place) {
            if entry.take_hold(fence) {
                return true;
            }
        }
        match shard.entries.find_mut(key.hash(), same_model(key)) {
            Some(entry) => entry.take_hold(fence),
            None => false,
        }
    }
}

impl ModelEntry {
    /// Take out the record of the hold with this fence, if it has one.
    fn take_hold(&mut self, fence: u64) -> bool {
        match self.holds.iter().position(|h| h.fence == fence) {
            Some(i) => {
                let hold = self.holds.swap_remove(i);
                black_box((hold.thread, hold.since));
                true
            }
            None => false,
        }
    }
}

/// The entry of `key`'s name, the whole hash first (as the scope compares).
fn same_model(key: &Key) -> impl Fn(&ModelEntry) -> bool + '_ {
    move |e| e.hash == key.hash() && *e.name == *key.name()
}

/// The wall-clock time of the last tick, as the scope stamps a grant.
fn coarse_time() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is one Linux has.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn named_keys() -> Vec<Key> {
    (0..NAMES)
        .map(|i| Key::new(format!("bench:invoice:{i}").into()))
        .collect()
}

fn named_uncontended(c: &mut Criterion) {
    let mut g = c.benchmark_group("named_uncontended");
    let keys = named_keys();
    let (session, _) = connect("memory:").expect("the memory scope");
    let mut next = keys.iter().cycle();
    g.bench_function("ctxlock_memory_scope", |b| {
        b.iter(|| {
            let key = next.next().unwrap();
            let who = Who::thread();
            let fence = session
                .try_lock_recorded(key, Mode::Exclusive, who)
                .expect("a free name")
                .expect("an open manager");
            black_box(session.release(key, Mode::Exclusive, fence))
        })
    });
    for (name, from_bucket) in [
        ("model_table", false),
        ("model_table_no_second_probe", true),
    ] {
        let model = ModelTable::new();
        let mut next = keys.iter().cycle();
        g.bench_function(name, |b| {
            b.iter(|| {
                let key = next.next().unwrap();
                let (fence, place) = model.try_lock_recorded(key).expect("a free name");
                black_box(if from_bucket {
                    model.release_at(key, place, fence)
                } else {
                    model.release(key, fence)
                })
            })
        });
    }
    let shards: Vec<Mutex<u64>> = (0..64).map(|_| Mutex::new(0)).collect();
    let mut next = keys.iter().cycle();
    g.bench_function("two_critical_sections", |b| {
        b.iter(|| {
            let key = next.next().unwrap();
            let shard = &shards[(key.hash() >> 40) as usize % shards.len()];
            *shard.lock().unwrap() += 1;
            *shard.lock().unwrap() -= 1;
        })
    });
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
    targets = uncontended_lock_unlock, uncontended_shared, contended_4_threads, named_uncontended
}
criterion_main!(benches);
