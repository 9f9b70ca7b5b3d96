//! The pure-Rust core: no Python here, testable with `cargo test` and loom.

pub mod cancel;
pub mod deadline;
pub mod error;
pub mod fork;
pub mod lock;
pub(crate) mod queue;
pub(crate) mod runner;
pub(crate) mod slot;
pub(crate) mod state;
pub mod stats;
pub(crate) mod sync;
pub mod task;
pub(crate) mod timer;
pub mod unlock;
pub mod wait;
pub mod waiter;
