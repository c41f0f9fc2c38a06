//! How a primary talks to its backups: send requests, then collect the answers that arrive in
//! time. [`crate::tcp::TcpPeers`] is the real transport; the deterministic simulation brings
//! its own.

use std::fmt;

use crate::proto::{Request, Response};

/// The backups of one primary, numbered `0..count()`.
pub trait Peers: Send + fmt::Debug {
    /// How many backups are configured.
    fn count(&self) -> usize;
    /// A backup's name for messages (its address).
    fn name(&self, i: usize) -> String;
    /// Send `req` to backup `i` (connecting first if needed). `false` if it could not be sent;
    /// its answer is then `None`.
    fn send(&mut self, i: usize, req: &Request) -> bool;
    /// The answers to every `send` since the last `finish`, in send order: `None` for a backup
    /// that did not answer within the timeout (its connection is closed).
    fn finish(&mut self) -> Vec<(usize, Option<Response>)>;
    /// Drop the connection to backup `i`.
    fn disconnect(&mut self, i: usize);
}

/// Send one request and wait for its answer.
pub fn call<P: Peers + ?Sized>(peers: &mut P, i: usize, req: &Request) -> Option<Response> {
    peers.send(i, req);
    peers.finish().pop().and_then(|(_, r)| r)
}
