//! `kavach cr`: inspect what the checkpoint/restart runtime wrote to a device.

use anyhow::{Result, bail};
use clap::Subcommand;

use crate::outcome::Outcome;

#[derive(Debug, Subcommand)]
pub enum CrCommand {
    /// List the namespaces and files on a device.
    Ls {
        /// The device (a file, or tcp://HOST:PORT/JOB).
        device: String,
    },
}

pub fn run(c: CrCommand) -> Result<Outcome> {
    match c {
        CrCommand::Ls { device } => bail!("kavach cr ls {device}: not built yet"),
    }
}
