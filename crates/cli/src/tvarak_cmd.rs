//! `kavach tvarak-sim`: TVARAK's controller simulator (`tvarak_sim`).

use anyhow::Result;
use clap::Subcommand;

use crate::outcome::Outcome;

#[derive(Debug, Subcommand)]
pub enum TvarakCommand {
    /// Simulate a trace under one or more designs (to be written).
    Run,
}

pub fn run(c: TvarakCommand) -> Result<Outcome> {
    match c {
        TvarakCommand::Run => Ok(Outcome::Ok),
    }
}
