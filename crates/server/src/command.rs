//! Command dispatch: name lookup (case-insensitive), Redis-style arity checks, argument
//! validation, the call into the [`Backend`], and the reply, with Redis's error texts.
//!
//! Every handler validates all of its arguments before it calls the backend or writes a byte of
//! reply, so a failed command leaves no partial reply behind (and [`execute`] truncates the output
//! to be sure).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::backend::{Backend, BackendError, InfoSection};
use crate::glob::glob_match;
use crate::resp::{
    Reply, parse_strict_i64, write_array_header, write_bulk, write_error, write_integer,
    write_optional, write_simple, write_verbatim,
};
use crate::server::Shared;
use model::{Bytes, Db, Effect, Keyspace, Kind, ModelError, ModelResult, Scope, Txn};

/// The Redis version the server reports (INFO, HELLO), so tools that check versions work.
pub const REDIS_VERSION: &str = "7.0.0";

/// Largest COUNT a SCAN step asks the backend for; larger requests are clamped (COUNT is a hint).
pub const SCAN_COUNT_MAX: usize = 100_000;

/// Default SCAN COUNT, as in Redis.
const SCAN_COUNT_DEFAULT: usize = 10;

/// How much of a client-supplied word an error reply quotes, as Redis does.
const ERROR_QUOTE_BYTES_MAX: usize = 128;

/// What the connection does after a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Go on with the next request.
    Continue,
    /// Send the replies so far, then close (QUIT).
    CloseAfterReply,
    /// Shut the server down: close this connection without a reply (SHUTDOWN).
    Shutdown,
    /// A blocking command (BLPOP and kin) found nothing to take and wrote no reply: park the
    /// connection until one of `keys` is written (then run the same command again) or until
    /// `deadline` (then reply with the null array, RESP3's null: Redis 7.0's timeout reply for
    /// every blocking command, BLMOVE and BRPOPLPUSH included). Inside EXEC a handler must not
    /// block (`Ctx::in_exec`); it answers the timeout reply at once.
    Block {
        /// The keys whose writes wake the connection.
        keys: Vec<(Db, Bytes)>,
        /// When to give up (`None`: never).
        deadline: Option<Instant>,
    },
}

/// What other connections see of a connection (CLIENT LIST, CLIENT KILL). The connection owns
/// it; the [`ClientRegistry`] holds it weakly, so a closed connection drops out by itself.
#[derive(Debug)]
pub(crate) struct ClientHandle {
    id: u64,
    peer: Option<SocketAddr>,
    local: Option<SocketAddr>,
    /// The socket's file descriptor (-1 if unknown).
    fd: i64,
    created: Instant,
    /// Set by CLIENT KILL; the owning worker closes the connection when it sees it.
    killed: AtomicBool,
    /// The last command run: its index in the command table plus one (0: none yet).
    last_command: AtomicUsize,
    /// Its subcommand, if it has known ones: index in [`SUBCOMMANDS`] plus one (0: none).
    last_subcommand: AtomicUsize,
    /// When the last command ran, in milliseconds after `created`.
    last_active_ms: AtomicU64,
    /// Name, library and protocol, copied from the session when a command changes them.
    meta: Mutex<ClientMeta>,
    /// The database, subscriptions and MULTI queue length (-1: not in MULTI) after the last
    /// command, and whether a blocking command parks the connection.
    db: AtomicUsize,
    channels: AtomicUsize,
    patterns: AtomicUsize,
    multi: std::sync::atomic::AtomicI64,
    pub(crate) blocked: AtomicBool,
}

#[derive(Debug, Default, Clone)]
struct ClientMeta {
    name: Option<Vec<u8>>,
    lib_name: Option<Vec<u8>>,
    lib_ver: Option<Vec<u8>>,
    resp3: bool,
}

impl ClientHandle {
    /// Whether CLIENT KILL marked this connection for closing.
    pub(crate) fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }
}

/// Every open connection by id, for CLIENT LIST and CLIENT KILL.
#[derive(Debug, Default)]
pub(crate) struct ClientRegistry {
    inner: Mutex<RegistryInner>,
}

#[derive(Debug, Default)]
struct RegistryInner {
    clients: BTreeMap<u64, Weak<ClientHandle>>,
    /// Size at which closed connections' entries are dropped from `clients`.
    prune_at: usize,
}

/// Entries of closed connections are dropped once the map grows past this (and twice the live
/// count after each pruning).
const REGISTRY_PRUNE_MIN: usize = 64;

impl ClientRegistry {
    /// Registers a new connection and returns its handle.
    pub(crate) fn register(
        &self,
        id: u64,
        peer: Option<SocketAddr>,
        local: Option<SocketAddr>,
        fd: i64,
    ) -> Arc<ClientHandle> {
        let handle = Arc::new(ClientHandle {
            id,
            peer,
            local,
            fd,
            created: Instant::now(),
            killed: AtomicBool::new(false),
            last_command: AtomicUsize::new(0),
            last_subcommand: AtomicUsize::new(0),
            last_active_ms: AtomicU64::new(0),
            meta: Mutex::new(ClientMeta::default()),
            db: AtomicUsize::new(0),
            channels: AtomicUsize::new(0),
            patterns: AtomicUsize::new(0),
            multi: std::sync::atomic::AtomicI64::new(-1),
            blocked: AtomicBool::new(false),
        });
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.clients.len() >= inner.prune_at.max(REGISTRY_PRUNE_MIN) {
            inner.clients.retain(|_, c| c.strong_count() > 0);
            inner.prune_at = inner.clients.len() * 2;
        }
        inner.clients.insert(id, Arc::downgrade(&handle));
        handle
    }

    /// The open connections, by id. A connection CLIENT KILL marked is gone already for
    /// every command, as in Redis, even before its worker has closed the socket.
    fn live(&self) -> Vec<Arc<ClientHandle>> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner
            .clients
            .values()
            .filter_map(Weak::upgrade)
            .filter(|c| !c.is_killed())
            .collect()
    }
}

/// Per-connection state that commands read and change.
#[derive(Debug)]
pub(crate) struct Session {
    /// CLIENT ID, unique for the life of the server.
    pub(crate) id: u64,
    /// CLIENT SETNAME.
    pub(crate) name: Option<Vec<u8>>,
    /// CLIENT SETINFO LIB-NAME.
    pub(crate) lib_name: Option<Vec<u8>>,
    /// CLIENT SETINFO LIB-VER.
    pub(crate) lib_ver: Option<Vec<u8>>,
    /// The protocol HELLO chose: RESP3 when set, else RESP2 (every connection starts in RESP2).
    pub(crate) resp3: bool,
    /// The database SELECT chose (0 at connect).
    pub(crate) db: Db,
    /// CLIENT REPLY OFF: no replies until CLIENT REPLY ON.
    pub(crate) reply_off: bool,
    /// CLIENT REPLY SKIP: no reply to the next command.
    pub(crate) reply_skip_next: bool,
    /// The command runs again because a key it was blocked on was written.
    pub(crate) rerun: bool,
    /// What other connections see of this one.
    pub(crate) handle: Arc<ClientHandle>,
    /// Where other connections leave messages for this one (pub/sub, wake-ups).
    pub(crate) mailbox: Arc<crate::notify::Mailbox>,
    /// The commands queued since MULTI (`None`: not in a transaction).
    pub(crate) multi: Option<multi::Queue>,
    /// The keys WATCH follows, with their versions.
    pub(crate) watched: Vec<crate::notify::Watched>,
    /// SUBSCRIBE's channels.
    pub(crate) channels: std::collections::BTreeSet<Vec<u8>>,
    /// PSUBSCRIBE's patterns.
    pub(crate) patterns: std::collections::BTreeSet<Vec<u8>>,
}

impl Session {
    /// A session for a new connection, registered under `handle`.
    pub(crate) fn new(handle: Arc<ClientHandle>, mailbox: Arc<crate::notify::Mailbox>) -> Self {
        Session {
            id: handle.id,
            name: None,
            lib_name: None,
            lib_ver: None,
            resp3: false,
            db: 0,
            reply_off: false,
            reply_skip_next: false,
            rerun: false,
            handle,
            mailbox,
            multi: None,
            watched: Vec::new(),
            channels: Default::default(),
            patterns: Default::default(),
        }
    }

