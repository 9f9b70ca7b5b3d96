//! CancelToken: a tree of cancellation signals with reasons, deadlines and callbacks
//! (Go's `context` with `WithCancelCause`, `WithDeadline` and `AfterFunc`).
//!
//! A token is cancelled at most once; the first reason wins. Everything that must happen
//! on cancellation is a callback registered on the node (a blocked thread's `unpark`, an
//! asyncio waiter's doorbell, a user's `on_cancel`) or a child in the node's `children`.
//! So a cancel wakes exactly the waiters of that token and its descendants, and nothing
//! polls. Callbacks and children are taken out under the node's mutex and dealt with
//! after it is dropped; a cancel walks the tree with a worklist, and dropping a chain
//! frees it in a loop, so no depth of tree is too deep for a thread's stack.
//!
//! Callbacks come in two kinds ([`Runs`]): internal ones are short and run at once in
//! the thread that cancels; a user's may block, so when a deadline cancels they are
//! handed to the runner threads (`runner.rs`) and never delay the timer, the token's own
//! state or each other. An explicit `cancel()` runs them in the caller's thread.
//!
//! A child registers itself on its parent and unregisters when it is dropped, so a
//! long-lived parent does not collect dead children (tokio's `num_handles` problem).
//! Own deadlines are kept by the one timer thread (`timer.rs`); a token's effective
//! deadline is the earliest of its own and its ancestors'.
//!
//! The token tree uses std's primitives directly: it is checked by ordinary and
//! property tests, while loom models the slot and its queue.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Instant;

use super::timer::{self, Expire};
use super::{deadline, runner};

/// Why a token was cancelled: any value; the binding stores a Python object here.
pub type Reason = Arc<dyn Any + Send + Sync>;

type Callback = Box<dyn FnOnce(&Reason) + Send>;

/// Where a callback runs when its token is cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runs {
    /// Internal and short (unpark a thread, ring a doorbell, release a lock): at once, in
    /// the thread that cancels, whatever cancels.
    Now,
    /// A user's function, which may block: in the thread that calls `cancel`, but for a
    /// deadline on a runner thread of its own, so that the timer and other callbacks
    /// never wait for it.
    Elsewhere,
}

/// What cancels a token: an explicit call, or a deadline (the timer, or a thread waiting
/// on the token that saw it pass first).
#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    Call,
    Deadline,
}

/// A cancellation signal shared by any number of acquires. Cloning shares the token.
#[derive(Clone)]
pub struct CancelToken(Arc<Node>);

struct Node {
    /// Set once, with `Inner::reason`; read without the mutex on every acquire.
    cancelled: AtomicBool,
    inner: Mutex<Inner>,
    /// The effective deadline: the earliest of this node's own and its ancestors'.
    deadline: Option<Instant>,
    /// This node's own deadline and the reason it cancels with when it passes.
    own_deadline: Option<(Instant, Reason)>,
    /// The parent and this node's key in its `children`.
    parent: Option<(Arc<Node>, u64)>,
    /// This node's entry in the timer, removed on drop. Set once, right after the node
    /// exists (the timer may fire at once, and must then find the node alive).
    timer_key: OnceLock<timer::Key>,
}

#[derive(Default)]
struct Inner {
    reason: Option<Reason>,
    callbacks: BTreeMap<u64, (Runs, Callback)>,
    /// Weak: a child lives as long as its handles (or its `pin`) do.
    children: BTreeMap<u64, Weak<Node>>,
    /// The node itself, while it has callbacks and something other than a handle can
    /// still cancel it (a parent or an own deadline). Invariant: `Some` only while
    /// `callbacks` is not empty, `reason` is `None` and the node has a parent or an own
    /// deadline. It keeps the node, and so its callbacks, alive when nobody else holds
    /// it: Go's `AfterFunc` runs whether or not the program keeps the context. A root
    /// without a deadline is not pinned: once its handles are gone nothing can cancel
    /// it, so its callbacks are freed with it.
    pin: Option<Arc<Node>>,
    next_id: u64,
}

/// What a cancel takes out of one node, to deal with after its mutex.
struct Taken {
    callbacks: BTreeMap<u64, (Runs, Callback)>,
    children: BTreeMap<u64, Weak<Node>>,
    pin: Option<Arc<Node>>,
}

/// A callback registered with [`CancelToken::on_cancel`] or
/// [`CancelToken::on_cancel_user`]. Dropping it leaves the callback registered: the
/// node's `pin` keeps it until it runs, so `unlock_on_cancel(CancelToken(deadline=...))`
/// fires even when nobody else holds the token.
///
/// It holds its token weakly: a registration is often kept by what its callback
/// refers to (an `Unlock` keeps the registration of its `unlock_on_cancel`, whose
/// callback refers to the `Unlock`). A strong reference would make that a cycle that
/// keeps both alive for ever once nothing else can cancel the token; a weak one lets
/// the token go with its last handle (or its pin), and its callbacks with it.
pub struct Registration {
    node: Weak<Node>,
    id: u64,
}

