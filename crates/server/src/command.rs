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

use crate::backend::{Backend, BackendError, InfoSection, ScoreBound, SetOptions};
use crate::glob::glob_match;
use crate::resp::{
    Reply, parse_strict_i64, write_array_header, write_bulk, write_double_text, write_error,
    write_integer, write_map_header, write_null, write_optional, write_simple, write_verbatim,
};
use crate::server::Shared;
use model::{
    Bytes, Db, Effect, Keyspace, Kind, LexBound, ModelError, ModelResult, Scope, Txn, Value, View,
};

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
    /// `deadline` (then reply with the command's timeout reply, `timeout_reply`, RESP2 form;
    /// RESP3 connections get a null).
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
        });
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.clients.len() >= inner.prune_at.max(REGISTRY_PRUNE_MIN) {
            inner.clients.retain(|_, c| c.strong_count() > 0);
            inner.prune_at = inner.clients.len() * 2;
        }
        inner.clients.insert(id, Arc::downgrade(&handle));
        handle
    }

    /// The open connections, by id.
    fn live(&self) -> Vec<Arc<ClientHandle>> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.clients.values().filter_map(Weak::upgrade).collect()
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
    /// What other connections see of this one.
    pub(crate) handle: Arc<ClientHandle>,
}

impl Session {
    /// A session for a new connection, registered under `handle`.
    pub(crate) fn new(handle: Arc<ClientHandle>) -> Self {
        Session {
            id: handle.id,
            name: None,
            lib_name: None,
            lib_ver: None,
            resp3: false,
            db: 0,
            handle,
        }
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

    /// Whether the handler runs inside EXEC.
    fn in_exec(&self) -> bool {
        self.txn.is_some()
    }

    /// The data-model store behind the server.
    fn keyspace(&self) -> Result<&dyn Keyspace, CommandError> {
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
        let scope: Vec<(Db, &[u8])> = keys.iter().map(|k| (db, *k)).collect();
        self.run(Scope::Keys(&scope), false, f)
    }

    /// Run `f` with `keys` (of this connection's database) locked for writing; its effects are
    /// durable, as one unit, when this returns.
    fn write<R>(
        &mut self,
        keys: &[&[u8]],
        f: impl FnOnce(&mut dyn Txn) -> Result<R, CommandError>,
    ) -> Result<R, CommandError> {
        let db = self.db();
        let scope: Vec<(Db, &[u8])> = keys.iter().map(|k| (db, *k)).collect();
        self.run(Scope::Keys(&scope), true, f)
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
        if let Some(txn) = self.txn.as_mut() {
            let mut rec = Recorder {
                inner: &mut **txn,
                shared,
            };
            return f(&mut rec);
        }
        let ks = self.keyspace()?;
        let mut f = Some(f);
        let mut result = None;
        ks.transact(scope, write, &mut |txn| {
            if let Some(f) = f.take() {
                let mut rec = Recorder { inner: txn, shared };
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

/// A [`Txn`] that tells the server which keys its effects wrote, once they are applied.
struct Recorder<'t> {
    inner: &'t mut dyn Txn,
    shared: &'t Shared,
}

impl View for Recorder<'_> {
    fn now_ms(&self) -> i64 {
        self.inner.now_ms()
    }
    fn kind(&self, db: Db, key: &[u8]) -> Option<Kind> {
        self.inner.kind(db, key)
    }
    fn expire_at(&self, db: Db, key: &[u8]) -> Option<i64> {
        self.inner.expire_at(db, key)
    }
    fn value(&self, db: Db, key: &[u8]) -> Option<Value> {
        self.inner.value(db, key)
    }
    fn string(&self, db: Db, key: &[u8]) -> Option<Bytes> {
        self.inner.string(db, key)
    }
    fn string_len(&self, db: Db, key: &[u8]) -> u64 {
        self.inner.string_len(db, key)
    }
    fn hash_get(&self, db: Db, key: &[u8], field: &[u8]) -> Option<Bytes> {
        self.inner.hash_get(db, key, field)
    }
    fn hash_len(&self, db: Db, key: &[u8]) -> u64 {
        self.inner.hash_len(db, key)
    }
    fn hash_all(&self, db: Db, key: &[u8]) -> Vec<(Bytes, Bytes)> {
        self.inner.hash_all(db, key)
    }
    fn list_len(&self, db: Db, key: &[u8]) -> u64 {
        self.inner.list_len(db, key)
    }
    fn list_range(&self, db: Db, key: &[u8], start: u64, end: u64) -> Vec<Bytes> {
        self.inner.list_range(db, key, start, end)
    }
    fn set_len(&self, db: Db, key: &[u8]) -> u64 {
        self.inner.set_len(db, key)
    }
    fn set_contains(&self, db: Db, key: &[u8], member: &[u8]) -> bool {
        self.inner.set_contains(db, key, member)
    }
    fn set_members(&self, db: Db, key: &[u8]) -> Vec<Bytes> {
        self.inner.set_members(db, key)
    }
    fn zset_len(&self, db: Db, key: &[u8]) -> u64 {
        self.inner.zset_len(db, key)
    }
    fn zset_score(&self, db: Db, key: &[u8], member: &[u8]) -> Option<f64> {
        self.inner.zset_score(db, key, member)
    }
    fn zset_rank(&self, db: Db, key: &[u8], member: &[u8]) -> Option<u64> {
        self.inner.zset_rank(db, key, member)
    }
    fn zset_range(&self, db: Db, key: &[u8], start: u64, end: u64) -> Vec<(Bytes, f64)> {
        self.inner.zset_range(db, key, start, end)
    }
    fn zset_rank_of_score(&self, db: Db, key: &[u8], bound: model::ScoreBound) -> u64 {
        self.inner.zset_rank_of_score(db, key, bound)
    }
    fn zset_rank_above(&self, db: Db, key: &[u8], bound: model::ScoreBound) -> u64 {
        self.inner.zset_rank_above(db, key, bound)
    }
    fn zset_rank_of_lex(&self, db: Db, key: &[u8], bound: &LexBound) -> u64 {
        self.inner.zset_rank_of_lex(db, key, bound)
    }
    fn zset_rank_above_lex(&self, db: Db, key: &[u8], bound: &LexBound) -> u64 {
        self.inner.zset_rank_above_lex(db, key, bound)
    }
}

impl Txn for Recorder<'_> {
    fn apply(&mut self, effects: Vec<Effect>) -> ModelResult<()> {
        let touched = crate::notify::Touch::of(&effects);
        self.inner.apply(effects)?;
        self.shared.notifier.touched(&touched);
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
mod zsets;

/// The commands defined in this file, sorted by name (checked by a test). The families in the
/// submodules add theirs; [`table`] merges them.
static CORE: &[Spec] = &[
    spec!("append", 3, WRITE, 1, 1, 1, cmd_append),
    spec!("auth", -2, CONNECTION, 0, 0, 0, cmd_auth),
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
    spec!("dbsize", 1, READ_FAST, 0, 0, 0, cmd_dbsize),
    spec!("decr", 2, WRITE, 1, 1, 1, cmd_decr),
    spec!("decrby", 3, WRITE, 1, 1, 1, cmd_decrby),
    spec!("del", -2, &["write"], 1, -1, 1, cmd_del),
    spec!("echo", 2, &["fast"], 0, 0, 0, cmd_echo),
    spec!("exists", -2, READ_FAST, 1, -1, 1, cmd_exists),
    spec!("flushall", -1, &["write"], 0, 0, 0, cmd_flushall),
    spec!("get", 2, READ_FAST, 1, 1, 1, cmd_get),
    spec!("hdel", -3, WRITE_NO_OOM, 1, 1, 1, cmd_hdel),
    spec!("hello", -1, CONNECTION, 0, 0, 0, cmd_hello),
    spec!("hget", 3, READ_FAST, 1, 1, 1, cmd_hget),
    spec!("hgetall", 2, READ, 1, 1, 1, cmd_hgetall),
    spec!("hmget", -3, READ_FAST, 1, 1, 1, cmd_hmget),
    spec!("hmset", -4, WRITE, 1, 1, 1, cmd_hmset),
    spec!("hset", -4, WRITE, 1, 1, 1, cmd_hset),
    spec!("incr", 2, WRITE, 1, 1, 1, cmd_incr),
    spec!("incrby", 3, WRITE, 1, 1, 1, cmd_incrby),
    spec!("info", -1, &["loading", "stale"], 0, 0, 0, cmd_info),
    spec!("mget", -2, READ_FAST, 1, -1, 1, cmd_mget),
    spec!("mset", -3, WRITE_SLOW, 1, -1, 2, cmd_mset),
    spec!("ping", -1, &["fast"], 0, 0, 0, cmd_ping),
    spec!("promote", -1, ADMIN, 0, 0, 0, cmd_promote),
    spec!("quit", -1, CONNECTION, 0, 0, 0, cmd_quit),
    spec!("save", 1, &["admin", "noscript"], 0, 0, 0, cmd_save),
    spec!("scan", -2, READ, 0, 0, 0, cmd_scan),
    spec!(
        "select",
        2,
        &["loading", "stale", "fast"],
        0,
        0,
        0,
        cmd_select
    ),
    spec!("set", -3, WRITE_SLOW, 1, 1, 1, cmd_set),
    spec!("shutdown", -1, ADMIN, 0, 0, 0, cmd_shutdown),
    spec!("strlen", 2, READ_FAST, 1, 1, 1, cmd_strlen),
    spec!("type", 2, READ_FAST, 1, 1, 1, cmd_type),
    spec!("zadd", -4, WRITE, 1, 1, 1, cmd_zadd),
    spec!("zrangebyscore", -4, READ, 1, 1, 1, cmd_zrangebyscore),
    spec!("zrem", -3, WRITE_NO_OOM, 1, 1, 1, cmd_zrem),
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
        let families: [&'static [Spec]; 9] = [
            CORE,
            keys::SPECS,
            strings::SPECS,
            hashes::SPECS,
            lists::SPECS,
            sets::SPECS,
            zsets::SPECS,
            multi::SPECS,
            pubsub::SPECS,
        ];
        let mut all: Vec<&'static Spec> = families.iter().flat_map(|f| f.iter()).collect();
        all.sort_by(|a, b| a.name.cmp(b.name));
        all
    })
}

fn lookup_index(name: &[u8]) -> Option<usize> {
    table()
        .binary_search_by(|spec| cmp_lowercase(name, spec.name.as_bytes()).reverse())
        .ok()
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

/// Executes one request and appends its reply to `out`. `args` is not empty.
pub(crate) fn execute(
    shared: &Shared,
    session: &mut Session,
    args: &[Vec<u8>],
    out: &mut Vec<u8>,
) -> Action {
    let Some(name) = args.first() else {
        return Action::Continue;
    };
    let Some(index) = lookup_index(name) else {
        write_error(out, &unknown_command_message(args));
        return Action::Continue;
    };
    let spec = table()[index];
    if !arity_ok(spec.arity, args.len()) {
        write_error(
            out,
            CommandError::Arity(spec.name.to_string())
                .to_string()
                .as_bytes(),
        );
        return Action::Continue;
    }
    let mark = out.len();
    let handle = &session.handle;
    handle.last_command.store(index + 1, Ordering::Relaxed);
    handle
        .last_subcommand
        .store(subcommand_index(spec.name, args), Ordering::Relaxed);
    let active = u64::try_from(handle.created.elapsed().as_millis()).unwrap_or(u64::MAX);
    handle.last_active_ms.store(active, Ordering::Relaxed);
    let mut ctx = Ctx {
        shared,
        session,
        txn: None,
    };
    let result = (spec.handler)(&mut ctx, args, out);
    if spec.name == "hello" || spec.name == "client" {
        session.publish();
    }
    match result {
        Ok(action) => action,
        Err(e) => {
            out.truncate(mark);
            write_error(out, e.to_string().as_bytes());
            Action::Continue
        }
    }
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

/// Formats a score like Redis 7.2: the shortest representation that round-trips, in `%.17g`
/// style (exponent form below 1e-4 and from 1e17), `inf`/`-inf`, and `0` for either zero.
pub(crate) fn format_score(value: f64) -> String {
    if value.is_nan() {
        return "nan".to_string();
    }
    if value.is_infinite() {
        return if value > 0.0 {
            "inf".to_string()
        } else {
            "-inf".to_string()
        };
    }
    if value == 0.0 {
        return "0".to_string();
    }
    // `{:e}` gives the shortest round-trip digits: `-1.2345e17`, `1e-5`.
    let sci = format!("{value:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if !(-4..17).contains(&exponent) {
        let (head, tail) = digits.split_at(1);
        let dot = if tail.is_empty() { "" } else { "." };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        return format!(
            "{sign}{head}{dot}{tail}e{exp_sign}{:02}",
            exponent.unsigned_abs()
        );
    }
    if exponent < 0 {
        let zeros = "0".repeat((-exponent - 1) as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let int_len = exponent as usize + 1;
    if digits.len() <= int_len {
        let zeros = "0".repeat(int_len - digits.len());
        format!("{sign}{digits}{zeros}")
    } else {
        let (int_part, frac) = digits.split_at(int_len);
        format!("{sign}{int_part}.{frac}")
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Connection commands
// ---------------------------------------------------------------------------------------------

fn cmd_ping(_: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
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
    let info_role = info_sections(shared)
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
    "client|setinfo",
    "client|setname",
    "command|count",
    "command|docs",
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
    let _ = write!(
        line,
        " age={} idle={} flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 \
         argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={command} \
         user=default redir=-1 resp={} lib-name=",
        age_ms / 1000,
        idle_ms / 1000,
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

fn cmd_command(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let reply = if args.len() == 1 {
        Reply::Array(table().iter().map(|s| command_entry(s)).collect())
    } else {
        let sub = &args[1];
        if is(sub, "count") {
            sub_arity("command", "count", 2, args.len())?;
            Reply::Integer(table().len() as i64)
        } else if is(sub, "docs") {
            Reply::Array(vec![])
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
    vec![
        ("appendonly", "yes".into()),
        ("appendfsync", c.durability.clone()),
        ("save", String::new()),
        ("port", shared.port.to_string()),
        ("bind", c.bind.to_string()),
        ("maxclients", c.max_clients.to_string()),
        ("databases", "1".into()),
        ("timeout", "0".into()),
        ("tcp-keepalive", "0".into()),
        ("maxmemory", "0".into()),
        ("maxmemory-policy", "noeviction".into()),
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
    ]
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
        if args.len() % 2 != 0 {
            return Err(CommandError::Other(format!(
                "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
                quote(&args[2])
            )));
        }
        let parameters = config_parameters(ctx.shared);
        for pair in args[2..].chunks(2) {
            let name = pair[0].to_ascii_lowercase();
            let Some((_, current)) = parameters.iter().find(|(n, _)| n.as_bytes() == name) else {
                return Err(CommandError::Other(format!(
                    "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
                    quote(&pair[0])
                )));
            };
            // Setting a parameter to what it already is succeeds; changing it does not, since
            // the server is configured when it starts.
            if current.as_bytes() != pair[1].as_slice() {
                return Err(CommandError::Other(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{}') - kavach cannot \
                     change it while running",
                    quote(&pair[0])
                )));
            }
        }
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

/// The sections the server itself fills, in INFO's order.
const SERVER_SECTIONS: &[&str] = &["Server", "Clients", "Persistence", "Stats", "Replication"];

fn info_sections(shared: &Shared) -> Vec<InfoSection> {
    let stats = shared.stats.snapshot();
    let uptime = shared.started.elapsed().as_secs();
    let c = &shared.config;
    let line = |k: &str, v: String| (k.to_string(), v);
    let mut sections: Vec<InfoSection> = vec![
        (
            "Server".into(),
            vec![
                line("redis_version", REDIS_VERSION.into()),
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
                line("uptime_in_seconds", uptime.to_string()),
                line("uptime_in_days", (uptime / 86_400).to_string()),
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
                line("maxclients", c.max_clients.to_string()),
                line("blocked_clients", "0".into()),
                line("tracking_clients", "0".into()),
            ],
        ),
        ("Persistence".into(), vec![line("loading", "0".into())]),
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
            None => sections.push((title, lines)),
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
    for (title, lines) in info_sections(ctx.shared) {
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

fn cmd_dbsize(ctx: &mut Ctx<'_>, _: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = ctx.backend().dbsize()?;
    write_integer(out, i64::try_from(n).unwrap_or(i64::MAX));
    Ok(Action::Continue)
}

fn cmd_flushall(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    match args.len() {
        1 => {}
        2 if is(&args[1], "async") || is(&args[1], "sync") => {}
        _ => return Err(CommandError::Syntax),
    }
    ctx.backend().flushall()?;
    ok(out)
}

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

fn cmd_save(ctx: &mut Ctx<'_>, _: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    ctx.backend().save()?;
    ok(out)
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

fn cmd_scan(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let cursor = std::str::from_utf8(&args[1])
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| CommandError::Other("ERR invalid cursor".into()))?;
    let mut pattern: Option<&[u8]> = None;
    let mut type_filter: Option<&[u8]> = None;
    let mut count = SCAN_COUNT_DEFAULT;
    let mut i = 2;
    while i < args.len() {
        let Some(value) = args.get(i + 1) else {
            return Err(CommandError::Syntax);
        };
        if is(&args[i], "match") {
            // `*` matches everything: skip the matcher.
            pattern = if value.as_slice() == b"*" {
                None
            } else {
                Some(value)
            };
        } else if is(&args[i], "count") {
            let n = parse_int(value)?;
            if n < 1 {
                return Err(CommandError::Syntax);
            }
            count = usize::try_from(n).unwrap_or(usize::MAX).min(SCAN_COUNT_MAX);
        } else if is(&args[i], "type") {
            type_filter = Some(value);
        } else {
            return Err(CommandError::Syntax);
        }
        i += 2;
    }
    let (next, keys) = ctx.backend().scan(cursor, count)?;
    let keys: Vec<_> = keys
        .into_iter()
        .filter(|(key, kind)| {
            pattern.is_none_or(|p| glob_match(p, key))
                && type_filter.is_none_or(|t| t.eq_ignore_ascii_case(kind.as_bytes()))
        })
        .collect();
    write_array_header(out, 2);
    write_bulk(out, next.to_string().as_bytes());
    write_array_header(out, keys.len());
    for (key, _) in &keys {
        write_bulk(out, key);
    }
    Ok(Action::Continue)
}

fn cmd_type(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let kind = ctx.backend().key_type(&args[1])?;
    write_simple(out, kind.as_bytes());
    Ok(Action::Continue)
}

// ---------------------------------------------------------------------------------------------
// Strings and keys
// ---------------------------------------------------------------------------------------------

fn keys_of(args: &[Vec<u8>]) -> Vec<&[u8]> {
    args.iter().map(Vec::as_slice).collect()
}

fn write_count(out: &mut Vec<u8>, n: u64) -> CommandResult {
    write_integer(out, i64::try_from(n).unwrap_or(i64::MAX));
    Ok(Action::Continue)
}

fn cmd_get(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let value = ctx.backend().get(&args[1])?;
    write_optional(out, value.as_deref(), ctx.resp3());
    Ok(Action::Continue)
}

/// Parses SET's options: `[NX | XX] [EX s | PX ms | EXAT s | PXAT ms]`, in any order, Redis's
/// rules (an option may not repeat or conflict; times must be positive and not overflow).
pub(crate) fn parse_set_options(
    options: &[Vec<u8>],
    now_ms: i64,
) -> Result<SetOptions, CommandError> {
    let mut opts = SetOptions::default();
    let mut i = 0;
    while i < options.len() {
        let arg = &options[i];
        let has_value = i + 1 < options.len();
        if is(arg, "nx") && !opts.only_if_present {
            opts.only_if_absent = true;
        } else if is(arg, "xx") && !opts.only_if_absent {
            opts.only_if_present = true;
        } else if (is(arg, "ex") || is(arg, "px") || is(arg, "exat") || is(arg, "pxat"))
            && opts.expire_at_ms.is_none()
            && has_value
        {
            let amount = parse_int(&options[i + 1])?;
            let seconds = is(arg, "ex") || is(arg, "exat");
            let absolute = is(arg, "exat") || is(arg, "pxat");
            let invalid = CommandError::InvalidExpire("set");
            if amount <= 0 {
                return Err(invalid);
            }
            let ms = if seconds {
                amount.checked_mul(1000).ok_or(invalid.clone())?
            } else {
                amount
            };
            let at = if absolute {
                ms
            } else {
                ms.checked_add(now_ms).ok_or(invalid)?
            };
            opts.expire_at_ms = Some(at);
            i += 1;
        } else if is(arg, "keepttl") || is(arg, "get") {
            return Err(CommandError::Other(format!(
                "ERR SET {} is not supported by this server",
                quote(&arg.to_ascii_uppercase())
            )));
        } else {
            return Err(CommandError::Syntax);
        }
        i += 1;
    }
    Ok(opts)
}

fn cmd_set(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let opts = parse_set_options(&args[3..], now_ms())?;
    if ctx.backend().set(&args[1], &args[2], &opts)? {
        ok(out)
    } else {
        write_null(out, ctx.resp3());
        Ok(Action::Continue)
    }
}

fn cmd_del(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = ctx.backend().del(&keys_of(&args[1..]))?;
    write_count(out, n)
}

fn cmd_exists(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = ctx.backend().exists(&keys_of(&args[1..]))?;
    write_count(out, n)
}

fn cmd_mget(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let values = ctx.backend().mget(&keys_of(&args[1..]))?;
    write_array_header(out, values.len());
    for v in &values {
        write_optional(out, v.as_deref(), ctx.resp3());
    }
    Ok(Action::Continue)
}

fn pairs_of(args: &[Vec<u8>]) -> Vec<(&[u8], &[u8])> {
    args.chunks_exact(2)
        .map(|p| (p[0].as_slice(), p[1].as_slice()))
        .collect()
}

fn cmd_mset(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    if args.len() % 2 == 0 {
        return Err(CommandError::Arity("mset".into()));
    }
    ctx.backend().mset(&pairs_of(&args[1..]))?;
    ok(out)
}

fn incr_reply(ctx: &mut Ctx<'_>, key: &[u8], delta: i64, out: &mut Vec<u8>) -> CommandResult {
    let n = ctx.backend().incr_by(key, delta)?;
    write_integer(out, n);
    Ok(Action::Continue)
}

fn cmd_incr(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    incr_reply(ctx, &args[1], 1, out)
}

fn cmd_decr(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    incr_reply(ctx, &args[1], -1, out)
}

fn cmd_incrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let delta = parse_int(&args[2])?;
    incr_reply(ctx, &args[1], delta, out)
}

fn cmd_decrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let delta = parse_int(&args[2])?;
    let negated = delta
        .checked_neg()
        .ok_or_else(|| CommandError::Other("ERR decrement would overflow".into()))?;
    incr_reply(ctx, &args[1], negated, out)
}

fn cmd_append(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = ctx.backend().append(&args[1], &args[2])?;
    write_count(out, n)
}

fn cmd_strlen(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = ctx.backend().strlen(&args[1])?;
    write_count(out, n)
}

// ---------------------------------------------------------------------------------------------
// Hashes
// ---------------------------------------------------------------------------------------------

fn cmd_hset(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    if args.len() % 2 != 0 {
        return Err(CommandError::Arity("hset".into()));
    }
    let n = ctx.backend().hset(&args[1], &pairs_of(&args[2..]))?;
    write_count(out, n)
}

fn cmd_hmset(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    if args.len() % 2 != 0 {
        return Err(CommandError::Arity("hmset".into()));
    }
    ctx.backend().hset(&args[1], &pairs_of(&args[2..]))?;
    ok(out)
}

fn cmd_hget(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let value = ctx.backend().hget(&args[1], &args[2])?;
    write_optional(out, value.as_deref(), ctx.resp3());
    Ok(Action::Continue)
}

fn cmd_hmget(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let values = ctx.backend().hmget(&args[1], &keys_of(&args[2..]))?;
    write_array_header(out, values.len());
    for v in &values {
        write_optional(out, v.as_deref(), ctx.resp3());
    }
    Ok(Action::Continue)
}

fn cmd_hgetall(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let pairs = ctx.backend().hgetall(&args[1])?;
    write_map_header(out, pairs.len(), ctx.resp3());
    for (field, value) in &pairs {
        write_bulk(out, field);
        write_bulk(out, value);
    }
    Ok(Action::Continue)
}

fn cmd_hdel(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = ctx.backend().hdel(&args[1], &keys_of(&args[2..]))?;
    write_count(out, n)
}

// ---------------------------------------------------------------------------------------------
// Sorted sets
// ---------------------------------------------------------------------------------------------

/// ZADD's flags; the backend contract has none of them, so they are refused.
const ZADD_FLAGS: &[&str] = &["nx", "xx", "gt", "lt", "ch", "incr"];

fn cmd_zadd(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let elements = &args[2..];
    if ZADD_FLAGS.iter().any(|f| is(&elements[0], f)) || elements.len() % 2 != 0 {
        return Err(CommandError::Syntax);
    }
    let members = elements
        .chunks_exact(2)
        .map(|p| parse_float(&p[0]).map(|score| (score, p[1].as_slice())))
        .collect::<Option<Vec<_>>>()
        .ok_or(CommandError::NotFloat)?;
    let n = ctx.backend().zadd(&args[1], &members)?;
    write_count(out, n)
}

fn cmd_zrem(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let n = ctx.backend().zrem(&args[1], &keys_of(&args[2..]))?;
    write_count(out, n)
}

/// Parses a ZRANGEBYSCORE bound: `(` prefix for exclusive, then a float (`-inf`, `+inf` too).
pub(crate) fn parse_score_bound(arg: &[u8]) -> Result<ScoreBound, CommandError> {
    let (exclusive, number) = match arg.strip_prefix(b"(") {
        Some(rest) => (true, rest),
        None => (false, arg),
    };
    let score = parse_float_with(number, false).ok_or(CommandError::MinMaxNotFloat)?;
    Ok(ScoreBound { score, exclusive })
}

fn cmd_zrangebyscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let mut with_scores = false;
    let mut limit: Option<(i64, i64)> = None;
    let mut i = 4;
    while i < args.len() {
        if is(&args[i], "withscores") {
            with_scores = true;
            i += 1;
        } else if is(&args[i], "limit") && i + 2 < args.len() {
            limit = Some((parse_int(&args[i + 1])?, parse_int(&args[i + 2])?));
            i += 3;
        } else {
            return Err(CommandError::Syntax);
        }
    }
    let min = parse_score_bound(&args[2])?;
    let max = parse_score_bound(&args[3])?;
    let (offset, count) = match limit {
        None => (0, None),
        Some((offset, _)) if offset < 0 => {
            write_array_header(out, 0);
            return Ok(Action::Continue);
        }
        Some((offset, count)) => (
            usize::try_from(offset).unwrap_or(usize::MAX),
            usize::try_from(count).ok(),
        ),
    };
    let members = ctx
        .backend()
        .zrange_by_score(&args[1], min, max, offset, count)?;
    // RESP3 pairs each member with its score as a two-element array of bulk and double; RESP2
    // interleaves them in one flat array.
    let resp3 = ctx.resp3();
    let pairs = with_scores && resp3;
    write_array_header(
        out,
        members.len() * if with_scores && !resp3 { 2 } else { 1 },
    );
    for (member, score) in &members {
        if pairs {
            write_array_header(out, 2);
        }
        write_bulk(out, member);
        if with_scores {
            write_double_text(out, format_score(*score).as_bytes(), resp3);
        }
    }
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
            ("0x10", None),
            ("1_0", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_float(text.as_bytes()), *want, "{text:?}");
        }
        assert!(parse_float(b"-0").unwrap().is_sign_positive());
        assert!(parse_float(b"-0.0e5").unwrap().is_sign_positive());
    }

    #[test]
    fn scores_format_like_redis() {
        let cases: &[(f64, &str)] = &[
            (1.0, "1"),
            (-1.0, "-1"),
            (0.0, "0"),
            (-0.0, "0"),
            (1.1, "1.1"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.25e-7, "1.25e-07"),
            (123.456, "123.456"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (1e20, "1e+20"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (-2.5e300, "-2.5e+300"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
        ];
        for (value, want) in cases {
            assert_eq!(format_score(*value), *want, "{value:e}");
            if value.is_finite() {
                assert_eq!(want.parse::<f64>().unwrap(), *value + 0.0);
            }
        }
    }

    fn words(list: &[&str]) -> Vec<Vec<u8>> {
        list.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn set_options_table() {
        let now = 1_000_000;
        let expire = |ms| SetOptions {
            expire_at_ms: Some(ms),
            ..SetOptions::default()
        };
        let cases: &[(&[&str], Result<SetOptions, CommandError>)] = &[
            (&[], Ok(SetOptions::default())),
            (&["EX", "10"], Ok(expire(now + 10_000))),
            (&["px", "10"], Ok(expire(now + 10))),
            (&["EXAT", "5"], Ok(expire(5000))),
            (&["PXAT", "5"], Ok(expire(5))),
            (
                &["NX", "EX", "1"],
                Ok(SetOptions {
                    only_if_absent: true,
                    ..expire(now + 1000)
                }),
            ),
            (
                &["xx"],
                Ok(SetOptions {
                    only_if_present: true,
                    ..SetOptions::default()
                }),
            ),
            (
                &["nx", "nx"],
                Ok(SetOptions {
                    only_if_absent: true,
                    ..SetOptions::default()
                }),
            ),
            (&["NX", "XX"], Err(CommandError::Syntax)),
            (&["EX", "1", "PX", "1"], Err(CommandError::Syntax)),
            (&["EX", "1", "EX", "1"], Err(CommandError::Syntax)),
            (&["EX"], Err(CommandError::Syntax)),
            (&["foo"], Err(CommandError::Syntax)),
            (&["EX", "x"], Err(CommandError::NotInteger)),
            (&["EX", "1.5"], Err(CommandError::NotInteger)),
            (&["EX", "0"], Err(CommandError::InvalidExpire("set"))),
            (&["PX", "-5"], Err(CommandError::InvalidExpire("set"))),
            (
                &["EX", "9223372036854775807"],
                Err(CommandError::InvalidExpire("set")),
            ),
            (
                &["PX", "9223372036854775807"],
                Err(CommandError::InvalidExpire("set")),
            ),
        ];
        for (options, want) in cases {
            assert_eq!(
                &parse_set_options(&words(options), now),
                want,
                "{options:?}"
            );
        }
        assert!(matches!(
            parse_set_options(&words(&["KEEPTTL"]), now),
            Err(CommandError::Other(_))
        ));
    }

    #[test]
    fn score_bounds() {
        assert_eq!(
            parse_score_bound(b"(1"),
            Ok(ScoreBound {
                score: 1.0,
                exclusive: true
            })
        );
        assert_eq!(
            parse_score_bound(b"-inf"),
            Ok(ScoreBound {
                score: f64::NEG_INFINITY,
                exclusive: false
            })
        );
        assert_eq!(
            parse_score_bound(b"(+inf"),
            Ok(ScoreBound {
                score: f64::INFINITY,
                exclusive: true
            })
        );
        assert_eq!(
            parse_score_bound(b"( 1"),
            Ok(ScoreBound {
                score: 1.0,
                exclusive: true
            })
        );
        assert_eq!(
            parse_score_bound(b"1e400"),
            Ok(ScoreBound {
                score: f64::INFINITY,
                exclusive: false
            })
        );
        assert_eq!(
            parse_score_bound(b"-0").map(|b| b.score.is_sign_positive()),
            Ok(true)
        );
        for bad in [&b"x"[..], b"(", b"((1", b"nan", b"(nan", b"", b"1 ", b"( "] {
            assert_eq!(parse_score_bound(bad), Err(CommandError::MinMaxNotFloat));
        }
    }
}
