//! A port of the Go package's tests.
//!
//! Provenance: these follow, step by step, the scenarios of `TestLock`,
//! `TestSharableLock` and `TestUnlock` in `ctxlock_test.go` of Go's ctxlock
//! (github.com/ymd-h/go, directory `ctxlock`), the design this crate ports. The
//! "-> OK" / "-> error" comments are the Go tests' own. Go's `context.WithTimeout(bg,
//! 100µs)` is a `CancelToken` with a deadline here, `context.WithCancel` plus `cancel()`
//! a token cancelled at once, `context.Background()` no token (`forever()`), and
//! `UnlockFunc` is `Unlock`. Where Go only checks `err != nil`, we also check which
//! error. Steps marked "(added)" are not in the Go tests.
#![cfg(not(loom))] // loom's types only work inside `loom::model`.

mod support;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ctxlock::{forever, AcquireError, CancelToken, Lock, LockView, SharableLock, Unlock};
use support::{label, reason, until_cancelled, watchdog};

/// Go's `newTimeout(dt)`: a context that ends `dt` from now.
fn new_timeout(dt: Duration) -> CancelToken {
    CancelToken::new(Some((
        Instant::now() + dt,
        reason("context deadline exceeded"),
    )))
}

/// Go's `dt := time.Duration(100000)`: 100 µs, for the steps that must fail.
const DT: Duration = Duration::from_micros(100);

/// Go uses `dt` for the steps that must succeed too; on a busy machine 100 µs can pass
/// before the acquire runs, so those steps get a long timeout here.
const OK_DT: Duration = Duration::from_secs(10);

/// Go's `L.Lock(ctx)`: acquire with the context, get the unlock function.
fn lock(view: &LockView, ctx: &CancelToken) -> Result<Unlock, AcquireError> {
    view.acquire(until_cancelled(ctx))
}

/// An error from a context that ended: Go returns `context.Cause(ctx)`.
fn assert_context_error(r: Result<Unlock, AcquireError>, cause: &str) {
    match r {
        Err(AcquireError::Cancelled(why)) => assert_eq!(label(&why), cause),
        Err(e) => panic!("Must Fail with the context's cause, got {e:?}"),
        Ok(_) => panic!("Must Fail"),
    }
}

#[test]
fn test_lock() {
    let _watchdog = watchdog("test_lock");
    let l = Lock::new();

    // Lock
    // -> OK
    let ctx = new_timeout(OK_DT);
    let unlock = lock(&l, &ctx).expect("Fail");

    // Lock when it is already locked.
    // -> error
    let ctx_t = new_timeout(DT);
    assert_context_error(lock(&l, &ctx_t), "context deadline exceeded");

    unlock.unlock();

    // Lock after unlock
    // -> OK
    let ctx = new_timeout(OK_DT);
    let unlock = lock(&l, &ctx).expect("Fail");
    unlock.unlock();

    // Lock with already canceled context
    // -> error
    // (Go uses a 100 us context here; a long one keeps its deadline from winning the race
    // with the cancel on a busy machine.)
    let ctx = new_timeout(OK_DT);
    ctx.cancel(reason("context canceled"));
    assert_context_error(lock(&l, &ctx), "context canceled");
    assert!(
        !l.is_locked(),
        "(added) the failed acquire took the free lock"
    );

    // Lock when it unlock during waiting.
    // -> OK
    let unlock = l.acquire(forever()).expect("Fail");
    thread::scope(|s| {
        s.spawn(move || {
            thread::sleep(Duration::from_millis(100));
            unlock.unlock();
        });
        let unlock = l.acquire(forever()).expect("Fail");
        // (added) and it is released again.
        assert!(unlock.unlock());
    });
    assert!(!l.is_locked() && l.queued() == 0);
}

#[test]
fn test_sharable_lock() {
    let l = SharableLock::new();

    // ExclusiveLock
    // -> OK
    let ctx = new_timeout(OK_DT);
    let unlock = lock(l.exclusive(), &ctx).expect("Fail");

    // SharedLock when it has already been ExclusiveLock-ed.
    // -> error
    let ctx_t = new_timeout(DT);
    assert_context_error(lock(l.shared(), &ctx_t), "context deadline exceeded");

    unlock.unlock();

    // SharedLock after unlock
    // -> OK
    let ctx = new_timeout(OK_DT);
    let unlock1 = lock(l.shared(), &ctx).expect("Fail");

    // SharedLock when it is already been SharedLock-ed.
    // -> OK
    let ctx = new_timeout(OK_DT);
    let unlock2 = lock(l.shared(), &ctx).expect("Fail");

    // ExclusiveLock when it is already been SharedLock-ed.
    // -> error
    let ctx = new_timeout(DT);
    assert_context_error(lock(l.exclusive(), &ctx), "context deadline exceeded");

    unlock1.unlock();
    unlock2.unlock();

    // (added) ExclusiveLock after both shared unlocks
    // -> OK
    let ctx = new_timeout(OK_DT);
    let unlock = lock(l.exclusive(), &ctx).expect("Fail");
    unlock.unlock();

    // Lock with already canceled ctx
    // -> error (both sides)
    let ctx = CancelToken::default();
    ctx.cancel(reason("context canceled"));
    assert_context_error(lock(l.exclusive(), &ctx), "context canceled");
    assert_context_error(lock(l.shared(), &ctx), "context canceled");

    // (added) the failed acquires left it free.
    assert!(!l.exclusive().is_locked() && l.shared().readers() == 0 && l.shared().queued() == 0);
}

#[test]
fn test_unlock() {
    let _watchdog = watchdog("test_unlock");
    let l = Lock::new();

    let ctx = new_timeout(OK_DT);
    let unlock = lock(&l, &ctx).expect("Fail");

    // Call multiple time safely.
    assert!(unlock.unlock());
    assert!(!unlock.unlock(), "(added) the second call is a no-op");

    let ctx = new_timeout(OK_DT);
    let unlock = Arc::new(lock(&l, &ctx).expect("Fail"));

    let ctx = new_timeout(Duration::from_millis(100));
    let _registration = unlock.unlock_on_cancel(&ctx);

    // Blocks until the context's deadline releases the hold above.
    // -> OK
    let unlock = l.acquire(forever()).expect("Fail");
    assert!(
        ctx.is_cancelled(),
        "(added) only the cancel can have released it"
    );
    unlock.unlock();
    assert!(!l.is_locked() && l.queued() == 0);
}