impl Registration {
    /// Unregister; true if this stopped the callback from running. False once the
    /// token is gone: its callbacks went with it, without running.
    pub fn unregister(self) -> bool {
        let Some(node) = self.node.upgrade() else {
            return false;
        };
        let (removed, pin) = {
            let mut inner = node.lock();
            let removed = inner.callbacks.remove(&self.id);
            let pin = match inner.callbacks.is_empty() {
                true => inner.pin.take(),
                false => None,
            };
            (removed, pin)
        };
        // The callback (maybe a Python object) and the pin are dropped here, after the
        // mutex (`node` keeps the node alive until then).
        drop(pin);
        removed.is_some()
    }
}

impl Default for CancelToken {
    fn default() -> Self {
        CancelToken::new(None)
    }
}

impl CancelToken {
    /// A new root token; `deadline` is when it cancels itself, and with what reason.
    pub fn new(deadline: Option<(Instant, Reason)>) -> CancelToken {
        CancelToken(Node::create(None, deadline))
    }

    /// A token cancelled with this one (and its reason) or by its own deadline.
    /// Cancelling the child never cancels the parent.
    pub fn child(&self, deadline: Option<(Instant, Reason)>) -> CancelToken {
        CancelToken(Node::create(Some(&self.0), deadline))
    }

    /// Cancel this token and its descendants. True if this call did it (the first wins).
    /// Every callback runs in this thread before it returns, [`Runs::Elsewhere`] ones
    /// after all the [`Runs::Now`] ones.
    pub fn cancel(&self, reason: Reason) -> bool {
        self.0.cancel(reason, By::Call)
    }

    /// Whether the token has been cancelled. One atomic load.
    #[inline]
    pub fn is_cancelled(&self) -> bool {
        // ORDERING: Acquire pairs with the Release store in `Node::take`, so a caller
        // that sees `true` also sees the reason.
        self.0.cancelled.load(Ordering::Acquire)
    }

    /// The reason of the first `cancel`, once cancelled.
    pub fn reason(&self) -> Option<Reason> {
        self.0.lock().reason.clone()
    }

    /// The effective deadline, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.0.deadline
    }

    /// Cancel by deadline if this token's, or an ancestor's, own deadline is at or
    /// before `now` (the timer may not have got there yet). True if now cancelled.
    pub fn expire_if_due(&self, now: Instant) -> bool {
        let mut node = Some(&self.0);
        while let Some(n) = node {
            if let Some((at, reason)) = &n.own_deadline {
                if *at <= now {
                    n.cancel(reason.clone(), By::Deadline);
                }
            }
            node = n.parent.as_ref().map(|(p, _)| p);
        }
        self.is_cancelled()
    }

    /// Run `f(reason)` once on cancellation: now, in this thread, if the token is already
    /// cancelled (then `None` is returned), else in the thread that cancels. `f` must be
    /// short and must not block ([`Runs::Now`]): it may run in the timer thread.
    pub fn on_cancel(&self, f: impl FnOnce(&Reason) + Send + 'static) -> Option<Registration> {
        self.0.register(Runs::Now, Box::new(f))
    }

    /// Like [`on_cancel`](Self::on_cancel), for a function that may block
    /// ([`Runs::Elsewhere`]): a deadline runs it on a runner thread of its own.
    pub fn on_cancel_user(&self, f: impl FnOnce(&Reason) + Send + 'static) -> Option<Registration> {
        self.0.register(Runs::Elsewhere, Box::new(f))
    }

    /// Whether two handles share one token.
    pub fn same(&self, other: &CancelToken) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// How many callbacks (waiters, `on_cancel`s) and live children are registered (for
    /// tests).
    pub fn registrations(&self) -> usize {
        let inner = self.0.lock();
        inner.callbacks.len() + inner.children.len()
    }
}

