//! The zsets commands.

use super::Spec;

/// This family's commands, sorted by name.
pub(super) static SPECS: &[Spec] = &[];
