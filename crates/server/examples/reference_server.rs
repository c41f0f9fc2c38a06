//! Runs the server over the in-memory reference backend of the tests (test scaffolding, not a
//! store), to try real clients against the protocol front end:
//!
//! ```text
//! cargo run --release -p kavach-server --example reference_server -- 6390 [workers]
//! redis-cli -p 6390 ping
//! redis-benchmark -p 6390 -t set,get -P 16 -q
//! ```
//!
//! Stops on SIGTERM, SIGINT or SHUTDOWN.

#[path = "../tests/support/mod.rs"]
mod support;

use server::{Config, Server, install_signal_handlers};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let port = args
        .next()
        .map_or(Ok(6390), |p| p.parse())
        .map_err(std::io::Error::other)?;
    let mut config = Config {
        port,
        ..Config::default()
    };
    if let Some(workers) = args.next() {
        config.workers = workers.parse().map_err(std::io::Error::other)?;
    }
    let backend = support::ReferenceBackend::new();
    let server = Server::bind(config, backend)?;
    install_signal_handlers(&server.handle())?;
    eprintln!("listening on {}", server.local_addr());
    let summary = server.run()?;
    eprintln!("{summary:?}");
    Ok(())
}