impl Node {
    fn create(parent: Option<&Arc<Node>>, own_deadline: Option<(Instant, Reason)>) -> Arc<Node> {
        let deadline = deadline::earliest(
            own_deadline.as_ref().map(|(at, _)| *at),
            parent.and_then(|p| p.deadline),
        );
        let mut inherited = None;
        let node = Arc::new_cyclic(|me: &Weak<Node>| {
            let parent = parent.and_then(|p| {
                let mut inner = p.lock();
                if let Some(reason) = &inner.reason {
                    inherited = Some(reason.clone());
                    return None;
                }
                let id = inner.next_id;
                inner.next_id += 1;
                inner.children.insert(id, me.clone());
                Some((p.clone(), id))
            });
            Node {
                cancelled: AtomicBool::new(false),
                inner: Mutex::new(Inner::default()),
                deadline,
                own_deadline,
                parent,
                timer_key: OnceLock::new(),
            }
        });
        if let Some(reason) = inherited {
            node.cancel(reason, By::Call);
        }
        // A parent cancelled while `new_cyclic` ran has already taken our entry, whose
        // `upgrade` failed (the node did not exist yet). Catch up under the parent's
        // mutex, which orders this check with that cancel; cancelling twice is a no-op.
        if let Some((p, _)) = &node.parent {
            let reason = p.lock().reason.clone();
            if let Some(reason) = reason {
                node.cancel(reason, By::Call);
            }
        }
        if let Some((at, _)) = &node.own_deadline {
            if *at <= Instant::now() {
                // Already due (a deadline of 0): cancelled before anyone can look.
                node.expire_own();
            } else {
                let entry: Weak<Node> = Arc::downgrade(&node);
                let _ = node.timer_key.set(timer::schedule(*at, entry));
            }
        }
        node
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // No user code runs under this mutex, so poisoning can only follow a panic in
        // the core itself; the data is consistent at every unlock point.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Register `f`, or run it now, in this thread, if already cancelled.
    fn register(self: &Arc<Self>, runs: Runs, f: Callback) -> Option<Registration> {
        let mut inner = self.lock();
        if let Some(reason) = &inner.reason {
            let reason = reason.clone();
            drop(inner);
            f(&reason);
            return None;
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.callbacks.insert(id, (runs, f));
        if inner.pin.is_none() && (self.parent.is_some() || self.own_deadline.is_some()) {
            inner.pin = Some(self.clone());
        }
        drop(inner);
        Some(Registration {
            node: Arc::downgrade(self),
            id,
        })
    }

    /// Cancel with this node's own deadline reason (its deadline is due).
    fn expire_own(&self) {
        if let Some((_, reason)) = &self.own_deadline {
            self.cancel(reason.clone(), By::Deadline);
        }
    }

    /// Mark this node cancelled and take out what the cancel must deal with; `None` if it
    /// was already cancelled.
    fn take(&self, reason: &Reason) -> Option<Taken> {
        let mut inner = self.lock();
        if inner.reason.is_some() {
            return None;
        }
        inner.reason = Some(reason.clone());
        // ORDERING: Release pairs with the Acquire load in `is_cancelled`; the reason
        // was written before, under the mutex.
        self.cancelled.store(true, Ordering::Release);
        Some(Taken {
            callbacks: std::mem::take(&mut inner.callbacks),
            children: std::mem::take(&mut inner.children),
            pin: inner.pin.take(),
        })
    }

    /// Cancel this node and its descendants, walking the tree with a worklist (no
    /// recursion, whatever its depth). Everything runs outside the nodes' mutexes: a
    /// callback may release locks, wake threads, or call back into the token.
    fn cancel(&self, reason: Reason, by: By) -> bool {
        let Some(first) = self.take(&reason) else {
            return false;
        };
        let mut user = Vec::new();
        let mut pins = Vec::new();
        let mut pending: Vec<Weak<Node>> = Vec::new();
        let mut next = Some(first);
        loop {
            if let Some(taken) = next {
                for (runs, f) in taken.callbacks.into_values() {
                    match runs {
                        Runs::Now => f(&reason),
                        Runs::Elsewhere => user.push(f),
                    }
                }
                pending.extend(taken.children.into_values());
                pins.extend(taken.pin);
            }
            let Some(child) = pending.pop() else {
                break;
            };
            // A child being dropped fails to upgrade: nobody can wait on it any more.
            next = child.upgrade().and_then(|c| c.take(&reason));
        }
        match by {
            By::Call => user.into_iter().for_each(|f| f(&reason)),
            By::Deadline => {
                for f in user {
                    let reason = reason.clone();
                    runner::run_elsewhere(Box::new(move || f(&reason)));
                }
            }
        }
        // Last, as a pin may be the last reference to its node (freed here, in a loop).
        drop(pins);
        true
    }
}

/// The timer's call at this node's own deadline.
impl Expire for Node {
    fn expire(&self) {
        self.expire_own();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(key) = self.timer_key.get() {
            timer::unschedule(*key);
        }
        // Unregister from the parent; free each ancestor that only this chain held here,
        // with its parent taken first, so its own `drop` does not recurse: a chain of a
        // million tokens is freed in a loop, not a million nested calls.
        let mut parent = self.parent.take();
        while let Some((node, id)) = parent {
            let removed = node.lock().children.remove(&id);
            drop(removed);
            parent = Arc::into_inner(node).and_then(|mut n| n.parent.take());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    fn reason(s: &'static str) -> Reason {
        Arc::new(s)
    }

    fn text(r: &Reason) -> &'static str {
        r.downcast_ref::<&'static str>().copied().unwrap()
    }

    #[test]
    fn first_reason_wins() {
        let t = CancelToken::default();
        assert!(!t.is_cancelled());
        assert!(t.reason().is_none());
        assert!(t.cancel(reason("a")));
        assert!(!t.cancel(reason("b")));
        assert!(t.is_cancelled());
        assert_eq!(text(&t.reason().unwrap()), "a");
    }

    #[test]
    fn children_follow_parents_not_the_other_way() {
        let parent = CancelToken::default();
        let child = parent.child(None);
        let grandchild = child.child(None);
        let sibling = parent.child(None);
        sibling.cancel(reason("sibling"));
        assert!(!parent.is_cancelled());
        parent.cancel(reason("parent"));
        assert!(child.is_cancelled() && grandchild.is_cancelled());
        assert_eq!(text(&grandchild.reason().unwrap()), "parent");
        assert_eq!(text(&sibling.reason().unwrap()), "sibling");
        let late = parent.child(None);
        assert_eq!(text(&late.reason().unwrap()), "parent");
    }

    #[test]
    fn dropped_children_unregister() {
        let parent = CancelToken::default();
        for _ in 0..1000 {
            let _child = parent.child(None);
        }
        assert_eq!(parent.registrations(), 0);
        let kept = parent.child(None);
        assert_eq!(parent.registrations(), 1);
        drop(kept);
        assert_eq!(parent.registrations(), 0);
    }

    #[test]
    fn on_cancel_runs_once_or_not_at_all() {
        // ORDERING: SeqCst throughout this test: a plain counter, simplest to read.
        let t = CancelToken::default();
        let runs = Arc::new(AtomicUsize::new(0));
        let r1 = runs.clone();
        let kept = t.on_cancel(move |_| {
            r1.fetch_add(1, Ordering::SeqCst);
        });
        let r2 = runs.clone();
        let stopped = t.on_cancel(move |_| {
            r2.fetch_add(10, Ordering::SeqCst);
        });
        assert!(stopped.unwrap().unregister());
        t.cancel(reason("x"));
        t.cancel(reason("y"));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(!kept.unwrap().unregister());
        let r3 = runs.clone();
        assert!(t
            .on_cancel(move |_| {
                r3.fetch_add(100, Ordering::SeqCst);
            })
            .is_none());
        assert_eq!(runs.load(Ordering::SeqCst), 101);
    }

    /// A parent cancelled by another thread while `child` builds the node ran the
    /// child's callback before the node could be upgraded; the child must still end up
    /// cancelled. (Miri finds the window in a few rounds; natively it is ~1 in 10^5.)
    #[test]
    fn child_created_during_parent_cancel_is_cancelled() {
        let rounds = if cfg!(miri) { 20 } else { 1000 };
        for round in 0..rounds {
            let parent = CancelToken::default();
            let go = std::sync::Barrier::new(2);
            let child = std::thread::scope(|s| {
                s.spawn(|| {
                    go.wait();
                    parent.cancel(reason("parent"));
                });
                go.wait();
                parent.child(None)
            });
            assert!(
                child.is_cancelled(),
                "round {round}: the child missed the cancel"
            );
            assert_eq!(text(&child.reason().unwrap()), "parent");
        }
    }

    #[test]
    fn deadlines_cancel_through_the_timer() {
        let soon = Instant::now() + Duration::from_millis(30);
        let parent = CancelToken::new(Some((soon, reason("deadline"))));
        let child = parent.child(Some((
            Instant::now() + Duration::from_secs(3600),
            reason("own"),
        )));
        assert_eq!(child.deadline(), Some(soon));
        let (tx, rx) = std::sync::mpsc::channel();
        child.on_cancel(move |r| tx.send(text(r)).unwrap());
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            "deadline"
        );
        assert!(parent.is_cancelled());
    }

    #[test]
    fn expire_if_due_walks_up() {
        let past = Instant::now();
        let parent = CancelToken::new(Some((past + Duration::from_secs(3600), reason("p"))));
        let child = parent.child(Some((past, reason("c"))));
        assert!(child.expire_if_due(Instant::now()));
        assert!(!parent.is_cancelled());
        assert_eq!(text(&child.reason().unwrap()), "c");
    }
}
