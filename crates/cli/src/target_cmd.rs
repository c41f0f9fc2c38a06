//! `kavach target`: the block target over TCP.

use anyhow::{Result, bail};
use clap::Subcommand;

use crate::outcome::Outcome;

#[derive(Debug, Subcommand)]
pub enum TargetCommand {
    /// Serve namespaces from a directory.
    Serve {
        /// Directory holding one file per namespace.
        #[arg(long)]
        dir: String,
    },
}

pub fn run(c: TargetCommand) -> Result<Outcome> {
    match c {
        TargetCommand::Serve { dir } => bail!("kavach target serve --dir {dir}: not built yet"),
    }
}