    /// Channels plus patterns subscribed to.
    pub(crate) fn subscriptions(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    /// Whether the connection is in RESP2's subscribed mode (only the pub/sub commands, PING,
    /// QUIT and RESET run).
    pub(crate) fn resp2_subscribed(&self) -> bool {
        !self.resp3 && self.subscriptions() > 0
    }

    /// Copies the database, subscriptions and MULTI state to the handle (CLIENT LIST).
    fn publish_state(&self) {
        let h = &self.handle;
        h.db.store(usize::from(self.db), Ordering::Relaxed);
        h.channels.store(self.channels.len(), Ordering::Relaxed);
        h.patterns.store(self.patterns.len(), Ordering::Relaxed);
        let queued = self
            .multi
            .as_ref()
            .map_or(-1, |q| i64::try_from(q.len()).unwrap_or(i64::MAX));
        h.multi.store(queued, Ordering::Relaxed);
    }

    /// Copies what CLIENT LIST shows of this session to its handle.
    fn publish(&self) {
        let meta = ClientMeta {
            name: self.name.clone(),
            lib_name: self.lib_name.clone(),
            lib_ver: self.lib_ver.clone(),
            resp3: self.resp3,
        };
        *self
            .handle
            .meta
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = meta;
    }
}

/// An error reply. `Display` is the whole reply line without the leading `-`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum CommandError {
    #[error("ERR syntax error")]
    Syntax,
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    #[error("ERR value is not a valid float")]
    NotFloat,
    #[error("ERR min or max is not a float")]
    MinMaxNotFloat,
    #[error("ERR invalid expire time in '{0}' command")]
    InvalidExpire(&'static str),
    #[error("ERR wrong number of arguments for '{0}' command")]
    Arity(String),
    #[error("ERR unknown subcommand '{sub}'. Try {command} HELP.")]
    UnknownSubcommand { command: &'static str, sub: String },
    #[error("{0}")]
    Backend(#[from] BackendError),
    /// Any other error; the text includes its prefix (`ERR ...`).
    #[error("{0}")]
    Other(String),
}

type CommandResult = Result<Action, CommandError>;

/// The context a handler runs in.
struct Ctx<'a> {
    shared: &'a Shared,
    session: &'a mut Session,
    /// The transaction a handler runs in when it is part of an EXEC (then its reads and writes
    /// join it instead of starting their own, and blocking commands do not block).
    txn: Option<&'a mut dyn Txn>,
}

impl Ctx<'_> {
    fn backend(&self) -> &dyn Backend {
        self.shared.backend.as_ref()
    }

    /// Whether this connection speaks RESP3.
    fn resp3(&self) -> bool {
        self.session.resp3
    }

    /// The database this connection selected.
    fn db(&self) -> Db {
        self.session.db
    }

    /// For a blocking command run again after a write woke it: the keys of `keys` that now
    /// hold a value of `kind`, in order. Redis 7.0 serves a blocked client only from a key
    /// that holds its kind; one that became another kind leaves it blocked (no WRONGTYPE).
    /// `None` on a first run (every key is tried, and another kind is an error).
    fn ready_keys(
        &mut self,
        keys: &[Vec<u8>],
        kind: Kind,
    ) -> Result<Option<Vec<Vec<u8>>>, CommandError> {
        if !self.session.rerun {
            return Ok(None);
        }
        let db = self.db();
        let scope: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        self.read(&scope, |t| {
            Ok(Some(
                keys.iter()
                    .filter(|k| t.kind(db, k) == Some(kind))
                    .cloned()
                    .collect(),
            ))
        })
    }

    /// Whether the handler runs inside EXEC.
    fn in_exec(&self) -> bool {
        self.txn.is_some()
    }

    /// The data-model store behind the server.
    fn keyspace(&self) -> Result<&dyn Keyspace, CommandError> {
        if self.txn.is_some() {
            // The EXEC's transaction holds the whole keyspace; a keyspace-wide read from inside
            // it would wait for itself.
            return Err(CommandError::Other(
                "ERR this command cannot run inside MULTI on this server".into(),
            ));
        }
        self.backend().keyspace().ok_or_else(|| {
            CommandError::Other("ERR this server's store does not serve this command".into())
        })
    }

    /// Run `f` with `keys` (of this connection's database) locked for reading.
    fn read<R>(
        &mut self,
        keys: &[&[u8]],
        f: impl FnOnce(&mut dyn Txn) -> Result<R, CommandError>,
    ) -> Result<R, CommandError> {
        let db = self.db();
        with_keys(db, keys, |scope| self.run(Scope::Keys(scope), false, f))
    }

    /// Run `f` with `keys` (of this connection's database) locked for writing; its effects are
    /// durable, as one unit, when this returns.
    fn write<R>(
        &mut self,
        keys: &[&[u8]],
        f: impl FnOnce(&mut dyn Txn) -> Result<R, CommandError>,
    ) -> Result<R, CommandError> {
        let db = self.db();
        with_keys(db, keys, |scope| self.run(Scope::Keys(scope), true, f))
    }

    /// Run `f` in a transaction over `scope` (or in the EXEC's transaction). Writes made through
    /// the [`Txn`] it gets are reported to the server (WATCH, blocked clients).
    fn run<R>(
        &mut self,
        scope: Scope<'_>,
        write: bool,
        f: impl FnOnce(&mut dyn Txn) -> Result<R, CommandError>,
    ) -> Result<R, CommandError> {
        let shared = self.shared;
        let by = Arc::clone(&self.session.mailbox);
        if let Some(txn) = self.txn.as_mut() {
            let mut rec = Recorder {
                inner: &mut **txn,
                shared,
                by: &by,
            };
            return f(&mut rec);
        }
        let ks = self.keyspace()?;
        let mut f = Some(f);
        let mut result = None;
        ks.transact(scope, write, &mut |txn| {
            if let Some(f) = f.take() {
                let mut rec = Recorder {
                    inner: txn,
                    shared,
                    by: &by,
                };
                result = Some(f(&mut rec));
            }
            Ok(())
        })
        .map_err(CommandError::from)?;
        result.unwrap_or_else(|| {
            Err(CommandError::Other(
                "ERR internal: the store did not run the command".into(),
            ))
        })
    }
}

/// Most keys [`with_keys`] lists on the stack (GET, SET and most commands name one or two).
const STACK_KEYS: usize = 4;

/// Calls `f` with `keys` paired with `db`: on the stack for up to [`STACK_KEYS`] keys (no
/// allocation per request), in a vector for more.
fn with_keys<R>(db: Db, keys: &[&[u8]], f: impl FnOnce(&[(Db, &[u8])]) -> R) -> R {
    if keys.len() <= STACK_KEYS {
        let mut scope: [(Db, &[u8]); STACK_KEYS] = [(db, &[]); STACK_KEYS];
        for (slot, key) in scope.iter_mut().zip(keys) {
            *slot = (db, key);
        }
        f(&scope[..keys.len()])
    } else {
        let scope: Vec<(Db, &[u8])> = keys.iter().map(|k| (db, *k)).collect();
        f(&scope)
    }
}

/// A [`Txn`] that tells the server which keys its effects wrote, once they are applied.
struct Recorder<'t> {
    inner: &'t mut dyn Txn,
    shared: &'t Shared,
    /// The connection writing (it waits for the blocked clients its writes wake).
    by: &'t Arc<crate::notify::Mailbox>,
}

model::forward_view!(Recorder<'_>, inner);

impl Txn for Recorder<'_> {
    fn apply(&mut self, effects: Vec<Effect>) -> ModelResult<()> {
        let notifier = &self.shared.notifier;
        // No WATCH and no blocked client anywhere: nothing to tell. Both register with the
        // keys they name locked (WATCH) or look again after registering (a blocked client), and
        // this transaction holds its keys' locks, so none can slip in between.
        if !notifier.has_interest() {
            return self.inner.apply(effects);
        }
        let mut touched = crate::notify::Touch::of(&effects);
        // Database-wide effects touch the watched and awaited keys that hold a value before
        // (FLUSHDB, SWAPDB) or after (SWAPDB) them.
        notifier.expand(&mut touched, &*self.inner);
        self.inner.apply(effects)?;
        notifier.expand(&mut touched, &*self.inner);
        notifier.touched(&touched, Some(self.by));
        Ok(())
    }
}

impl From<ModelError> for CommandError {
    fn from(e: ModelError) -> Self {
        CommandError::Other(e.to_string())
    }
}

type Handler = fn(&mut Ctx<'_>, &[Vec<u8>], &mut Vec<u8>) -> CommandResult;

/// One command: its name (lower case), Redis arity (N: exactly N arguments including the name;
/// -N: at least N), COMMAND flags, key positions, and handler.
struct Spec {
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    first_key: i64,
    last_key: i64,
    step: i64,
    handler: Handler,
}

const WRITE: &[&str] = &["write", "denyoom", "fast"];
const WRITE_SLOW: &[&str] = &["write", "denyoom"];
const WRITE_NO_OOM: &[&str] = &["write", "fast"];
const READ_FAST: &[&str] = &["readonly", "fast"];
const READ: &[&str] = &["readonly"];
const CONNECTION: &[&str] = &["noscript", "loading", "stale", "fast", "no_auth"];
const ADMIN: &[&str] = &["admin", "noscript", "loading", "stale"];

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $first:expr, $last:expr, $step:expr, $handler:expr) => {
        Spec {
            name: $name,
            arity: $arity,
            flags: $flags,
            first_key: $first,
            last_key: $last,
            step: $step,
            handler: $handler,
        }
    };
}

// The families (after the `spec!` macro, which they use).
mod hashes;
mod keys;
mod lists;
mod multi;
mod pubsub;
mod sets;
mod strings;
#[cfg(feature = "test-commands")]
mod testing;
mod zsets;

pub(crate) use pubsub::write_message;

/// The commands defined in this file, sorted by name (checked by a test). The families in the
/// submodules add theirs; [`table`] merges them.
static CORE: &[Spec] = &[
    spec!("auth", -2, CONNECTION, 0, 0, 0, cmd_auth),
    spec!("bgsave", -1, &["admin", "noscript"], 0, 0, 0, cmd_bgsave),
    spec!(
        "client",
        -2,
        &["noscript", "loading", "stale"],
        0,
        0,
        0,
        cmd_client
    ),
    spec!("command", -1, &["loading", "stale"], 0, 0, 0, cmd_command),
    spec!("config", -2, ADMIN, 0, 0, 0, cmd_config),
    spec!("echo", 2, &["fast"], 0, 0, 0, cmd_echo),
    spec!("hello", -1, CONNECTION, 0, 0, 0, cmd_hello),
    spec!("function", -2, &["noscript"], 0, 0, 0, cmd_function),
    spec!("info", -1, &["loading", "stale"], 0, 0, 0, cmd_info),
    spec!("kavach", -2, ADMIN, 0, 0, 0, cmd_kavach),
    spec!(
        "lastsave",
        1,
        &["loading", "stale", "fast"],
        0,
        0,
        0,
        cmd_lastsave
    ),
    spec!("ping", -1, &["fast"], 0, 0, 0, cmd_ping),
    spec!("promote", -1, ADMIN, 0, 0, 0, cmd_promote),
    spec!("quit", -1, CONNECTION, 0, 0, 0, cmd_quit),
    spec!("reset", 1, CONNECTION, 0, 0, 0, cmd_reset),
    spec!("save", 1, &["admin", "noscript"], 0, 0, 0, cmd_save),
    spec!(
        "select",
        2,
        &["loading", "stale", "fast"],
        0,
        0,
        0,
        cmd_select
    ),
    spec!("shutdown", -1, ADMIN, 0, 0, 0, cmd_shutdown),
    spec!("time", 1, &["loading", "stale", "fast"], 0, 0, 0, cmd_time),
    spec!("wait", 3, &["noscript"], 0, 0, 0, cmd_wait),
];

/// Compares `a` lower-cased with `b` (already lower case).
fn cmp_lowercase(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let a = a.iter().map(u8::to_ascii_lowercase);
    a.cmp(b.iter().copied())
}

/// Every command of every family, sorted by name for binary search (a test checks that no
/// name is defined twice).
fn table() -> &'static [&'static Spec] {
    static TABLE: std::sync::OnceLock<Vec<&'static Spec>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let families: &[&'static [Spec]] = &[
            CORE,
            keys::SPECS,
            strings::SPECS,
            hashes::SPECS,
            lists::SPECS,
            sets::SPECS,
            zsets::SPECS,
            multi::SPECS,
            pubsub::SPECS,
            #[cfg(feature = "test-commands")]
            testing::SPECS,
        ];
        let mut all: Vec<&'static Spec> = families.iter().flat_map(|f| f.iter()).collect();
        all.sort_by(|a, b| a.name.cmp(b.name));
        all
    })
}

/// Longest command name the hashed index takes (the longest defined is shorter; a test checks).
const NAME_MAX: usize = 32;

/// An empty slot of [`name_slots`].
const NO_COMMAND: u16 = u16::MAX;

/// FNV-1a of a lower-case name.
fn name_hash(lower: &[u8]) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in lower {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h as usize
}

/// Open-addressed index from a command's lower-case name to its place in [`table`], at most a
/// quarter full. Every request looks its command up here: the binary search with a
/// case-folding compare it replaced took about 2% of the worker's CPU in YCSB.
fn name_slots() -> &'static [u16] {
    static SLOTS: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    SLOTS.get_or_init(|| {
        let all = table();
        let mut slots = vec![NO_COMMAND; (all.len() * 4).next_power_of_two()];
        let mask = slots.len() - 1;
        for (i, spec) in all.iter().enumerate() {
            let mut at = name_hash(spec.name.as_bytes()) & mask;
            while slots[at] != NO_COMMAND {
                at = (at + 1) & mask;
            }
            slots[at] = i as u16;
        }
        slots
    })
}

fn lookup_index(name: &[u8]) -> Option<usize> {
    if name.len() > NAME_MAX {
        return None;
    }
    let mut buf = [0u8; NAME_MAX];
    let lower = &mut buf[..name.len()];
    for (d, s) in lower.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    let (slots, all) = (name_slots(), table());
    let mask = slots.len() - 1;
    let mut at = name_hash(lower) & mask;
    loop {
        let slot = slots[at];
        if slot == NO_COMMAND {
            return None;
        }
        if all[usize::from(slot)].name.as_bytes() == &*lower {
            return Some(usize::from(slot));
        }
        at = (at + 1) & mask;
    }
}

fn lookup(name: &[u8]) -> Option<&'static Spec> {
    lookup_index(name).map(|i| table()[i])
}

