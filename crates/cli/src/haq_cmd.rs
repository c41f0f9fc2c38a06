//! `kavach haq`: the arbitration model and its scenarios (`haq`).

use anyhow::Result;
use clap::Subcommand;

use crate::outcome::Outcome;

#[derive(Debug, Subcommand)]
pub enum HaqCommand {
    /// Print the model's prediction for a configuration (to be written).
    Model,
}

pub fn run(c: HaqCommand) -> Result<Outcome> {
    match c {
        HaqCommand::Model => Ok(Outcome::Ok),
    }
}
