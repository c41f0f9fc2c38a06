//! `kavach serve`: a RESP2 (Redis protocol) server over a Kavach store.
//!
//! - [`resp`]: the incremental request parser, the reply encoder and a reply parser.
//! - [`server`]: [`Server`], its [`Config`], [`ShutdownHandle`] and [`install_signal_handlers`].
//! - [`backend`]: the [`Backend`](backend::Backend) contract the server calls.
//! - [`oplog`]: writes as operation records, for a replicated store's log.
//!
//! ```no_run
//! # fn demo(store: std::sync::Arc<dyn server::backend::Backend>) -> std::io::Result<()> {
//! let config = server::Config { port: 0, ..server::Config::default() };
//! let server = server::Server::bind(config, store)?;
//! server::install_signal_handlers(&server.handle())?;
//! println!("listening on {}", server.local_addr());
//! let summary = server.run()?; // returns after SIGTERM, SIGINT or SHUTDOWN
//! println!("{} commands", summary.commands_processed);
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod backend;
mod command;
mod glob;
pub mod oplog;
pub mod resp;
pub mod server;

pub use command::{REDIS_VERSION, SCAN_COUNT_MAX};
pub use resp::{Limits, ProtocolError};
pub use server::{Config, RunSummary, Server, ShutdownHandle, install_signal_handlers};
