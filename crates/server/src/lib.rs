//! `kavach serve`: a RESP2 (Redis protocol) server over a Kavach store.
//!
//! - [`resp`]: the incremental request parser, the reply encoder and a reply parser.
//! - [`server`]: [`Server`], its [`Config`], [`ShutdownHandle`] and [`install_signal_handlers`].
//! - [`backend`]: the [`Backend`](backend::Backend) contract the server calls.
//! - [`oplog`]: writes as operation records, for a replicated store's log.
//! - [`console`]: operator messages that never panic ([`say!`], [`say_out!`]).
//!
//! ```no_run
//! # fn demo(store: std::sync::Arc<dyn server::backend::Backend>) -> std::io::Result<()> {
//! let config = server::Config { port: 0, ..server::Config::default() };
//! // Bind first: a port that is taken fails here, before the store is opened or created.
//! let listener = server::Listener::bind(config)?;
//! server::install_signal_handlers(&listener.handle())?;
//! println!("listening on {}", listener.local_addr());
//! let server = listener.into_server(store);
//! let summary = server.run()?; // returns after SIGTERM, SIGINT or SHUTDOWN
//! println!("{} commands", summary.commands_processed);
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod backend;
mod command;
pub mod console;
mod glob;
mod notify;
pub mod oplog;
pub mod resp;
pub mod server;

pub use command::{REDIS_VERSION, SCAN_COUNT_MAX};
pub use resp::{Limits, ProtocolError};
pub use server::{Config, Listener, RunSummary, Server, ShutdownHandle, install_signal_handlers};
