//! The pure-Rust core: no Python here, testable with `cargo test` and loom.

pub mod acquire;
pub mod cancel;
pub mod deadline;
pub mod error;
pub mod fork;
pub(crate) mod give_up;
pub mod lock;
pub mod park;
pub(crate) mod queue;
pub mod raw;
pub(crate) mod runner;
pub(crate) mod slot;
pub(crate) mod state;
pub(crate) mod sync;
pub mod task;
pub(crate) mod timer;
pub mod token_wait;
pub mod unlock;
pub mod wait;
pub mod waiter;
