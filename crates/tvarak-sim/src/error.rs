//! The crate's error type. Every error names what went wrong, where, what was expected and what
//! was found, so a bad trace or a bad command line is reported, never a panic.

use thiserror::Error;

/// An error of the simulator, the trace reader/writer or the functional engine.
#[derive(Debug, Error)]
pub enum SimError {
    /// A parameter or a request that cannot be honoured (bad configuration, bad design name,
    /// an address outside the traced range, ...).
    #[error("invalid {what}: expected {expected}, found {found}")]
    Invalid {
        /// What was invalid.
        what: String,
        /// What was expected.
        expected: String,
        /// What was found.
        found: String,
    },
    /// An I/O error while reading or writing `what`.
    #[error("i/o error on {what}: {source}")]
    Io {
        /// The file or stream involved.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A malformed trace: at byte or event `at`, the field `what` was not as expected.
    #[error("bad trace at {at}: {what}: expected {expected}, found {found}")]
    Trace {
        /// Where in the trace (byte offset or event index, as the reader says).
        at: u64,
        /// The field or structure that was malformed.
        what: String,
        /// What was expected.
        expected: String,
        /// What was found.
        found: String,
    },
}

impl SimError {
    /// Shorthand for [`SimError::Invalid`].
    pub fn invalid(
        what: impl Into<String>,
        expected: impl Into<String>,
        found: impl ToString,
    ) -> SimError {
        SimError::Invalid {
            what: what.into(),
            expected: expected.into(),
            found: found.to_string(),
        }
    }
}
