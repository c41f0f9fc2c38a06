//! `kavach wsp`: whole-process persistence (run a program with its memory in a pool, resume it).

use crate::outcome::Outcome;
use anyhow::Result;
use clap::Subcommand;

/// The `wsp` subcommands.
#[derive(Debug, Subcommand)]
pub enum WspCommand {
    /// Describe a saved process image (not yet built).
    Info {
        /// The pool file holding the image.
        #[arg(long)]
        pool: std::path::PathBuf,
    },
}

/// Run one `wsp` subcommand.
pub fn run(cmd: WspCommand) -> Result<Outcome> {
    match cmd {
        WspCommand::Info { pool } => {
            anyhow::bail!("`kavach wsp info {}`: not built yet", pool.display())
        }
    }
}
