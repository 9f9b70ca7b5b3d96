//! `statistics()`: what one view of a lock looks like right now, for monitoring and tests.
//!
//! The rule, for every kind of lock (a `Lock` is its one exclusive view):
//! - `holders` counts the holds in the view's own mode: 0 or 1 for an exclusive view,
//!   the size of the reader group for a shared view;
//! - `locked` is `holders > 0` (the same answer as [`LockView::is_locked`]);
//! - `waiting` counts every thread and task queued on the lock, in either mode: a lock
//!   has one FIFO queue, which both views of a `SharableLock` share, so both views report
//!   the same number.
//!
//! A [`Statistics`] is a snapshot: the uncontended paths change the holders without the
//! queue mutex, so by the time it is read the lock may have changed hands. Only the
//! `waiting` count and the state word's `QUEUED` bits are read under the same mutex.

use super::lock::LockView;
use super::state::{readers, WRITER};
use super::waiter::Mode;

/// A snapshot of one view of a lock; see the module docs for what each field counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Statistics {
    /// Whether the lock is held in the view's mode (`holders > 0`).
    pub locked: bool,
    /// Holds in the view's mode: 0 or 1 when exclusive, the reader count when shared.
    pub holders: usize,
    /// Threads and tasks queued on the lock, in either mode.
    pub waiting: usize,
}

impl Statistics {
    /// The rule: a view in `mode`, over the state word `state`, with `waiting` queued.
    pub(crate) fn of(mode: Mode, state: usize, waiting: usize) -> Statistics {
        let holders = match mode {
            Mode::Exclusive => usize::from(state & WRITER != 0),
            Mode::Shared => readers(state),
        };
        Statistics {
            locked: holders > 0,
            holders,
            waiting,
        }
    }
}

impl Statistics {
    /// The whole lock from the snapshots of its two modes: held if either is, by the
    /// holders of both (one writer, or the readers), with the one queue's waiters.
    pub fn of_both(exclusive: Statistics, shared: Statistics) -> Statistics {
        Statistics {
            locked: exclusive.locked || shared.locked,
            holders: exclusive.holders + shared.holders,
            waiting: exclusive.waiting.max(shared.waiting),
        }
    }
}

impl LockView {
    /// A snapshot of this view: its holders, and everyone queued on the lock.
    pub fn statistics(&self) -> Statistics {
        let (state, waiting) = self.slot().snapshot();
        Statistics::of(self.mode(), state, waiting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::state::{ONE_READER, QUEUED, WRITER_QUEUED};

    #[test]
    fn holders_count_the_views_own_mode() {
        let free = Statistics::default();
        assert_eq!(Statistics::of(Mode::Exclusive, 0, 0), free);
        assert_eq!(Statistics::of(Mode::Shared, 0, 0), free);
        let held = WRITER | QUEUED | WRITER_QUEUED;
        assert_eq!(
            Statistics::of(Mode::Exclusive, held, 2),
            Statistics {
                locked: true,
                holders: 1,
                waiting: 2
            }
        );
        assert_eq!(
            Statistics::of(Mode::Shared, held, 2),
            Statistics {
                locked: false,
                holders: 0,
                waiting: 2
            }
        );
        let readers = (3 * ONE_READER) | QUEUED | WRITER_QUEUED;
        assert_eq!(
            Statistics::of(Mode::Shared, readers, 1),
            Statistics {
                locked: true,
                holders: 3,
                waiting: 1
            }
        );
        assert_eq!(
            Statistics::of(Mode::Exclusive, readers, 1),
            Statistics {
                locked: false,
                holders: 0,
                waiting: 1
            }
        );
    }

    #[test]
    fn a_view_reports_its_lock() {
        let rw = crate::core::lock::SharableLock::new();
        let reader = rw.shared().try_acquire().expect("free");
        assert_eq!(
            rw.shared().statistics(),
            Statistics {
                locked: true,
                holders: 1,
                waiting: 0
            }
        );
        assert_eq!(rw.exclusive().statistics(), Statistics::default());
        reader.unlock();
        assert_eq!(rw.shared().statistics(), Statistics::default());
    }
}