fn arity_ok(arity: i64, argc: usize) -> bool {
    let argc = argc as i64;
    if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    }
}

fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// A client-supplied word for an error message: at most 128 bytes, lossy UTF-8.
fn quote(word: &[u8]) -> String {
    String::from_utf8_lossy(&word[..word.len().min(ERROR_QUOTE_BYTES_MAX)]).into_owned()
}

/// Executes one request and appends its reply to `out`, unless CLIENT REPLY turned replies off
/// or asked to skip this one. Pub/sub confirmations in RESP3 are push frames, which Redis sends
/// whatever CLIENT REPLY says.
pub(crate) fn execute(
    shared: &Shared,
    session: &mut Session,
    args: &[Vec<u8>],
    out: &mut Vec<u8>,
) -> Action {
    let mark = out.len();
    let was_off = session.reply_off;
    let skip = std::mem::take(&mut session.reply_skip_next);
    let action = execute_one(shared, session, args, out);
    // Asked only when a reply is to be dropped (most commands never get here).
    let push = || {
        session.resp3
            && args.first().is_some_and(|n| {
                ["subscribe", "unsubscribe", "psubscribe", "punsubscribe"]
                    .iter()
                    .any(|c| is(n, c))
            })
    };
    if (skip || (was_off && session.reply_off)) && !push() {
        out.truncate(mark);
    }
    action
}

/// Executes one request and appends its reply to `out`. `args` is not empty.
///
/// Inside MULTI, a request that fails before it runs (unknown command, wrong arity, refused in
/// this context) makes the EXEC fail with EXECABORT; every other command but EXEC, DISCARD,
/// MULTI, WATCH, QUIT and RESET is queued and answered `+QUEUED`.
fn execute_one(
    shared: &Shared,
    session: &mut Session,
    args: &[Vec<u8>],
    out: &mut Vec<u8>,
) -> Action {
    let Some(name) = args.first() else {
        return Action::Continue;
    };
    let Some(index) = lookup_index(name) else {
        multi::flag_error(session);
        match unsupported(name) {
            Some(known) => write_error(
                out,
                format!("ERR {known} is not supported by Kavach (see docs/server.md)").as_bytes(),
            ),
            None => write_error(out, &unknown_command_message(args)),
        }
        return Action::Continue;
    };
    let spec = table()[index];
    if !arity_ok(spec.arity, args.len()) {
        multi::flag_error(session);
        write_error(
            out,
            CommandError::Arity(spec.name.to_string())
                .to_string()
                .as_bytes(),
        );
        return Action::Continue;
    }
    if session.resp2_subscribed() && !pubsub::allowed_when_subscribed(spec.name) {
        multi::flag_error(session);
        let sub = subcommand_index(spec.name, args);
        let full = if sub > 0 {
            SUBCOMMANDS[sub - 1]
        } else {
            spec.name
        };
        write_error(
            out,
            format!(
                "ERR Can't execute '{full}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / \
                 QUIT / RESET are allowed in this context"
            )
            .as_bytes(),
        );
        return Action::Continue;
    }
    note_command(session, index, spec, args);
    if session.multi.is_some() && !multi::runs_inside_multi(spec.name) {
        if multi::refused_inside_multi(spec.name) {
            multi::flag_error(session);
            write_error(out, b"ERR Command not allowed inside a transaction");
            return Action::Continue;
        }
        multi::queue(session, args, out);
        session.publish_state();
        return Action::Continue;
    }
    let mark = out.len();
    let mut ctx = Ctx {
        shared,
        session,
        txn: None,
    };
    let result = (spec.handler)(&mut ctx, args, out);
    if matches!(spec.name, "hello" | "client" | "reset") {
        session.publish();
    }
    session.publish_state();
    match result {
        Ok(action) => action,
        Err(e) => {
            out.truncate(mark);
            write_error(out, e.to_string().as_bytes());
            Action::Continue
        }
    }
}

/// Records the command a connection runs, for CLIENT LIST.
fn note_command(session: &Session, index: usize, spec: &Spec, args: &[Vec<u8>]) {
    let handle = &session.handle;
    handle.last_command.store(index + 1, Ordering::Relaxed);
    handle
        .last_subcommand
        .store(subcommand_index(spec.name, args), Ordering::Relaxed);
    let active = u64::try_from(handle.created.elapsed().as_millis()).unwrap_or(u64::MAX);
    handle.last_active_ms.store(active, Ordering::Relaxed);
}

/// What a connection's owner does when it closes: ends its WATCH, subscriptions and blocked
/// command.
pub(crate) fn disconnect(shared: &Shared, session: &mut Session) {
    let notifier = &shared.notifier;
    notifier.unwatch(&std::mem::take(&mut session.watched));
    for channel in std::mem::take(&mut session.channels) {
        notifier.unsubscribe(session.id, &channel);
    }
    for pattern in std::mem::take(&mut session.patterns) {
        notifier.punsubscribe(session.id, &pattern);
    }
    notifier.unblock(session.id, None);
}

/// Redis 7 commands Kavach does not serve (scripting, functions, modules, cluster, streams,
/// geo, HyperLogLog, ACL, replication of Redis itself, debugging and introspection of Redis
/// internals), sorted: they answer `ERR <NAME> is not supported by Kavach` instead of "unknown
/// command". A family that implements one of them simply wins the lookup.
static UNSUPPORTED: &[&str] = &[
    "acl",
    "asking",
    "bgrewriteaof",
    "bitfield",
    "bitfield_ro",
    "cluster",
    "debug",
    "dump",
    "eval",
    "eval_ro",
    "evalsha",
    "evalsha_ro",
    "failover",
    "fcall",
    "fcall_ro",
    "geoadd",
    "geodist",
    "geohash",
    "geopos",
    "georadius",
    "georadius_ro",
    "georadiusbymember",
    "georadiusbymember_ro",
    "geosearch",
    "geosearchstore",
    "latency",
    "lolwut",
    "migrate",
    "module",
    "monitor",
    "pfadd",
    "pfcount",
    "pfdebug",
    "pfmerge",
    "pfselftest",
    "psync",
    "readonly",
    "readwrite",
    "replconf",
    "replicaof",
    "restore",
    "restore-asking",
    "role",
    "script",
    "slaveof",
    "slowlog",
    "sort",
    "sort_ro",
    "spublish",
    "ssubscribe",
    "sunsubscribe",
    "sync",
    "xack",
    "xadd",
    "xautoclaim",
    "xclaim",
    "xdel",
    "xgroup",
    "xinfo",
    "xlen",
    "xpending",
    "xrange",
    "xread",
    "xreadgroup",
    "xrevrange",
    "xsetid",
    "xtrim",
];

/// The upper-case name of a Redis command Kavach does not serve, if `name` is one.
fn unsupported(name: &[u8]) -> Option<String> {
    UNSUPPORTED
        .binary_search_by(|known| cmp_lowercase(name, known.as_bytes()).reverse())
        .ok()
        .map(|i| UNSUPPORTED[i].to_ascii_uppercase())
}

/// `ERR unknown command 'foo', with args beginning with: 'a' 'b' `, built like Redis 7 does.
fn unknown_command_message(args: &[Vec<u8>]) -> Vec<u8> {
    let mut listed = Vec::new();
    for arg in &args[1..] {
        if listed.len() >= ERROR_QUOTE_BYTES_MAX {
            break;
        }
        let room = ERROR_QUOTE_BYTES_MAX - listed.len();
        listed.push(b'\'');
        listed.extend_from_slice(&arg[..arg.len().min(room)]);
        listed.extend_from_slice(b"' ");
    }
    let name = &args[0];
    let mut msg = b"ERR unknown command '".to_vec();
    msg.extend_from_slice(&name[..name.len().min(ERROR_QUOTE_BYTES_MAX)]);
    msg.extend_from_slice(b"', with args beginning with: ");
    msg.extend_from_slice(&listed);
    msg
}

fn ok(out: &mut Vec<u8>) -> CommandResult {
    out.extend_from_slice(b"+OK\r\n");
    Ok(Action::Continue)
}

fn parse_int(arg: &[u8]) -> Result<i64, CommandError> {
    parse_strict_i64(arg).ok_or(CommandError::NotInteger)
}

/// Parses a float the way Redis's `getDoubleFromObject` (strtod) does: no leading space, no
/// trailing bytes, `inf`/`+inf`/`-inf`/`infinity` in any case, no NaN, no overflow to infinity
/// and no underflow to zero. Hexadecimal floats (`0x1p3`) are not accepted. `-0` becomes `0`, so
/// the backend never has to order two zeros.
pub(crate) fn parse_float(arg: &[u8]) -> Option<f64> {
    parse_float_with(arg, true)
}

