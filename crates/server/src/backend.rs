//! The contract between the RESP front end and the store behind it.
//!
//! The server parses and validates requests, then runs every data command on the store's data
//! model ([`Backend::keyspace`], `crates/model`). The per-operation write methods (SET, MSET,
//! DEL, INCRBY, APPEND, HSET, HDEL, ZADD, ZREM, FLUSHALL) remain for one caller: replaying
//! replication records written before the data model (`oplog`, tags 1 to 10). Every mutating
//! method returns only after its change is durable under the store's durability policy (with
//! `--durability always`, the operation's log record is persistent).
//!
//! Type rules follow Redis: a string command on a hash key is [`BackendError::WrongType`], and so
//! on. Expiry is the store's job: a key past its deadline is absent to every method.

/// An owned byte string.
pub type Bytes = Vec<u8>;

/// Why a store call failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum BackendError {
    /// The key holds a value of another type (Redis `WRONGTYPE`).
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    /// INCR/DECR/INCRBY on a value that is not a base-10 64-bit integer.
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    /// INCR/DECR/INCRBY would overflow a signed 64-bit integer.
    #[error("ERR increment or decrement would overflow")]
    Overflow,
    /// A value or key is larger than the store accepts.
    #[error("ERR {0}")]
    TooLarge(String),
    /// The store has no room (log and checkpoint space exhausted, shadow full, data zone full).
    #[error("OOM {0}")]
    OutOfSpace(String),
    /// The store failed (a persist failed, the medium is damaged); it refuses writes until
    /// reopened.
    #[error("ERR store failed: {0}")]
    Failed(String),
    /// A write sent to a server that only serves reads (a replication backup).
    #[error("READONLY {0}")]
    ReadOnly(String),
    /// A request this server refuses (for example PROMOTE on a server that is not a backup).
    #[error("ERR {0}")]
    Refused(String),
}

/// Result of a store call.
pub type BackendResult<T> = Result<T, BackendError>;

/// Options of SET.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SetOptions {
    /// Absolute expiry deadline in milliseconds since the Unix epoch (EX/PX converted by the
    /// server); `None` removes any previous expiry.
    pub expire_at_ms: Option<i64>,
    /// NX: set only if the key does not exist.
    pub only_if_absent: bool,
    /// XX: set only if the key exists.
    pub only_if_present: bool,
}

/// One section of INFO: a title (e.g. `Persistence`) and its `name:value` lines.
pub type InfoSection = (String, Vec<(String, String)>);

/// The store behind the server. Implemented by `dstore::Store`; tests may use another.
pub trait Backend: Send + Sync + 'static {
    /// SET with options. Returns `false` when NX/XX prevented the write.
    fn set(&self, key: &[u8], value: &[u8], opts: &SetOptions) -> BackendResult<bool>;
    /// MSET: all pairs in one atomic, durable operation.
    fn mset(&self, pairs: &[(&[u8], &[u8])]) -> BackendResult<()>;
    /// DEL: number of keys that existed and were removed.
    fn del(&self, keys: &[&[u8]]) -> BackendResult<u64>;
    /// INCRBY (INCR, DECR and DECRBY too): the new value. An absent key counts as 0.
    fn incr_by(&self, key: &[u8], delta: i64) -> BackendResult<i64>;
    /// APPEND: the new length.
    fn append(&self, key: &[u8], value: &[u8]) -> BackendResult<u64>;
    /// HSET/HMSET: number of fields that were added (not updated).
    fn hset(&self, key: &[u8], pairs: &[(&[u8], &[u8])]) -> BackendResult<u64>;
    /// HDEL: number of fields removed. A hash left empty is deleted.
    fn hdel(&self, key: &[u8], fields: &[&[u8]]) -> BackendResult<u64>;
    /// ZADD (no flags): number of members added (not updated). Scores are never NaN.
    fn zadd(&self, key: &[u8], members: &[(f64, &[u8])]) -> BackendResult<u64>;
    /// ZREM: number of members removed. A sorted set left empty is deleted.
    fn zrem(&self, key: &[u8], members: &[&[u8]]) -> BackendResult<u64>;
    /// FLUSHALL: remove every key, durably.
    fn flushall(&self) -> BackendResult<()>;
    /// SAVE: take a checkpoint now and return when it is durable.
    fn save(&self) -> BackendResult<()>;
    /// INFO sections the store owns (`Persistence`, `Integrity`, `Keyspace`, and store stats).
    fn info(&self) -> Vec<InfoSection>;
    /// Clean shutdown: make everything durable and mark the pool cleanly closed. Later calls
    /// fail with `Failed`.
    fn shutdown(&self) -> BackendResult<()>;
    /// The data-model store behind the generic commands (every data command of Redis 7 that
    /// Kavach serves goes through it). `None`: a backend that serves only the methods above.
    /// Make every write applied so far durable. The server calls it before any reply leaves
    /// (`Conn::flush`), so a store that defers its forces (group commit across connections:
    /// `dstore` with `ForcePolicy::Caller`) acknowledges a write, or shows a value another
    /// connection wrote, only once its record is durable, and the writes of one pass of a
    /// worker share one force. An error means the store could not make them durable: the
    /// replies are not sent. Default: nothing to do (every write was durable when its method
    /// returned).
    fn sync(&self) -> BackendResult<()> {
        Ok(())
    }
    fn keyspace(&self) -> Option<&dyn model::Keyspace> {
        None
    }
    /// WAIT numreplicas timeout: how many backups hold every write made so far, waiting up to
    /// `timeout` (`None`: for ever) for `replicas` of them. A store without backups answers 0
    /// at once.
    fn wait_replicas(
        &self,
        replicas: u64,
        timeout: Option<std::time::Duration>,
    ) -> BackendResult<u64> {
        let _ = (replicas, timeout);
        Ok(0)
    }
    /// CONFIG SET maxmemory / maxmemory-policy: the most bytes of data the store may hold (0: no
    /// limit) and what it does when full (`noeviction`, `allkeys-lru`, `volatile-ttl`). Stores
    /// that cannot change it while running refuse.
    fn set_memory_limit(&self, bytes: u64, policy: &str) -> BackendResult<()> {
        let _ = (bytes, policy);
        Err(BackendError::Refused(
            "this store cannot change its memory limit while running".into(),
        ))
    }
    /// KAVACH SCRUB / KAVACH REPAIR: scrub the store's protected regions now (with `repair`,
    /// repair what parity proves). Returns a JSON document of what was checked and found, and
    /// whether the store is clean. Stores without an integrity layer refuse.
    fn integrity_check(&self, repair: bool) -> BackendResult<String> {
        let _ = repair;
        Err(BackendError::Refused(
            "this server's store keeps no redundancy (start it with --redundancy lazy or eager)"
                .into(),
        ))
    }
    /// KAVACH REBUILD NEWPATH: rebuild the lost member of the store's pool set into the file
    /// `new` (created; or the lost member's own path, if it is back) while serving. Returns a
    /// line for the client. Stores that are not on a pool set, or whose set lost no member,
    /// refuse.
    fn rebuild_member(&self, new: &[u8]) -> BackendResult<String> {
        let _ = new;
        Err(BackendError::Refused(
            "KAVACH REBUILD: this server's store is not on a pool set".into(),
        ))
    }
    /// PROMOTE: turn a replication backup into the primary (`args` are the command's
    /// arguments after its name). Returns a line for the client. Stores that are not backups
    /// refuse.
    fn promote(&self, args: &[&[u8]]) -> BackendResult<String> {
        let _ = args;
        Err(BackendError::Refused(
            "PROMOTE: this server is not a replication backup".into(),
        ))
    }
}
