//! CancelToken: a tree of cancellation signals with reasons, deadlines and callbacks
//! (Go's `context` with `WithCancelCause`, `WithDeadline` and `AfterFunc`).
//!
//! A token is cancelled at most once; the first reason wins. Everything that must happen
//! on cancellation is a callback registered on the node: a blocked thread's `unpark`, an
//! asyncio waiter's doorbell, a child token's own `cancel`, a user's `on_cancel`. So a
//! cancel wakes exactly the waiters of that token and its descendants, and nothing
//! polls. Callbacks are taken out under the node's mutex and run after it is dropped.
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

use super::timer;

/// Why a token was cancelled: any value; the binding stores a Python object here.
pub type Reason = Arc<dyn Any + Send + Sync>;

type Callback = Box<dyn FnOnce(&Reason) + Send>;

/// A cancellation signal shared by any number of acquires. Cloning shares the token.
#[derive(Clone)]
pub struct CancelToken(Arc<Node>);

pub(crate) struct Node {
    /// Set once, with `Inner::reason`; read without the mutex on every acquire.
    cancelled: AtomicBool,
    inner: Mutex<Inner>,
    /// The effective deadline: the earliest of this node's own and its ancestors'.
    deadline: Option<Instant>,
    /// This node's own deadline and the reason it cancels with when it passes.
    own_deadline: Option<(Instant, Reason)>,
    /// The parent and this node's registration on it.
    parent: Option<(Arc<Node>, u64)>,
    /// This node's entry in the timer, removed on drop. Set once, right after the node
    /// exists (the timer may fire at once, and must then find the node alive).
    timer_key: OnceLock<timer::Key>,
}

#[derive(Default)]
struct Inner {
    reason: Option<Reason>,
    callbacks: BTreeMap<u64, Callback>,
    next_id: u64,
}

/// A callback registered with [`CancelToken::on_cancel`]. It keeps the token alive until
/// it is unregistered or has run, so `unlock_on_cancel(CancelToken(deadline=...))` fires
/// even when nobody else holds the token (as a Go context is kept by its `AfterFunc`).
pub struct Registration {
    node: Arc<Node>,
    id: u64,
}

impl Registration {
    /// Unregister; true if this stopped the callback from running.
    pub fn unregister(self) -> bool {
        let removed = self.node.lock().callbacks.remove(&self.id);
        // The callback (maybe a Python object) is dropped here, after the mutex.
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
    pub fn cancel(&self, reason: Reason) -> bool {
        self.0.cancel(reason)
    }

    /// Whether the token has been cancelled. One atomic load.
    #[inline]
    pub fn is_cancelled(&self) -> bool {
        // ORDERING: Acquire pairs with the Release store in `Node::cancel`, so a caller
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
                    n.cancel(reason.clone());
                }
            }
            node = n.parent.as_ref().map(|(p, _)| p);
        }
        self.is_cancelled()
    }

    /// Run `f(reason)` once on cancellation: now, in this thread, if the token is already
    /// cancelled (then `None` is returned), else in the thread that cancels.
    pub fn on_cancel(&self, f: impl FnOnce(&Reason) + Send + 'static) -> Option<Registration> {
        match self.0.register(Box::new(f)) {
            Ok(id) => Some(Registration {
                node: self.0.clone(),
                id,
            }),
            Err((reason, f)) => {
                f(&reason);
                None
            }
        }
    }

    /// Whether two handles share one token.
    pub fn same(&self, other: &CancelToken) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// How many callbacks (waiters, children, `on_cancel`s) are registered (for tests).
    pub fn registrations(&self) -> usize {
        self.0.lock().callbacks.len()
    }
}

impl Node {
    fn create(parent: Option<&Arc<Node>>, own_deadline: Option<(Instant, Reason)>) -> Arc<Node> {
        let deadline = crate::core::deadline::earliest(
            own_deadline.as_ref().map(|(at, _)| *at),
            parent.and_then(|p| p.deadline),
        );
        let mut inherited = None;
        let node = Arc::new_cyclic(|me: &Weak<Node>| {
            let parent = parent.and_then(|p| {
                let me = me.clone();
                let cancel_child: Callback = Box::new(move |reason: &Reason| {
                    if let Some(child) = me.upgrade() {
                        child.cancel(reason.clone());
                    }
                });
                match p.register(cancel_child) {
                    Ok(id) => Some((p.clone(), id)),
                    Err((reason, _)) => {
                        inherited = Some(reason);
                        None
                    }
                }
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
            node.cancel(reason);
        }
        // A parent cancelled while `new_cyclic` ran has already run our `cancel_child`,
        // whose `upgrade` failed (the node did not exist yet). Catch up under the parent's
        // mutex, which orders this check with that cancel; cancelling twice is a no-op.
        if let Some((p, _)) = &node.parent {
            let reason = p.lock().reason.clone();
            if let Some(reason) = reason {
                node.cancel(reason);
            }
        }
        if let Some((at, _)) = &node.own_deadline {
            if *at <= Instant::now() {
                // Already due (a deadline of 0): cancelled before anyone can look.
                node.expire_own();
            } else {
                let _ = node
                    .timer_key
                    .set(timer::schedule(*at, Arc::downgrade(&node)));
            }
        }
        node
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // No user code runs under this mutex, so poisoning can only follow a panic in
        // the core itself; the data is consistent at every unlock point.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Register `f`, or hand it back with the reason if already cancelled.
    #[allow(clippy::type_complexity)]
    fn register(&self, f: Callback) -> Result<u64, (Reason, Callback)> {
        let mut inner = self.lock();
        if let Some(reason) = &inner.reason {
            return Err((reason.clone(), f));
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.callbacks.insert(id, f);
        Ok(id)
    }

    /// Cancel with this node's own deadline reason (the timer's call).
    pub(crate) fn expire_own(&self) {
        if let Some((_, reason)) = &self.own_deadline {
            self.cancel(reason.clone());
        }
    }

    pub(crate) fn cancel(&self, reason: Reason) -> bool {
        let callbacks = {
            let mut inner = self.lock();
            if inner.reason.is_some() {
                return false;
            }
            inner.reason = Some(reason.clone());
            // ORDERING: Release pairs with the Acquire load in `is_cancelled`; the reason
            // was written before, under the mutex.
            self.cancelled.store(true, Ordering::Release);
            std::mem::take(&mut inner.callbacks)
        };
        // Run outside the mutex: a callback may cancel children, release locks, wake
        // threads, or call back into this token.
        for f in callbacks.into_values() {
            f(&reason);
        }
        true
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some((parent, id)) = self.parent.take() {
            let removed = parent.lock().callbacks.remove(&id);
            drop(removed);
        }
        if let Some(key) = self.timer_key.get() {
            timer::unschedule(*key);
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
