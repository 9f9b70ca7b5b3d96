//! Every scope of named locks, picked by url: the one place that knows them all.
//!
//! - `memory:` (`memory.rs`): the threads and tasks of this process.
//! - `file:///dir` (`file.rs`): the processes of this machine (Linux).
//! - `postgresql://…` (`pg.rs`): many machines, on PostgreSQL advisory locks.

use std::sync::Arc;

use super::memory::{MemoryClient, MemoryScope};
use super::named::Session;

/// The url schemes [`connect`] knows, as its errors list them.
pub const SCHEMES: &str = "'memory:', 'file:///absolute/dir' or 'postgresql://user@host:port/db'";

/// Why [`connect`] could not make a session.
#[derive(Debug)]
pub enum ConnectError {
    /// The url names no scope this library has (a message for a `ValueError`).
    BadUrl(String),
    /// The scope cannot be reached (a message for a `BackendError`).
    Backend(String),
}

/// A new session (a manager's client) of the scope `url` names, and the url as it is
/// shown (without a password). The one place that knows every scope.
pub fn connect(url: &str) -> Result<(Arc<dyn Session>, String), ConnectError> {
    if url == "memory:" {
        return Ok((MemoryClient::new(MemoryScope::get()), url.to_owned()));
    }
    if let Some(path) = url.strip_prefix("file://") {
        if !path.starts_with('/') {
            return Err(ConnectError::BadUrl(format!(
                "LockManager url {url:?} needs an absolute directory: 'file:///absolute/dir'"
            )));
        }
        return Ok((file_scope(path)?, url.to_owned()));
    }
    if url.starts_with("postgresql://") || url.starts_with("postgres://") {
        return pg_scope(url);
    }
    Err(ConnectError::BadUrl(format!(
        "LockManager url {url:?} has an unsupported scheme; the supported ones are {SCHEMES}"
    )))
}

#[cfg(target_os = "linux")]
fn file_scope(path: &str) -> Result<Arc<dyn Session>, ConnectError> {
    let dir = super::file_table::dir_path(path).map_err(ConnectError::BadUrl)?;
    match super::file::connect(&dir) {
        Ok(client) => Ok(client),
        Err(e) => Err(ConnectError::Backend(e)),
    }
}

/// Open-file-description locks and futexes are Linux's; elsewhere the scope says so
/// when the manager is made.
#[cfg(not(target_os = "linux"))]
fn file_scope(_path: &str) -> Result<Arc<dyn Session>, ConnectError> {
    Err(ConnectError::Backend(
        "the processes-of-this-machine scope ('file:///dir') needs Linux (open file \
         description locks and futexes); use 'memory:' or 'postgresql://'"
            .to_owned(),
    ))
}

#[cfg(target_os = "linux")]
fn pg_scope(url: &str) -> Result<(Arc<dyn Session>, String), ConnectError> {
    super::pg::connect(url).map_err(|e| match e {
        super::pg::PgError::Url(why) => ConnectError::BadUrl(why),
        super::pg::PgError::Backend(why) => ConnectError::Backend(why),
    })
}

/// The PostgreSQL scope is built and tested on Linux only for now.
#[cfg(not(target_os = "linux"))]
fn pg_scope(_url: &str) -> Result<(Arc<dyn Session>, String), ConnectError> {
    Err(ConnectError::Backend(
        "the PostgreSQL scope ('postgresql://…') is built for Linux only in this version"
            .to_owned(),
    ))
}

/// Before the embedding's interpreter finalizes: stop the helper threads of every scope
/// that has them (the file scope's agents; see `file::stop_agents`).
pub fn before_exit() {
    #[cfg(target_os = "linux")]
    {
        super::file::stop_agents();
        super::pg::stop_agents();
    }
}
