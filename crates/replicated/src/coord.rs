//! The coordination service an elector needs: one key held under a lease. etcd provides it
//! ([`crate::etcd::Etcd`]); so does the simulation's [`crate::mem::MemCoordinator`].

use std::fmt;

/// A key as the coordinator holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The value's bytes.
    pub value: Vec<u8>,
    /// The lease the key lives under (0: none).
    pub lease: i64,
    /// The revision at which the key was created.
    pub create_revision: i64,
}

/// Which call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordOp {
    /// Reading a key.
    Get,
    /// Granting a lease.
    Grant,
    /// Renewing a lease.
    KeepAlive,
    /// Creating a key if absent.
    Create,
    /// Replacing a key still held by a lease.
    Update,
    /// Writing a record with no lease while a key is held by a lease.
    Record,
    /// Revoking a lease.
    Revoke,
}

impl fmt::Display for CoordOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CoordOp::Get => "get",
            CoordOp::Grant => "lease grant",
            CoordOp::KeepAlive => "lease keepalive",
            CoordOp::Create => "create",
            CoordOp::Update => "update",
            CoordOp::Record => "record",
            CoordOp::Revoke => "lease revoke",
        })
    }
}

/// Why a coordinator call failed. Each variant names the call; the message is the detail
/// alone (it already names the endpoint and the request), as the elector prints it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoordError {
    /// The request or its answer did not get through (connection refused, timeout, a cut
    /// link): the call may or may not have taken effect.
    #[error("{detail}")]
    Unreachable { op: CoordOp, detail: String },
    /// The coordinator answered with an error (an unknown lease, say).
    #[error("{detail}")]
    Refused { op: CoordOp, detail: String },
    /// The coordinator answered something this client cannot read.
    #[error("{detail}")]
    BadAnswer { op: CoordOp, detail: String },
    /// The client's configuration is wrong (an endpoint URL, say); no call was made.
    #[error("{0}")]
    Config(String),
}

impl CoordError {
    /// The call that failed (`None` for a configuration error).
    pub fn op(&self) -> Option<CoordOp> {
        match self {
            CoordError::Unreachable { op, .. }
            | CoordError::Refused { op, .. }
            | CoordError::BadAnswer { op, .. } => Some(*op),
            CoordError::Config(_) => None,
        }
    }
}

/// What the elector asks of a coordination service: a key created only if absent under a
/// lease, the lease renewed or revoked. A lease that is not renewed within its TTL expires and
/// the keys under it vanish.
pub trait Coordinator {
    /// Read `key` with the lease it lives under.
    fn get(&self, key: &str) -> Result<Option<KeyValue>, CoordError>;
    /// Grant a lease of `ttl` seconds; its ID.
    fn grant(&self, ttl: u64) -> Result<i64, CoordError>;
    /// Renew lease `id`; the seconds it has left (0: it is gone).
    fn keepalive(&self, id: i64) -> Result<i64, CoordError>;
    /// Create `key` = `value` under `lease` if the key does not exist; whether it did.
    fn create(&self, key: &str, value: &[u8], lease: i64) -> Result<bool, CoordError>;
    /// Replace `key`'s value if it is still held by `lease`; whether it was.
    fn update(&self, key: &str, value: &[u8], lease: i64) -> Result<bool, CoordError>;
    /// Revoke lease `id` (its keys are deleted).
    fn revoke(&self, id: i64) -> Result<(), CoordError>;
    /// Write `key` = `value` with no lease (it stays until written again), if `guard` is still
    /// held under lease `lease`; whether it was. The leader records its epoch this way: only
    /// the holder of the leader key can write it.
    fn record_if_held(
        &self,
        guard: &str,
        lease: i64,
        key: &str,
        value: &[u8],
    ) -> Result<bool, CoordError>;
}