/// The float grammar shared by scores (`strict`: Redis's `getDoubleFromObject`) and range bounds
/// (not strict: Redis's `zslParseRange`, plain strtod, which skips leading spaces and lets
/// overflow and underflow round to infinity and zero).
fn parse_float_with(arg: &[u8], strict: bool) -> Option<f64> {
    let text = std::str::from_utf8(arg).ok()?;
    let text = if strict {
        text
    } else {
        text.trim_start_matches(|c: char| c.is_ascii_whitespace() || c == '\x0b')
    };
    let first = *text.as_bytes().first()?;
    if first.is_ascii_whitespace() || text.len() > 5 * 1024 {
        return None;
    }
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    if unsigned.eq_ignore_ascii_case("inf") || unsigned.eq_ignore_ascii_case("infinity") {
        return Some(if first == b'-' {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if let Some(hex) = unsigned
        .strip_prefix("0x")
        .or_else(|| unsigned.strip_prefix("0X"))
    {
        let (magnitude, nonzero) = parse_hex_float(hex)?;
        if strict && (magnitude.is_infinite() || (magnitude == 0.0 && nonzero)) {
            return None;
        }
        let value = if first == b'-' { -magnitude } else { magnitude };
        return Some(value + 0.0);
    }
    if !unsigned
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    if value.is_nan() {
        return None;
    }
    if strict {
        if value.is_infinite() {
            return None;
        }
        if value == 0.0 {
            let mantissa = unsigned.split(['e', 'E']).next().unwrap_or("");
            if mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b)) {
                return None;
            }
        }
    }
    // Adding +0.0 turns -0.0 into +0.0 and changes nothing else.
    Some(value + 0.0)
}

/// The digits of a C99 hexadecimal float after its `0x` (`1.8p3` is 12), as strtod reads them:
/// the value (infinite on overflow, 0 on underflow) and whether any digit was non-zero.
/// Digits past what an f64 can hold only decide the rounding.
fn parse_hex_float(text: &str) -> Option<(f64, bool)> {
    let (digits, exponent) = match text.split_once(['p', 'P']) {
        Some((digits, exponent)) => (digits, Some(exponent)),
        None => (text, None),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    if (whole.is_empty() && fraction.is_empty()) || !hex(whole) || !hex(fraction) {
        return None;
    }
    // Binary exponent, clamped far past where any f64 overflows or underflows.
    let mut power: i64 = match exponent {
        None => 0,
        Some(e) => {
            let (negative, digits) = match e.as_bytes().first() {
                Some(b'-') => (true, &e[1..]),
                Some(b'+') => (false, &e[1..]),
                _ => (false, e),
            };
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let magnitude = digits
                .bytes()
                .fold(0i64, |n, d| (n * 10 + i64::from(d - b'0')).min(100_000));
            if negative { -magnitude } else { magnitude }
        }
    };
    let mut mantissa: u64 = 0;
    let mut nonzero = false;
    let mut sticky = false;
    for (i, d) in whole.bytes().chain(fraction.bytes()).enumerate() {
        let v = u64::from(char::from(d).to_digit(16).unwrap_or(0));
        nonzero |= v != 0;
        let in_fraction = i >= whole.len();
        if mantissa >> 60 == 0 {
            mantissa = mantissa << 4 | v;
            if in_fraction {
                power -= 4;
            }
        } else {
            // No room: the digit only matters for rounding (a sticky low bit).
            sticky |= v != 0;
            if !in_fraction {
                power += 4;
            }
        }
    }
    if sticky {
        mantissa |= 1;
    }
    // Scale in steps so that an intermediate power of two never overflows or vanishes first.
    let mut value = mantissa as f64;
    let mut power = power.clamp(-200_000, 200_000);
    while power > 1000 {
        value *= 2f64.powi(1000);
        power -= 1000;
    }
    while power < -1000 {
        value *= 2f64.powi(-1000);
        power += 1000;
    }
    Some((value * 2f64.powi(power as i32), nonzero))
}

// ---------------------------------------------------------------------------------------------
// Connection commands
// ---------------------------------------------------------------------------------------------

fn cmd_ping(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    if ctx.session.resp2_subscribed() && args.len() <= 2 {
        // RESP2's subscribed mode answers in the shape of a message: ["pong", argument or ""].
        write_array_header(out, 2);
        write_bulk(out, b"pong");
        write_bulk(out, args.get(1).map_or(&b""[..], Vec::as_slice));
        return Ok(Action::Continue);
    }
    match args.len() {
        1 => write_simple(out, b"PONG"),
        2 => write_bulk(out, &args[1]),
        _ => return Err(CommandError::Arity("ping".into())),
    }
    Ok(Action::Continue)
}

fn cmd_echo(_: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    write_bulk(out, &args[1]);
    Ok(Action::Continue)
}

fn cmd_select(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = parse_int(&args[1])?;
    // A backend without the data model has one database only.
    let count = if ctx.backend().keyspace().is_some() {
        model::DATABASES as i64
    } else {
        1
    };
    if !(0..count).contains(&n) {
        return Err(CommandError::Other("ERR DB index is out of range".into()));
    }
    ctx.session.db = n as Db;
    ok(out)
}

fn cmd_quit(_: &mut Ctx<'_>, _: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    write_simple(out, b"OK");
    Ok(Action::CloseAfterReply)
}

const NO_PASSWORD: &str = "ERR AUTH <password> called without any password configured for the \
                           default user. Are you sure your configuration is correct?";
const WRONG_PASSWORD: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// The server has no users or passwords: like Redis with no `requirepass`, the `default` user
/// takes any password.
fn cmd_auth(_: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    match args.len() {
        2 => Err(CommandError::Other(NO_PASSWORD.into())),
        3 if is(&args[1], "default") => ok(out),
        3 => Err(CommandError::Other(WRONG_PASSWORD.into())),
        _ => Err(CommandError::Syntax),
    }
}

/// Client names (and SETINFO values) may only hold printable ASCII without spaces, as in Redis.
fn valid_client_word(word: &[u8]) -> bool {
    word.iter().all(|b| (b'!'..=b'~').contains(b))
}

/// HELLO [protover [AUTH username password] [SETNAME clientname]], as Redis 7 answers it: all
/// arguments are checked before anything changes; the reply (a map in RESP3, a flat array in
/// RESP2) is in the protocol chosen, or the current one when no version is given.
fn cmd_hello(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let mut name = None;
    let mut resp3 = ctx.resp3();
    if args.len() >= 2 {
        let version = parse_strict_i64(&args[1]).ok_or_else(|| {
            CommandError::Other("ERR Protocol version is not an integer or out of range".into())
        })?;
        resp3 = match version {
            2 => false,
            3 => true,
            _ => {
                return Err(CommandError::Other(
                    "NOPROTO unsupported protocol version".into(),
                ));
            }
        };
        let mut i = 2;
        while i < args.len() {
            let more = args.len() - i - 1;
            if is(&args[i], "auth") && more >= 2 {
                if !is(&args[i + 1], "default") {
                    return Err(CommandError::Other(WRONG_PASSWORD.into()));
                }
                i += 3;
            } else if is(&args[i], "setname") && more >= 1 {
                if !valid_client_word(&args[i + 1]) {
                    return Err(CommandError::Other(CLIENT_NAME_ERROR.into()));
                }
                name = Some(args[i + 1].clone());
                i += 2;
            } else {
                return Err(CommandError::Other(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    quote(&args[i])
                )));
            }
        }
    }
    if let Some(name) = name {
        ctx.session.name = if name.is_empty() { None } else { Some(name) };
    }
    ctx.session.resp3 = resp3;
    let id = i64::try_from(ctx.session.id).unwrap_or(i64::MAX);
    let field = |k: &str, v: Reply| (Reply::bulk(k), v);
    Reply::Map(vec![
        field("server", Reply::bulk("redis")),
        field("version", Reply::bulk(REDIS_VERSION)),
        field("proto", Reply::Integer(if resp3 { 3 } else { 2 })),
        field("id", Reply::Integer(id)),
        field("mode", Reply::bulk("standalone")),
        field("role", Reply::bulk(role(ctx.shared))),
        field("modules", Reply::Array(vec![])),
    ])
    .encode_as(out, resp3);
    Ok(Action::Continue)
}

/// HELLO's role: INFO's replication role (`master` unless the store says otherwise), with
/// INFO's `slave` named `replica` as Redis 7's HELLO names it.
fn role(shared: &Shared) -> String {
    // Without the keyspace: HELLO runs on every connect and must not walk the data.
    let info_role = info_sections(shared, None, false)
        .into_iter()
        .find(|(title, _)| title == "Replication")
        .and_then(|(_, lines)| lines.into_iter().find(|(k, _)| k == "role"))
        .map(|(_, v)| v);
    hello_role(info_role.as_deref()).to_string()
}

fn hello_role(info_role: Option<&str>) -> &str {
    match info_role {
        None => "master",
        Some("slave") => "replica",
        Some(other) => other,
    }
}

const CLIENT_NAME_ERROR: &str =
    "ERR Client names cannot contain spaces, newlines or special characters.";

/// Checks a subcommand's arity the Redis way (`'client|setname'` in the message).
fn sub_arity(command: &str, sub: &str, arity: i64, argc: usize) -> Result<(), CommandError> {
    if arity_ok(arity, argc) {
        Ok(())
    } else {
        Err(CommandError::Arity(format!("{command}|{sub}")))
    }
}

fn cmd_client(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let sub = &args[1];
    if is(sub, "id") {
        sub_arity("client", "id", 2, args.len())?;
        write_integer(out, i64::try_from(ctx.session.id).unwrap_or(i64::MAX));
    } else if is(sub, "getname") {
        sub_arity("client", "getname", 2, args.len())?;
        write_optional(out, ctx.session.name.as_deref(), ctx.resp3());
    } else if is(sub, "setname") {
        sub_arity("client", "setname", 3, args.len())?;
        if !valid_client_word(&args[2]) {
            return Err(CommandError::Other(CLIENT_NAME_ERROR.into()));
        }
        ctx.session.name = if args[2].is_empty() {
            None
        } else {
            Some(args[2].clone())
        };
        write_simple(out, b"OK");
    } else if is(sub, "setinfo") {
        sub_arity("client", "setinfo", 4, args.len())?;
        let attribute = if is(&args[2], "lib-name") {
            "lib-name"
        } else if is(&args[2], "lib-ver") {
            "lib-ver"
        } else {
            return Err(CommandError::Other(format!(
                "ERR Unrecognized option '{}'",
                quote(&args[2])
            )));
        };
        if !valid_client_word(&args[3]) {
            return Err(CommandError::Other(format!(
                "ERR {attribute} cannot contain spaces, newlines or special characters."
            )));
        }
        let value = if args[3].is_empty() {
            None
        } else {
            Some(args[3].clone())
        };
        if attribute == "lib-name" {
            ctx.session.lib_name = value;
        } else {
            ctx.session.lib_ver = value;
        }
        write_simple(out, b"OK");
    } else if is(sub, "reply") {
        sub_arity("client", "reply", 3, args.len())?;
        if is(&args[2], "on") {
            ctx.session.reply_off = false;
            write_simple(out, b"OK");
        } else if is(&args[2], "off") {
            ctx.session.reply_off = true;
        } else if is(&args[2], "skip") {
            ctx.session.reply_skip_next = true;
        } else {
            return Err(CommandError::Syntax);
        }
    } else if is(sub, "no-evict") || is(sub, "no-touch") {
        // Nothing is evicted and no access times are kept, so both switches are accepted and
        // change nothing.
        let name = if is(sub, "no-evict") {
            "no-evict"
        } else {
            "no-touch"
        };
        sub_arity("client", name, 3, args.len())?;
        if !is(&args[2], "on") && !is(&args[2], "off") {
            return Err(CommandError::Syntax);
        }
        write_simple(out, b"OK");
    } else if is(sub, "info") {
        sub_arity("client", "info", 2, args.len())?;
        let mut line = client_line(&ctx.session.handle);
        line.push(b'\n');
        write_verbatim(out, *b"txt", &line, ctx.resp3());
    } else if is(sub, "list") {
        let clients = clients_listed(ctx.shared, &args[2..])?;
        let mut text = Vec::new();
        for client in clients {
            text.extend_from_slice(&client_line(&client));
            text.push(b'\n');
        }
        write_verbatim(out, *b"txt", &text, ctx.resp3());
    } else if is(sub, "kill") {
        return client_kill(ctx, &args[2..], out);
    } else if is(sub, "unblock") {
        if !(3..=4).contains(&args.len()) {
            return Err(CommandError::Arity("client|unblock".into()));
        }
        let id = parse_strict_i64(&args[2])
            .and_then(|n| u64::try_from(n).ok())
            .ok_or(CommandError::NotInteger)?;
        let how = match args.get(3) {
            None => crate::notify::Unblock::Timeout,
            Some(w) if is(w, "timeout") => crate::notify::Unblock::Timeout,
            Some(w) if is(w, "error") => crate::notify::Unblock::Error,
            Some(_) => {
                return Err(CommandError::Other(
                    "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR".into(),
                ));
            }
        };
        let done = ctx.shared.notifier.request_unblock(id, how);
        write_integer(out, i64::from(done));
    } else {
        return Err(CommandError::UnknownSubcommand {
            command: "CLIENT",
            sub: quote(sub),
        });
    }
    Ok(Action::Continue)
}

/// The subcommands CLIENT LIST's `cmd=` names (`client|list`), as Redis does.
static SUBCOMMANDS: &[&str] = &[
    "client|getname",
    "client|id",
    "client|info",
    "client|kill",
    "client|list",
    "client|no-evict",
    "client|no-touch",
    "client|reply",
    "client|setinfo",
    "client|setname",
    "client|unblock",
    "command|count",
    "command|docs",
    "command|getkeys",
    "command|info",
    "command|list",
    "config|get",
    "config|resetstat",
    "config|rewrite",
    "config|set",
];

/// `cmd|sub`'s index in [`SUBCOMMANDS`] plus one, or 0 when the command has no such subcommand.
fn subcommand_index(command: &str, args: &[Vec<u8>]) -> usize {
    if !matches!(command, "client" | "command" | "config") {
        return 0;
    }
    let Some(sub) = args.get(1) else {
        return 0;
    };
    SUBCOMMANDS
        .iter()
        .position(|full| {
            full.strip_prefix(command)
                .and_then(|rest| rest.strip_prefix('|'))
                .is_some_and(|name| is(sub, name))
        })
        .map_or(0, |i| i + 1)
}

/// A connection's line in CLIENT LIST and CLIENT INFO, in Redis's format and field order (the
/// buffer and memory fields Kavach does not track are 0), without the final newline.
fn client_line(client: &ClientHandle) -> Vec<u8> {
    let meta = client
        .meta
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let mut line = Vec::new();
    let addr = client.peer.map(|a| a.to_string()).unwrap_or_default();
    let laddr = client.local.map(|a| a.to_string()).unwrap_or_default();
    let _ = write!(
        line,
        "id={} addr={addr} laddr={laddr} fd={} name=",
        client.id, client.fd
    );
    line.extend_from_slice(meta.name.as_deref().unwrap_or_default());
    let age_ms = u64::try_from(client.created.elapsed().as_millis()).unwrap_or(u64::MAX);
    let idle_ms = age_ms.saturating_sub(client.last_active_ms.load(Ordering::Relaxed));
    let command = match (
        client.last_command.load(Ordering::Relaxed),
        client.last_subcommand.load(Ordering::Relaxed),
    ) {
        (_, sub) if sub > 0 => SUBCOMMANDS.get(sub - 1).copied().unwrap_or("NULL"),
        (0, _) => "NULL",
        (n, _) => table().get(n - 1).map_or("NULL", |s| s.name),
    };
    let channels = client.channels.load(Ordering::Relaxed);
    let patterns = client.patterns.load(Ordering::Relaxed);
    let multi = client.multi.load(Ordering::Relaxed);
    let mut flags = String::new();
    if channels + patterns > 0 {
        flags.push('P');
    }
    if multi >= 0 {
        flags.push('x');
    }
    if client.blocked.load(Ordering::Relaxed) {
        flags.push('b');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let _ = write!(
        line,
        " age={} idle={} flags={flags} db={} sub={channels} psub={patterns} ssub=0 multi={multi} \
         qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 \
         events=r cmd={command} user=default redir=-1 resp={} lib-name=",
        age_ms / 1000,
        idle_ms / 1000,
        client.db.load(Ordering::Relaxed),
        if meta.resp3 { 3 } else { 2 }
    );
    line.extend_from_slice(meta.lib_name.as_deref().unwrap_or_default());
    line.extend_from_slice(b" lib-ver=");
    line.extend_from_slice(meta.lib_ver.as_deref().unwrap_or_default());
    line
}

/// CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id ...]: the connections listed.
fn clients_listed(
    shared: &Shared,
    filters: &[Vec<u8>],
) -> Result<Vec<Arc<ClientHandle>>, CommandError> {
    let mut clients = shared.clients.live();
    match filters {
        [] => {}
        [word, kind] if is(word, "type") => {
            if is(kind, "normal") {
            } else if is(kind, "master")
                || is(kind, "replica")
                || is(kind, "slave")
                || is(kind, "pubsub")
            {
                clients.clear();
            } else {
                return Err(CommandError::Other(format!(
                    "ERR Unknown client type '{}'",
                    quote(kind)
                )));
            }
        }
        [word, ids @ ..] if is(word, "id") && !ids.is_empty() => {
            let mut wanted = Vec::with_capacity(ids.len());
            for id in ids {
                let id = parse_strict_i64(id)
                    .and_then(|n| u64::try_from(n).ok())
                    .filter(|&n| n > 0)
                    .ok_or_else(|| CommandError::Other("ERR Invalid client ID".into()))?;
                wanted.push(id);
            }
            clients.retain(|c| wanted.contains(&c.id));
        }
        _ => return Err(CommandError::Syntax),
    }
    Ok(clients)
}

/// CLIENT KILL ip:port (the old form: `+OK`, or an error if no such client), or CLIENT KILL
/// with filters `ID id`, `ADDR ip:port`, `LADDR ip:port`, `USER name`, `SKIPME yes|no` (the new
/// form: the number of connections closed; SKIPME defaults to yes). A connection that kills
/// itself is closed after the reply.
fn client_kill(ctx: &mut Ctx<'_>, filters: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let own = ctx.session.id;
    let addr_of = |a: Option<SocketAddr>| a.map(|a| a.to_string()).unwrap_or_default();
    let old_form = filters.len() == 1;
    let mut id = None;
    let mut addr = None;
    let mut laddr = None;
    let mut user = None;
    let mut skip_me = !old_form;
    if old_form {
        addr = Some(filters[0].clone());
    } else {
        if filters.is_empty() || filters.len() % 2 != 0 {
            return Err(CommandError::Syntax);
        }
        for pair in filters.chunks_exact(2) {
            let (name, value) = (&pair[0], &pair[1]);
            if is(name, "id") {
                let n = parse_strict_i64(value)
                    .and_then(|n| u64::try_from(n).ok())
                    .filter(|&n| n > 0)
                    .ok_or_else(|| {
                        CommandError::Other("ERR client-id should be greater than 0".into())
                    })?;
                id = Some(n);
            } else if is(name, "addr") {
                addr = Some(value.clone());
            } else if is(name, "laddr") {
                laddr = Some(value.clone());
            } else if is(name, "user") {
                user = Some(value.clone());
            } else if is(name, "skipme") {
                skip_me = if is(value, "yes") {
                    true
                } else if is(value, "no") {
                    false
                } else {
                    return Err(CommandError::Syntax);
                };
            } else {
                return Err(CommandError::Syntax);
            }
        }
    }
    if let Some(name) = &user {
        if name.as_slice() != b"default" {
            return Err(CommandError::Other(format!(
                "ERR No such user '{}'",
                quote(name)
            )));
        }
    }
    let mut killed = 0i64;
    let mut killed_self = false;
    for client in ctx.shared.clients.live() {
        let matches = id.is_none_or(|n| n == client.id)
            && addr
                .as_ref()
                .is_none_or(|a| a.as_slice() == addr_of(client.peer).as_bytes())
            && laddr
                .as_ref()
                .is_none_or(|a| a.as_slice() == addr_of(client.local).as_bytes());
        if !matches || (skip_me && client.id == own) {
            continue;
        }
        // This connection closes itself after the reply; the others are closed by their worker.
        if client.id == own {
            killed_self = true;
        } else {
            client.killed.store(true, Ordering::Relaxed);
        }
        killed += 1;
    }
    if killed > 0 {
        ctx.shared.handle.wake_all();
    }
    if old_form {
        if killed == 0 {
            return Err(CommandError::Other("ERR No such client".into()));
        }
        write_simple(out, b"OK");
    } else {
        write_integer(out, killed);
    }
    Ok(if killed_self {
        Action::CloseAfterReply
    } else {
        Action::Continue
    })
}

// ---------------------------------------------------------------------------------------------
// Introspection: COMMAND, CONFIG, INFO
// ---------------------------------------------------------------------------------------------

/// A COMMAND entry in Redis 7's format: name, arity, flags, first key, last key, step, ACL
/// categories, tips, key specs, subcommands (the last four empty).
fn command_entry(spec: &Spec) -> Reply {
    Reply::Array(vec![
        Reply::bulk(spec.name),
        Reply::Integer(spec.arity),
        Reply::Array(spec.flags.iter().map(|f| Reply::simple(f)).collect()),
        Reply::Integer(spec.first_key),
        Reply::Integer(spec.last_key),
        Reply::Integer(spec.step),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
    ])
}

/// The group COMMAND DOCS names for a command, from the family that defines it.
fn command_group(spec: &Spec) -> &'static str {
    let in_family = |family: &[Spec]| family.iter().any(|s| std::ptr::eq(s, spec));
    if in_family(keys::SPECS) {
        "generic"
    } else if in_family(strings::SPECS) {
        "string"
    } else if in_family(hashes::SPECS) {
        "hash"
    } else if in_family(lists::SPECS) {
        "list"
    } else if in_family(sets::SPECS) {
        "set"
    } else if in_family(zsets::SPECS) {
        "sorted-set"
    } else if in_family(multi::SPECS) {
        "transactions"
    } else if in_family(pubsub::SPECS) {
        "pubsub"
    } else if matches!(
        spec.name,
        "auth" | "client" | "echo" | "hello" | "ping" | "quit" | "reset" | "select"
    ) {
        "connection"
    } else {
        "server"
    }
}

/// COMMAND GETKEYS: the keys of a command line, from its key positions in the table.
fn command_keys(line: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, CommandError> {
    let spec = lookup(&line[0])
        .ok_or_else(|| CommandError::Other("ERR Invalid command specified".into()))?;
    if spec.first_key == 0 {
        return Err(CommandError::Other(
            "ERR The command has no key arguments".into(),
        ));
    }
    if !arity_ok(spec.arity, line.len()) {
        return Err(CommandError::Other(
            "ERR Invalid number of arguments specified for command".into(),
        ));
    }
    let argc = line.len() as i64;
    let last = if spec.last_key < 0 {
        argc + spec.last_key
    } else {
        spec.last_key
    };
    let mut keys = Vec::new();
    let mut i = spec.first_key;
    while i <= last && i < argc {
        keys.push(line[i as usize].clone());
        i += spec.step.max(1);
    }
    Ok(keys)
}

fn cmd_command(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let reply = if args.len() == 1 {
        Reply::Array(table().iter().map(|s| command_entry(s)).collect())
    } else {
        let sub = &args[1];
        if is(sub, "count") {
            sub_arity("command", "count", 2, args.len())?;
            Reply::Integer(table().len() as i64)
        } else if is(sub, "docs") {
            let specs: Vec<&Spec> = if args.len() == 2 {
                table().to_vec()
            } else {
                args[2..].iter().filter_map(|name| lookup(name)).collect()
            };
            Reply::Map(
                specs
                    .into_iter()
                    .map(|spec| {
                        let doc = Reply::Map(vec![(
                            Reply::bulk("group"),
                            Reply::bulk(command_group(spec)),
                        )]);
                        (Reply::bulk(spec.name), doc)
                    })
                    .collect(),
            )
        } else if is(sub, "info") {
            if args.len() == 2 {
                Reply::Array(table().iter().map(|s| command_entry(s)).collect())
            } else {
                Reply::Array(
                    args[2..]
                        .iter()
                        .map(|name| lookup(name).map_or(Reply::Null, command_entry))
                        .collect(),
                )
            }
        } else if is(sub, "getkeys") {
            sub_arity("command", "getkeys", -3, args.len())?;
            Reply::Array(
                command_keys(&args[2..])?
                    .into_iter()
                    .map(Reply::Bulk)
                    .collect(),
            )
        } else if is(sub, "list") {
            if args.len() > 2 {
                return Err(CommandError::Syntax);
            }
            Reply::Array(table().iter().map(|s| Reply::bulk(s.name)).collect())
        } else {
            return Err(CommandError::UnknownSubcommand {
                command: "COMMAND",
                sub: quote(sub),
            });
        }
    };
    reply.encode_as(out, ctx.resp3());
    Ok(Action::Continue)
}

/// The parameters CONFIG GET knows, with their current values.
fn config_parameters(shared: &Shared) -> Vec<(&'static str, String)> {
    let c = &shared.config;
    let settings = shared
        .settings
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let databases = if shared.backend.keyspace().is_some() {
        model::DATABASES
    } else {
        1
    };
    let mut list = vec![
        ("appendonly", "yes".into()),
        ("appendfsync", c.durability.clone()),
        ("save", String::new()),
        ("port", shared.port.to_string()),
        ("bind", c.bind.to_string()),
        ("maxclients", c.max_clients.to_string()),
        ("databases", databases.to_string()),
        ("timeout", "0".into()),
        ("tcp-keepalive", "0".into()),
        ("maxmemory", settings.maxmemory_bytes.to_string()),
        ("maxmemory-policy", settings.maxmemory_policy),
        ("proto-max-bulk-len", c.limits.max_bulk_bytes.to_string()),
        (
            "client-query-buffer-limit",
            c.limits.max_request_bytes.to_string(),
        ),
        (
            "client-output-buffer-limit",
            format!("normal {} 0 0", c.max_output_bytes),
        ),
        ("io-threads", c.workers.to_string()),
        ("protected-mode", "no".into()),
        ("cluster-enabled", "no".into()),
        ("notify-keyspace-events", String::new()),
        ("hz", "10".into()),
        ("daemonize", "no".into()),
        ("dir", String::new()),
        ("dbfilename", String::new()),
        ("requirepass", String::new()),
    ];
    let e = settings.encoding;
    for (names, value) in encoding_parameters(&e) {
        for name in names {
            list.push((name, value.to_string()));
        }
    }
    list
}

/// The encoding thresholds by their Redis 7 names (each with its older `ziplist` alias).
fn encoding_parameters(e: &crate::server::Encoding) -> [(&'static [&'static str], i64); 7] {
    [
        (
            &["hash-max-listpack-entries", "hash-max-ziplist-entries"],
            e.hash_max_entries,
        ),
        (
            &["hash-max-listpack-value", "hash-max-ziplist-value"],
            e.hash_max_value,
        ),
        (
            &["zset-max-listpack-entries", "zset-max-ziplist-entries"],
            e.zset_max_entries,
        ),
        (
            &["zset-max-listpack-value", "zset-max-ziplist-value"],
            e.zset_max_value,
        ),
        (&["set-max-intset-entries"], e.set_max_intset_entries),
        (
            &["list-max-listpack-size", "list-max-ziplist-size"],
            e.list_max_size,
        ),
        (&["list-compress-depth"], e.list_compress_depth),
    ]
}

/// Sets the encoding threshold `name` (either of its names); false if it is not one.
fn set_encoding(e: &mut crate::server::Encoding, name: &str, v: i64) -> bool {
    let slot = match name {
        "hash-max-listpack-entries" | "hash-max-ziplist-entries" => &mut e.hash_max_entries,
        "hash-max-listpack-value" | "hash-max-ziplist-value" => &mut e.hash_max_value,
        "zset-max-listpack-entries" | "zset-max-ziplist-entries" => &mut e.zset_max_entries,
        "zset-max-listpack-value" | "zset-max-ziplist-value" => &mut e.zset_max_value,
        "set-max-intset-entries" => &mut e.set_max_intset_entries,
        "list-max-listpack-size" | "list-max-ziplist-size" => &mut e.list_max_size,
        "list-compress-depth" => &mut e.list_compress_depth,
        _ => return false,
    };
    *slot = v;
    true
}

/// Parameters Redis itself cannot change while running.
const CONFIG_IMMUTABLE: &[&str] = &["cluster-enabled", "daemonize", "databases", "io-threads"];

/// The eviction policies of Redis 7, and the ones Kavach offers.
const MAXMEMORY_POLICIES: &[&str] = &[
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "noeviction",
];
const MAXMEMORY_POLICIES_SERVED: &[&str] = &["noeviction", "allkeys-lru", "volatile-ttl"];

/// A memory size as Redis's config parses it: bytes, or a number with `k kb m mb g gb` (k, m, g
/// powers of 1000; kb, mb, gb of 1024), case-insensitive.
fn parse_memory(text: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(text).ok()?.to_ascii_lowercase();
    let units: &[(&str, u64)] = &[
        ("kb", 1 << 10),
        ("mb", 1 << 20),
        ("gb", 1 << 30),
        ("k", 1000),
        ("m", 1_000_000),
        ("g", 1_000_000_000),
        ("b", 1),
    ];
    let (digits, unit) = units
        .iter()
        .find_map(|(u, n)| text.strip_suffix(u).map(|d| (d, *n)))
        .unwrap_or((text.as_str(), 1));
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

fn config_failed(name: &[u8], why: &str) -> CommandError {
    CommandError::Other(format!(
        "ERR CONFIG SET failed (possibly related to argument '{}') - {why}",
        quote(name)
    ))
}

/// CONFIG SET name value [name value ...]: all of them or none. `maxmemory` and
/// `maxmemory-policy` go to the store; any other parameter may only be "set" to the value it
/// has, since the server is configured when it starts.
fn config_set(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Result<(), CommandError> {
    if args.len() % 2 != 0 {
        return Err(CommandError::Other(format!(
            "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
            quote(&args[2])
        )));
    }
    let parameters = config_parameters(ctx.shared);
    let mut settings = ctx
        .shared
        .settings
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let before = settings.clone();
    let mut seen: Vec<Vec<u8>> = Vec::new();
    for pair in args[2..].chunks(2) {
        let name = pair[0].to_ascii_lowercase();
        let Some((known, current)) = parameters.iter().find(|(n, _)| n.as_bytes() == name) else {
            return Err(CommandError::Other(format!(
                "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
                quote(&pair[0])
            )));
        };
        if seen.contains(&name) {
            return Err(config_failed(&pair[0], "duplicate parameter"));
        }
        seen.push(name);
        if CONFIG_IMMUTABLE.contains(known) {
            return Err(config_failed(&pair[0], "can't set immutable config"));
        }
        match *known {
            "maxmemory" => {
                settings.maxmemory_bytes = parse_memory(&pair[1])
                    .ok_or_else(|| config_failed(&pair[0], "argument must be a memory value"))?;
            }
            "maxmemory-policy" => {
                let policy = String::from_utf8_lossy(&pair[1]).to_ascii_lowercase();
                if !MAXMEMORY_POLICIES.contains(&policy.as_str()) {
                    return Err(config_failed(
                        &pair[0],
                        "argument(s) must be one of the following: volatile-lru, volatile-lfu, \
                         volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, \
                         allkeys-random, noeviction",
                    ));
                }
                if !MAXMEMORY_POLICIES_SERVED.contains(&policy.as_str()) {
                    return Err(config_failed(
                        &pair[0],
                        "kavach offers noeviction, allkeys-lru and volatile-ttl",
                    ));
                }
                settings.maxmemory_policy = policy;
            }
            name if set_encoding(&mut settings.encoding, name, 0) => {
                let v = parse_strict_i64(&pair[1])
                    .filter(|v| {
                        if name.starts_with("list-max") {
                            (-5..=i64::from(i32::MAX)).contains(v) && *v != 0
                        } else {
                            (0..=i64::from(i32::MAX)).contains(v)
                        }
                    })
                    .ok_or_else(|| {
                        config_failed(&pair[0], "argument couldn't be parsed into an integer")
                    })?;
                set_encoding(&mut settings.encoding, name, v);
            }
            _ if current.as_bytes() == pair[1].as_slice() => {}
            _ => {
                return Err(config_failed(
                    &pair[0],
                    "kavach cannot change it while running",
                ));
            }
        }
    }
    if settings != before {
        if (settings.maxmemory_bytes, &settings.maxmemory_policy)
            != (before.maxmemory_bytes, &before.maxmemory_policy)
        {
            ctx.backend()
                .set_memory_limit(settings.maxmemory_bytes, &settings.maxmemory_policy)
                .map_err(|e| config_failed(b"maxmemory", &e.to_string()))?;
        }
        *ctx.shared
            .settings
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = settings;
    }
    Ok(())
}

fn cmd_config(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let sub = &args[1];
    if is(sub, "get") {
        sub_arity("config", "get", -3, args.len())?;
        let patterns: Vec<Vec<u8>> = args[2..].iter().map(|p| p.to_ascii_lowercase()).collect();
        let mut reply = Vec::new();
        for (name, value) in config_parameters(ctx.shared) {
            if patterns.iter().any(|p| glob_match(p, name.as_bytes())) {
                reply.push((Reply::bulk(name), Reply::bulk(value)));
            }
        }
        Reply::Map(reply).encode_as(out, ctx.resp3());
        Ok(Action::Continue)
    } else if is(sub, "set") {
        sub_arity("config", "set", -4, args.len())?;
        config_set(ctx, args)?;
        ok(out)
    } else if is(sub, "resetstat") {
        sub_arity("config", "resetstat", 2, args.len())?;
        ctx.shared.stats.reset();
        ok(out)
    } else if is(sub, "rewrite") {
        sub_arity("config", "rewrite", 2, args.len())?;
        Err(CommandError::Other(
            "ERR The server is running without a config file".into(),
        ))
    } else {
        Err(CommandError::UnknownSubcommand {
            command: "CONFIG",
            sub: quote(sub),
        })
    }
}

/// The sections the server itself fills, in INFO's order (a store's own sections go before
/// `Keyspace`).
const SERVER_SECTIONS: &[&str] = &[
    "Server",
    "Clients",
    "Memory",
    "Persistence",
    "Stats",
    "Replication",
    "CPU",
    "Cluster",
    "Keyspace",
];

/// Keys INFO's keyspace section looks at, over all databases, to count deadlines; beyond it
/// `expires` counts the keys seen.
const INFO_SCAN_KEYS_MAX: usize = 1_000_000;

/// Bytes in Redis's human form (`1.50M`, `0B`).
fn human_bytes(n: u64) -> String {
    const UNITS: &[(u64, &str)] = &[
        (1 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    for &(size, unit) in UNITS {
        if n >= size {
            return format!("{:.2}{unit}", n as f64 / size as f64);
        }
    }
    format!("{n}B")
}

/// User and system CPU seconds of this process, from `/proc/self/stat` (zero where unknown).
fn cpu_seconds() -> (f64, f64) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return (0.0, 0.0);
    };
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the whole line, 11 and 12 after the name; the
    // kernel's USER_HZ is 100 on every platform Linux runs on.
    (ticks(11) / 100.0, ticks(12) / 100.0)
}

/// INFO keyspace lines: `db0:keys=N,expires=M,avg_ttl=0` for each non-empty database (the
/// deadlines of every database counted in one call).
fn keyspace_lines(ks: &dyn Keyspace) -> Vec<(String, String)> {
    let mut lines = Vec::new();
    let sizes: Vec<u64> = (0..model::DATABASES)
        .map(|db| ks.dbsize(db as Db).unwrap_or(0))
        .collect();
    if sizes.iter().all(|&n| n == 0) {
        return lines;
    }
    let expiring = ks
        .expiring(INFO_SCAN_KEYS_MAX)
        .unwrap_or([0; model::DATABASES]);
    for (db, (&keys, &expires)) in sizes.iter().zip(&expiring).enumerate() {
        if keys == 0 {
            continue;
        }
        lines.push((
            format!("db{db}"),
            format!("keys={keys},expires={expires},avg_ttl=0"),
        ));
    }
    lines
}

/// INFO's sections. The memory and keyspace figures come from `keyspace` (`None`: left out,
/// as inside EXEC, whose transaction holds the whole keyspace). The keyspace section's lines
/// are computed only with `keyspace_lines_too`: counting the keys with a deadline walks the
/// keyspace, which a poll of `INFO persistence` must not pay for (it took a worker 0.3-0.5 s at
/// 1,000,000 keys, ten times a second under bench/server/timeline.sh).
fn info_sections(
    shared: &Shared,
    keyspace: Option<&dyn Keyspace>,
    keyspace_lines_too: bool,
) -> Vec<InfoSection> {
    let stats = shared.stats.snapshot();
    let uptime = shared.started.elapsed().as_secs();
    let c = &shared.config;
    let settings = shared
        .settings
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let used_memory = keyspace.map_or(0, |ks| ks.used_bytes());
    let (cpu_user, cpu_sys) = cpu_seconds();
    let line = |k: &str, v: String| (k.to_string(), v);
    let mut sections: Vec<InfoSection> = vec![
        (
            "Server".into(),
            vec![
                line("redis_version", REDIS_VERSION.into()),
                line("redis_git_sha1", "00000000".into()),
                line("redis_git_dirty", "0".into()),
                line("kavach_version", env!("CARGO_PKG_VERSION").into()),
                line("redis_mode", "standalone".into()),
                line(
                    "os",
                    format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
                ),
                line("arch_bits", (usize::BITS).to_string()),
                line("multiplexing_api", "mio".into()),
                line("process_id", std::process::id().to_string()),
                line("run_id", shared.run_id.clone()),
                line("tcp_port", shared.port.to_string()),
                line(
                    "server_time_usec",
                    SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_micros())
                        .to_string(),
                ),
                line("uptime_in_seconds", uptime.to_string()),
                line("uptime_in_days", (uptime / 86_400).to_string()),
                line("hz", "10".into()),
                line("configured_hz", "10".into()),
                line(
                    "executable",
                    std::env::current_exe()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                ),
                line("config_file", String::new()),
                line("io_threads_active", "0".into()),
                line("workers", c.workers.to_string()),
                line(
                    "log_write_failures",
                    crate::console::write_failures().to_string(),
                ),
            ],
        ),
        (
            "Clients".into(),
            vec![
                line("connected_clients", stats.connected_clients.to_string()),
                line("cluster_connections", "0".into()),
                line("maxclients", c.max_clients.to_string()),
                line(
                    "blocked_clients",
                    shared.notifier.blocked_count().to_string(),
                ),
                line("tracking_clients", "0".into()),
            ],
        ),
        (
            "Memory".into(),
            vec![
                line("used_memory", used_memory.to_string()),
                line("used_memory_human", human_bytes(used_memory)),
                line("maxmemory", settings.maxmemory_bytes.to_string()),
                line("maxmemory_human", human_bytes(settings.maxmemory_bytes)),
                line("maxmemory_policy", settings.maxmemory_policy.clone()),
            ],
        ),
        (
            "Persistence".into(),
            vec![
                line("loading", "0".into()),
                line(
                    "rdb_bgsave_in_progress",
                    u8::from(shared.saves.bgsave_running.load(Ordering::Relaxed)).to_string(),
                ),
                line(
                    "rdb_last_save_time",
                    shared
                        .saves
                        .last_save_unix
                        .load(Ordering::Relaxed)
                        .to_string(),
                ),
            ],
        ),
        (
            "Stats".into(),
            vec![
                line(
                    "total_connections_received",
                    stats.connections_received.to_string(),
                ),
                line(
                    "total_commands_processed",
                    stats.commands_processed.to_string(),
                ),
                line("instantaneous_ops_per_sec", "0".into()),
                line("total_net_input_bytes", stats.net_input_bytes.to_string()),
                line("total_net_output_bytes", stats.net_output_bytes.to_string()),
                line(
                    "rejected_connections",
                    stats.connections_rejected.to_string(),
                ),
                line("expired_keys", stats.expired_keys.to_string()),
                line("evicted_keys", "0".into()),
                line(
                    "pubsub_channels",
                    shared.notifier.channels(None).len().to_string(),
                ),
                line("pubsub_patterns", shared.notifier.numpat().to_string()),
                line(
                    "client_output_buffer_limit_disconnections",
                    stats.output_limit_disconnections.to_string(),
                ),
                line("total_protocol_errors", stats.protocol_errors.to_string()),
                line("accept_errors", stats.accept_errors.to_string()),
            ],
        ),
        (
            "Replication".into(),
            vec![
                line("role", "master".into()),
                line("connected_slaves", "0".into()),
            ],
        ),
        (
            "CPU".into(),
            vec![
                line("used_cpu_sys", format!("{cpu_sys:.6}")),
                line("used_cpu_user", format!("{cpu_user:.6}")),
            ],
        ),
        ("Cluster".into(), vec![line("cluster_enabled", "0".into())]),
        (
            "Keyspace".into(),
            keyspace
                .filter(|_| keyspace_lines_too)
                .map(keyspace_lines)
                .unwrap_or_default(),
        ),
    ];
    debug_assert!(
        sections
            .iter()
            .map(|s| s.0.as_str())
            .eq(SERVER_SECTIONS.iter().copied())
    );
    for (title, lines) in shared.backend.info() {
        match sections
            .iter_mut()
            .find(|(t, _)| t.eq_ignore_ascii_case(&title))
        {
            Some((_, existing)) => {
                // The store knows better than the server's defaults (e.g. a replica's role).
                for (k, v) in lines {
                    match existing.iter_mut().find(|(ek, _)| *ek == k) {
                        Some(e) => e.1 = v,
                        None => existing.push((k, v)),
                    }
                }
            }
            None => {
                let at = sections.len().saturating_sub(1);
                sections.insert(at, (title, lines));
            }
        }
    }
    if let Some((_, persistence)) = sections.iter_mut().find(|(t, _)| t == "Persistence") {
        if !persistence.iter().any(|(k, _)| k == "durability") {
            persistence.push(line("durability", c.durability.clone()));
        }
        if !persistence.iter().any(|(k, _)| k == "aof_enabled") {
            persistence.push(line("aof_enabled", "1".into()));
        }
    }
    sections
}

fn cmd_info(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let wanted: Vec<Vec<u8>> = args[1..].iter().map(|a| a.to_ascii_lowercase()).collect();
    let all = wanted.is_empty()
        || wanted
            .iter()
            .any(|w| matches!(w.as_slice(), b"all" | b"default" | b"everything"));
    let mut text = Vec::new();
    let keyspace = if ctx.in_exec() {
        None
    } else {
        ctx.backend().keyspace()
    };
    let keyspace_too = all || wanted.iter().any(|w| w.as_slice() == b"keyspace");
    for (title, lines) in info_sections(ctx.shared, keyspace, keyspace_too) {
        if !all
            && !wanted
                .iter()
                .any(|w| w.as_slice() == title.to_ascii_lowercase().as_bytes())
        {
            continue;
        }
        if !text.is_empty() {
            text.extend_from_slice(b"\r\n");
        }
        let _ = write!(text, "# {title}\r\n");
        for (k, v) in lines {
            let _ = write!(text, "{k}:{v}\r\n");
        }
    }
    write_verbatim(out, *b"txt", &text, ctx.resp3());
    Ok(Action::Continue)
}

// ---------------------------------------------------------------------------------------------
// Server commands
// ---------------------------------------------------------------------------------------------

/// PROMOTE [replicas] [write-quorum]: make a replication backup the primary; the reply is a
/// status line saying what recovery did.
fn cmd_promote(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let rest: Vec<&[u8]> = args[1..].iter().map(Vec::as_slice).collect();
    let line = ctx.backend().promote(&rest)?;
    out.push(b'+');
    out.extend(
        line.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
    Ok(Action::Continue)
}

/// KAVACH SCRUB | KAVACH REPAIR: scrub the store's protected regions now (and repair what
/// parity proves); the reply is a bulk string holding a JSON report. KAVACH REBUILD NEWPATH:
/// rebuild the lost member of the store's pool set into NEWPATH; the reply is a status line.
fn cmd_kavach(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    if args.len() == 3 && is(&args[1], "rebuild") {
        let line = ctx.backend().rebuild_member(&args[2])?;
        out.push(b'+');
        out.extend(
            line.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        out.extend_from_slice(b"\r\n");
        return Ok(Action::Continue);
    }
    if args.len() != 2 {
        return Err(CommandError::Syntax);
    }
    let repair = if is(&args[1], "scrub") {
        false
    } else if is(&args[1], "repair") {
        true
    } else {
        return Err(CommandError::Other(format!(
            "ERR KAVACH {}: unknown subcommand (SCRUB, REPAIR or REBUILD NEWPATH)",
            quote(&args[1]).to_ascii_uppercase()
        )));
    };
    let report = ctx.backend().integrity_check(repair)?;
    write_bulk(out, report.as_bytes());
    Ok(Action::Continue)
}

fn cmd_save(ctx: &mut Ctx<'_>, _: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    ctx.backend().save()?;
    ctx.shared
        .saves
        .last_save_unix
        .store(crate::server::unix_seconds(), Ordering::Relaxed);
    ok(out)
}

/// BGSAVE [SCHEDULE]: takes the checkpoint SAVE takes, on a thread of its own.
fn cmd_bgsave(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    match args.len() {
        1 => {}
        2 if is(&args[1], "schedule") => {}
        _ => return Err(CommandError::Syntax),
    }
    let saves = Arc::clone(&ctx.shared.saves);
    let backend = Arc::clone(&ctx.shared.backend);
    if saves.bgsave_running.swap(true, Ordering::SeqCst) {
        if args.len() == 2 {
            // The running save takes another when it is done.
            saves.bgsave_scheduled.store(true, Ordering::SeqCst);
            write_simple(out, b"Background saving scheduled");
            return Ok(Action::Continue);
        }
        return Err(CommandError::Other(
            "ERR Background save already in progress".into(),
        ));
    }
    let worker = Arc::clone(&saves);
    let spawned = std::thread::Builder::new()
        .name("kavach-bgsave".into())
        .spawn(move || {
            loop {
                worker.bgsave_scheduled.store(false, Ordering::SeqCst);
                if backend.save().is_ok() {
                    worker
                        .last_save_unix
                        .store(crate::server::unix_seconds(), Ordering::Relaxed);
                }
                if !worker.bgsave_scheduled.load(Ordering::SeqCst) {
                    break;
                }
            }
            worker.bgsave_running.store(false, Ordering::SeqCst);
        });
    if spawned.is_err() {
        saves.bgsave_running.store(false, Ordering::SeqCst);
        return Err(CommandError::Other(
            "ERR Background save failed to start".into(),
        ));
    }
    write_simple(out, b"Background saving started");
    Ok(Action::Continue)
}

fn cmd_lastsave(ctx: &mut Ctx<'_>, _: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    write_integer(out, ctx.shared.saves.last_save_unix.load(Ordering::Relaxed));
    Ok(Action::Continue)
}

/// TIME: seconds and microseconds since the epoch, as two bulk strings.
/// FUNCTION: Kavach runs no scripts, so there are never functions. FLUSH and LIST answer that
/// truthfully (clients and Redis's test suite call them in their setup); the subcommands that
/// would load or run one are refused.
fn cmd_function(_: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let sub = &args[1];
    if is(sub, "flush") {
        match args.len() {
            2 => {}
            3 if is(&args[2], "async") || is(&args[2], "sync") => {}
            _ => return Err(CommandError::Syntax),
        }
        return ok(out);
    }
    if is(sub, "list") {
        write_array_header(out, 0);
        return Ok(Action::Continue);
    }
    Err(CommandError::Other(format!(
        "ERR FUNCTION {} is not supported by Kavach (see docs/server.md)",
        quote(sub).to_ascii_uppercase()
    )))
}

fn cmd_time(ctx: &mut Ctx<'_>, _: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Reply::Array(vec![
        Reply::bulk(now.as_secs().to_string()),
        Reply::bulk(now.subsec_micros().to_string()),
    ])
    .encode_as(out, ctx.resp3());
    Ok(Action::Continue)
}

/// WAIT numreplicas timeout-ms: how many backups acknowledged every write so far.
fn cmd_wait(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let replicas = parse_int(&args[1])?;
    let timeout = parse_strict_i64(&args[2]).ok_or_else(|| {
        CommandError::Other("ERR timeout is not an integer or out of range".into())
    })?;
    if timeout < 0 {
        return Err(CommandError::Other("ERR timeout is negative".into()));
    }
    let timeout = (timeout > 0).then(|| std::time::Duration::from_millis(timeout.unsigned_abs()));
    let n = ctx
        .backend()
        .wait_replicas(replicas.max(0).unsigned_abs(), timeout)?;
    write_count(out, n)
}

/// RESET: the connection as it was at connect: out of MULTI and WATCH, unsubscribed, database
/// 0, RESP2, no name.
fn cmd_reset(ctx: &mut Ctx<'_>, _: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    multi::end(ctx.shared, ctx.session);
    disconnect(ctx.shared, ctx.session);
    let s = &mut *ctx.session;
    s.db = 0;
    s.resp3 = false;
    s.name = None;
    write_simple(out, b"RESET");
    Ok(Action::Continue)
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE]. The store is durable either way; SAVE takes a
/// checkpoint first (and, unless FORCE, a failed checkpoint cancels the shutdown, as in Redis).
/// The connection gets no reply; the server stops as described in [`crate::server`].
fn cmd_shutdown(ctx: &mut Ctx<'_>, args: &[Vec<u8>], _: &mut Vec<u8>) -> CommandResult {
    let (mut save, mut nosave, mut force) = (false, false, false);
    for arg in &args[1..] {
        if is(arg, "save") {
            save = true;
        } else if is(arg, "nosave") {
            nosave = true;
        } else if is(arg, "force") {
            force = true;
        } else if is(arg, "now") {
        } else if is(arg, "abort") {
            return Err(CommandError::Other("ERR No shutdown in progress.".into()));
        } else {
            return Err(CommandError::Syntax);
        }
    }
    if save && nosave {
        return Err(CommandError::Syntax);
    }
    if save {
        if let Err(e) = ctx.backend().save() {
            if !force {
                return Err(CommandError::Other(format!(
                    "ERR Errors trying to SHUTDOWN: the checkpoint failed ({e})"
                )));
            }
        }
    }
    Ok(Action::Shutdown)
}

// ---------------------------------------------------------------------------------------------
// Helpers of the commands below
// ---------------------------------------------------------------------------------------------

fn write_count(out: &mut Vec<u8>, n: u64) -> CommandResult {
    write_integer(out, i64::try_from(n).unwrap_or(i64::MAX));
    Ok(Action::Continue)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_table_is_sorted_lowercase_and_unique() {
        for pair in table().windows(2) {
            assert!(
                pair[0].name < pair[1].name,
                "{} before {}",
                pair[0].name,
                pair[1].name
            );
        }
        for &spec in table() {
            assert_eq!(spec.name, spec.name.to_ascii_lowercase());
            assert!(std::ptr::eq(lookup(spec.name.as_bytes()).unwrap(), spec));
            assert!(std::ptr::eq(
                lookup(spec.name.to_uppercase().as_bytes()).unwrap(),
                spec
            ));
        }
        assert!(lookup(b"nosuch").is_none());
        assert!(lookup(b"").is_none());
        assert!(lookup(b"GETX").is_none());
    }

    /// The hashed index answers what a search of the table in any case would: every name in
    /// mixed case, each name with its first byte's high bit set, cut by a byte (LPUSHX to LPUSH
    /// is a hit), extended by one or padded past the index's length.
    #[test]
    fn hashed_lookup_agrees_with_the_table() {
        let all = table();
        let search = |name: &[u8]| {
            all.iter()
                .position(|s| name.eq_ignore_ascii_case(s.name.as_bytes()))
        };
        let longest = all.iter().map(|s| s.name.len()).max().unwrap();
        assert!(longest <= NAME_MAX, "a command name of {longest} bytes");
        let mut probes: Vec<Vec<u8>> = vec![b"".to_vec(), vec![b'a'; NAME_MAX + 1], vec![0xff; 3]];
        for spec in all {
            let name = spec.name.as_bytes();
            let mixed: Vec<u8> = name
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    if i % 2 == 0 {
                        b.to_ascii_uppercase()
                    } else {
                        *b
                    }
                })
                .collect();
            probes.push(mixed);
            probes.push(name[..name.len() - 1].to_vec());
            probes.push([name, b"x"].concat());
            let mut flipped = name.to_vec();
            flipped[0] ^= 0x80;
            probes.push(flipped);
            let mut padded = name.to_vec();
            padded.resize(NAME_MAX + 1, b' ');
            probes.push(padded);
        }
        let mut found = std::collections::BTreeSet::new();
        for p in &probes {
            assert_eq!(
                lookup_index(p),
                search(p),
                "{:?}",
                String::from_utf8_lossy(p)
            );
            found.extend(lookup_index(p));
        }
        assert_eq!(
            found.len(),
            all.len(),
            "every command found in its mixed case"
        );
    }

    #[test]
    fn subcommands_are_named_like_redis() {
        assert_eq!(
            SUBCOMMANDS[subcommand_index("client", &words(&["CLIENT", "List"])) - 1],
            "client|list"
        );
        assert_eq!(
            SUBCOMMANDS[subcommand_index("config", &words(&["config", "GET", "x"])) - 1],
            "config|get"
        );
        assert_eq!(subcommand_index("client", &words(&["client", "bogus"])), 0);
        assert_eq!(subcommand_index("client", &words(&["client"])), 0);
        assert_eq!(subcommand_index("get", &words(&["get", "info"])), 0);
        let mut sorted = SUBCOMMANDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, SUBCOMMANDS);
    }

    #[test]
    fn hello_names_roles_like_redis_7() {
        assert_eq!(hello_role(None), "master");
        assert_eq!(hello_role(Some("master")), "master");
        assert_eq!(hello_role(Some("slave")), "replica");
        assert_eq!(hello_role(Some("stopped")), "stopped");
    }

    #[test]
    fn memory_sizes_parse_like_redis_config() {
        let cases: &[(&str, Option<u64>)] = &[
            ("0", Some(0)),
            ("100", Some(100)),
            ("1k", Some(1000)),
            ("1kb", Some(1024)),
            ("2MB", Some(2 << 20)),
            ("3m", Some(3_000_000)),
            ("1gb", Some(1 << 30)),
            ("1g", Some(1_000_000_000)),
            ("5b", Some(5)),
            ("", None),
            ("mb", None),
            ("-1", None),
            ("1.5mb", None),
            ("1tb", None),
            ("99999999999999999999", None),
            ("18446744073709551615gb", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_memory(text.as_bytes()), *want, "{text:?}");
        }
    }

    #[test]
    fn human_sizes_like_redis_info() {
        assert_eq!(human_bytes(0), "0B");
        assert_eq!(human_bytes(1023), "1023B");
        assert_eq!(human_bytes(1024), "1.00K");
        assert_eq!(human_bytes(1536 << 10), "1.50M");
        assert_eq!(human_bytes(3 << 30), "3.00G");
        assert_eq!(human_bytes(1 << 40), "1.00T");
    }

    #[test]
    fn unsupported_table_is_sorted_and_found_in_any_case() {
        for pair in UNSUPPORTED.windows(2) {
            assert!(pair[0] < pair[1], "{} before {}", pair[0], pair[1]);
        }
        for name in UNSUPPORTED {
            assert_eq!(
                unsupported(name.to_uppercase().as_bytes()).as_deref(),
                Some(&*name.to_uppercase())
            );
        }
        assert_eq!(unsupported(b"get"), None);
    }

    #[test]
    fn arity_rules() {
        assert!(arity_ok(2, 2));
        assert!(!arity_ok(2, 3));
        assert!(arity_ok(-2, 2));
        assert!(arity_ok(-2, 9));
        assert!(!arity_ok(-2, 1));
    }

    #[test]
    fn unknown_command_text() {
        let args: Vec<Vec<u8>> = vec![b"foo".to_vec(), b"a".to_vec(), b"b".to_vec()];
        assert_eq!(
            unknown_command_message(&args),
            b"ERR unknown command 'foo', with args beginning with: 'a' 'b' ".to_vec()
        );
        assert_eq!(
            unknown_command_message(&[b"foo".to_vec()]),
            b"ERR unknown command 'foo', with args beginning with: ".to_vec()
        );
        let long = vec![b"x".to_vec(), vec![b'a'; 1000], b"b".to_vec()];
        let msg = unknown_command_message(&long);
        assert!(msg.len() < 200, "quoted args are bounded");
    }

    #[test]
    fn floats_parse_like_strtod() {
        let cases: &[(&str, Option<f64>)] = &[
            ("1", Some(1.0)),
            ("-1.5", Some(-1.5)),
            ("+2", Some(2.0)),
            (".5", Some(0.5)),
            ("5.", Some(5.0)),
            ("1e3", Some(1000.0)),
            ("1E-2", Some(0.01)),
            ("inf", Some(f64::INFINITY)),
            ("+inf", Some(f64::INFINITY)),
            ("-inf", Some(f64::NEG_INFINITY)),
            ("-Infinity", Some(f64::NEG_INFINITY)),
            ("0", Some(0.0)),
            ("0.000", Some(0.0)),
            ("-0", Some(0.0)),
            ("nan", None),
            ("NaN", None),
            ("-nan", None),
            ("", None),
            (" 1", None),
            ("1 ", None),
            ("1e400", None),
            ("1e-400", None),
            ("abc", None),
            ("1e", None),
            ("0x10", Some(16.0)),
            ("-0X1p-2", Some(-0.25)),
            ("0x1.8p1", Some(3.0)),
            ("0x.8", Some(0.5)),
            ("0xA", Some(10.0)),
            ("0x1P+4", Some(16.0)),
            ("0x1fffffffffffff", Some(9007199254740991.0)),
            ("0x1p1023", Some(8.98846567431158e307)),
            ("0x1p1024", None),
            ("0x1p-1074", Some(5e-324)),
            ("0x1p-1080", None),
            ("0x0p-1080", Some(0.0)),
            ("0x", None),
            ("0x.", None),
            ("0x1p", None),
            ("0x1p+", None),
            ("0xg", None),
            ("0x1.8.1", None),
            ("1_0", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_float(text.as_bytes()), *want, "{text:?}");
        }
        assert!(parse_float(b"-0").unwrap().is_sign_positive());
        assert!(parse_float(b"-0.0e5").unwrap().is_sign_positive());
    }

    fn words(list: &[&str]) -> Vec<Vec<u8>> {
        list.iter().map(|s| s.as_bytes().to_vec()).collect()
    }
}
