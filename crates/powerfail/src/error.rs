//! The crate's error type.

use std::path::PathBuf;

/// What went wrong setting up windows, costs or warning sources.
#[derive(Debug, thiserror::Error)]
pub enum PowerFailError {
    /// A window or cost parameter is out of range.
    #[error("invalid {what}: expected {expected}, found {found}")]
    InvalidWindow {
        /// The parameter.
        what: &'static str,
        /// What it must be.
        expected: &'static str,
        /// What was given.
        found: String,
    },
    /// A system call or socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A SIGPWR handler of this crate is already installed in this process.
    #[error("a SIGPWR warning source is already installed in this process")]
    SigpwrInstalled,
    /// The socket path is in use by a live listener.
    #[error("socket path {path} is in use by a listener that accepts connections")]
    SocketInUse {
        /// The path.
        path: PathBuf,
    },
}

impl PowerFailError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> PowerFailError {
        PowerFailError::Io {
            what: what.into(),
            source,
        }
    }
}
