//! `ctxlock.LockStatistics`: the value `statistics()` returns (the rule is the core's,
//! `core/stats.rs`).

use pyo3::prelude::*;

use crate::core::stats::Statistics;

/// A snapshot of one lock or view, returned by ``statistics()``.
///
/// ``locked`` and ``holders`` are in the view's own mode: for ``rw.shared``, ``holders``
/// is the number of readers; for ``Lock`` and ``rw.exclusive`` it is 0 or 1. ``waiting``
/// counts the threads and tasks queued on the whole lock, in either mode (the two views
/// of a ``SharableLock`` share one queue, so both report the same number). The lock may
/// change hands as soon as the snapshot is taken.
#[pyclass(name = "LockStatistics", module = "ctxlock", frozen, eq, hash, weakref)]
#[derive(PartialEq, Eq, Hash)]
pub(crate) struct PyLockStatistics {
    stats: Statistics,
}

#[pymethods]
impl PyLockStatistics {
    /// True while the lock is held in the view's mode (``holders > 0``).
    #[getter]
    fn locked(&self) -> bool {
        self.stats.locked
    }

    /// Holds in the view's mode: 0 or 1 when exclusive, the reader count for ``rw.shared``.
    #[getter]
    fn holders(&self) -> usize {
        self.stats.holders
    }

    /// Threads and tasks queued on the lock, in either mode.
    #[getter]
    fn waiting(&self) -> usize {
        self.stats.waiting
    }

    fn __repr__(&self) -> String {
        let Statistics {
            locked,
            holders,
            waiting,
        } = self.stats;
        let locked = if locked { "True" } else { "False" };
        format!("LockStatistics(locked={locked}, holders={holders}, waiting={waiting})")
    }

    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<()> {
        Err(super::errors::not_picklable(slf.as_any()))
    }
}

impl From<Statistics> for PyLockStatistics {
    fn from(stats: Statistics) -> Self {
        PyLockStatistics { stats }
    }
}
