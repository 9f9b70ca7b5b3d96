//! The pure-Rust core: no Python here, testable with `cargo test` and loom.
//!
//! Layers, each module using only those above it (`scripts/check-layers.py` checks that
//! the modules form no cycle):
//! - tokens and time, with no lock knowledge: `sync`, `deadline`, `step_aside` (an
//!   interrupted wait's), `park`, `runner`, `timer` (expires whatever implements its
//!   `Expire`), `fork` (what a forked child mends), `cancel`, `token_wait`;
//! - the seam every kind of lock plugs into, and the rules written once over it:
//!   `error`, `raw` (the `RawLock` trait), `give_up`, `wait` (a thread's wait), `task` (a
//!   task's wait), `acquire` (the argument rules), `unlock` (the once-only release);
//! - the in-process slot: `waiter`, `queue`, `state`, `hold_id` (ids of exclusive holds),
//!   `slot`;
//! - the kinds of lock and the nouns on top: `lock` (`LockView` is the in-process kind),
//!   `stats` (what `statistics()` reports);
//! - named locks: `named` (the contract and the `Session` seam every scope implements),
//!   `memory` (the in-process scope: a table of slots by name, with fences and the
//!   records `query()` reads), `percent` (the strict percent-decoding of the urls),
//!   `file_table` (the table a directory's processes share)
//!   `cohort` (a private `memory` scope per manager behind a gate per name: what every
//!   scope wider than the process shares), `file` (the processes-of-one-machine scope:
//!   kernel-owned gates), `pg_url` and `pg` (the PostgreSQL scope: server-owned gates),
//!   `scopes` (`connect`: one line per scope picks it by url).

pub mod acquire;
pub mod cancel;
#[cfg(all(not(loom), target_os = "linux"))]
pub(crate) mod cohort;
pub mod deadline;
pub mod error;
#[cfg(all(not(loom), target_os = "linux"))]
pub(crate) mod file;
#[cfg(all(not(loom), target_os = "linux"))]
pub(crate) mod file_table;
pub mod fork;
pub(crate) mod give_up;
pub(crate) mod hold_id;
pub mod lock;
#[cfg(not(loom))]
pub(crate) mod memory;
#[cfg(not(loom))]
pub mod named;
pub mod park;
#[cfg(not(loom))]
pub(crate) mod percent;
#[cfg(all(not(loom), target_os = "linux"))]
pub(crate) mod pg;
#[cfg(not(loom))]
pub mod pg_url;
pub(crate) mod queue;
pub mod raw;
pub(crate) mod runner;
#[cfg(not(loom))]
pub mod scopes;
pub(crate) mod slot;
pub(crate) mod state;
pub mod stats;
pub(crate) mod step_aside;
pub(crate) mod sync;
pub mod task;
pub(crate) mod timer;
pub mod token_wait;
pub mod unlock;
pub mod wait;
pub mod waiter;
