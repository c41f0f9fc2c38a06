//! Differential test: seeded random command sequences run against a real Redis 7
//! (`redis-server`, started by the test, installed with apt-get when missing) and against
//! `kavach serve`, in RESP2 and in RESP3, and every reply must be the same.
//!
//! # How it is built
//!
//! [`FAMILIES`] is a table of command generators per family (strings, keys/expiry, hashes,
//! lists, sets, sorted sets, MULTI/EXEC). [`ENABLED`] is the ONE list of families the test runs
//! against Kavach. It holds the families Kavach serves today: the `*-core` families are the
//! commands that `kavach serve` had before issue 18, in the forms it answers like Redis 7. When
//! a family's commands land, replace its `*-core` entry (or add it) with the full family:
//!
//! ```text
//! const ENABLED: &[&str] = &["strings", "keys", "hashes", "lists", "sets", "zsets", "multi"];
//! ```
//!
//! Every family in the table, enabled or not, is checked by
//! [`generators_agree_between_two_redis_servers`] (two real Redis servers must agree), so a
//! family that fails against Kavach once enabled shows a difference of Kavach, not of the
//! generator.
//!
//! # What is compared, and what is normalised
//!
//! Replies are parsed and compared as values (type and content: a RESP3 double is compared as
//! the text Redis sends). Only documented non-determinism is normalised:
//! - the order of unordered collections: SMEMBERS, SINTER, SUNION, SDIFF, KEYS, HKEYS, HVALS,
//!   HGETALL (pairs) are sorted before comparison;
//! - SCAN, HSCAN, SSCAN, ZSCAN cursors are opaque: a scan is run to the end on each server and
//!   the union of what it returned is compared (sorted);
//! - time: TTL and EXPIRETIME may differ by 1 s and PTTL and PEXPIRETIME by 1.5 s between the
//!   servers (they run the same command a few milliseconds apart). Every expiry is generous
//!   (at least 1000 s, or a time in the past, which deletes at once), so nothing expires while
//!   a sequence runs.
//!
//! Random commands (RANDOMKEY, SPOP, SRANDMEMBER, HRANDFIELD, ZRANDMEMBER), blocking commands,
//! pub/sub and OBJECT (encodings are Redis internals) are not generated.
//!
//! Each sequence runs on two connections per server (WATCH needs another client), starts with
//! FLUSHALL, and ends with a dump of every key (type, value, TTL) on both servers.
//!
//! # Seeds
//!
//! The default seeds are fixed. On a difference the test prints its seed; replay it with
//! `KAVACH_DIFF_SEED=<seed> cargo test -p kavach --test differential`. To explore, run
//! `KAVACH_DIFF_SEEDS=<how many> KAVACH_DIFF_STEPS=<commands per sequence>`: the extra seeds
//! start from a random base that is printed. `KAVACH_DIFF_FAMILIES=strings,lists` runs those
//! families instead of [`ENABLED`] (to try a family before enabling it).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Scratch, ensure_tool, free_port, spawn_serve};
use server::resp::{Limits, Reply, parse_reply};

/// The families run against Kavach (see the module's documentation: the lead extends this list
/// as families land).
const ENABLED: &[&str] = &[
    "strings", "keys", "hashes", "lists", "sets", "zsets", "multi",
];

/// Seeds run by default (each in RESP2 and in RESP3).
const SEEDS: &[u64] = &[1, 2, 3, 4, 5, 6, 7, 8];

/// Commands per sequence by default.
const STEPS: usize = 300;

// --- randomness ----------------------------------------------------------------------------------

/// SplitMix64: small, seedable, the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }

    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }
}

// --- what the generators draw from ---------------------------------------------------------------

/// A command as its words.
type Cmd = Vec<String>;

/// Absolute expiry times far in the future, fixed when the test starts (so both servers get the
/// same command).
struct Clock {
    far_s: i64,
}

struct Ctx<'a> {
    rng: &'a mut Rng,
    clock: &'a Clock,
}

impl Ctx<'_> {
    /// A key of `prefix`'s own small pool, or (sometimes) one shared by every family, so that
    /// kinds collide (WRONGTYPE) and multi-key commands meet the same keys.
    fn key(&mut self, prefix: &str) -> String {
        if self.rng.chance(15) {
            self.rng.pick(&["x", "y"]).to_string()
        } else {
            format!("{prefix}{}", self.rng.below(4))
        }
    }

    fn keys(&mut self, prefix: &str, most: usize) -> Vec<String> {
        let n = 1 + self.rng.below(most);
        (0..n).map(|_| self.key(prefix)).collect()
    }

    fn value(&mut self) -> String {
        self.rng
            .pick(&[
                "",
                "0",
                "1",
                "-1",
                "42",
                "3.5",
                "-0.25",
                "abc",
                "hello world",
                "9223372036854775807",
                "-9223372036854775808",
                "1e3",
                " 7",
                "x\0y",
                "\u{e9}t\u{e9}",
                "007",
            ])
            .to_string()
    }

    fn member(&mut self) -> String {
        self.rng
            .pick(&["m0", "m1", "m2", "m3", "m4", "m5", "", "a b", "\u{e9}"])
            .to_string()
    }

    fn field(&mut self) -> String {
        self.rng
            .pick(&["f0", "f1", "f2", "f3", "f4", "", "f 5"])
            .to_string()
    }

    fn int(&mut self, lo: i64, hi: i64) -> String {
        self.rng.int(lo, hi).to_string()
    }

    /// An integer argument, now and then one that is not an integer.
    fn int_or_bad(&mut self, lo: i64, hi: i64) -> String {
        if self.rng.chance(5) {
            self.rng
                .pick(&["abc", "1.5", "", "99999999999999999999"])
                .to_string()
        } else {
            self.int(lo, hi)
        }
    }

    fn score(&mut self) -> String {
        if self.rng.chance(3) {
            return self.rng.pick(&["nan", "abc", ""]).to_string();
        }
        self.rng
            .pick(&[
                "0", "1", "-1", "1.5", "-2.5", "+inf", "-inf", "3e2", "0.1", "10", "2", "1",
            ])
            .to_string()
    }

    /// A score whose shortest text is also its `%.17g` text (no 0.1): today's ZADD prints
    /// scores the short way, Redis 7.0 with 17 digits ("0.10000000000000001").
    fn score_exact(&mut self) -> String {
        if self.rng.chance(3) {
            return self.rng.pick(&["nan", "abc", ""]).to_string();
        }
        self.rng
            .pick(&[
                "0", "1", "-1", "1.5", "-2.5", "+inf", "-inf", "3e2", "10", "2",
            ])
            .to_string()
    }

    fn score_bound(&mut self) -> String {
        self.rng
            .pick(&[
                "-inf", "+inf", "(1", "1", "2.5", "(0", "-1", "10", "(10", "0", "inf", "abc",
            ])
            .to_string()
    }

    fn lex_bound(&mut self) -> String {
        self.rng
            .pick(&["-", "+", "[m1", "(m3", "[m5", "[a", "(m0", "[", "m1"])
            .to_string()
    }

    /// A relative expiry in seconds: generous, now and then zero, negative or not a number.
    fn seconds(&mut self) -> String {
        if self.rng.chance(8) {
            return self.rng.pick(&["0", "-5", "abc"]).to_string();
        }
        self.rng.pick(&["1000", "5000", "100000"]).to_string()
    }

    /// An absolute expiry in seconds, far in the future. SET takes only these: Redis 7.0 stores
    /// a SET whose deadline has passed and counts it in DBSIZE until its active expiry cycle
    /// removes it, so the count would depend on timing.
    fn unix_s_future(&mut self) -> String {
        (self.clock.far_s + self.rng.int(0, 1000)).to_string()
    }

    /// An absolute expiry in seconds: far in the future, or in the past (deletes at once).
    fn unix_s(&mut self) -> String {
        if self.rng.chance(15) {
            "1".to_string()
        } else {
            (self.clock.far_s + self.rng.int(0, 1000)).to_string()
        }
    }
}

fn cmd(words: &[&str]) -> Cmd {
    words.iter().map(|w| w.to_string()).collect()
}

fn with(mut c: Cmd, more: impl IntoIterator<Item = String>) -> Cmd {
    c.extend(more);
    c
}

// --- the generators, per family ------------------------------------------------------------------

/// One kind of command: its name (for reading the table) and how to make one.
struct Gen {
    name: &'static str,
    make: fn(&mut Ctx) -> Cmd,
}

macro_rules! g {
    ($name:expr, $make:expr) => {
        Gen {
            name: $name,
            make: $make,
        }
    };
}

/// The families: name, generators. `*-core` families are subsets (see [`ENABLED`]).
static FAMILIES: &[(&str, &[Gen])] = &[
    ("strings", STRINGS),
    ("strings-core", STRINGS_CORE),
    ("keys", KEYS),
    ("keys-core", KEYS_CORE),
    ("hashes", HASHES),
    ("hashes-core", HASHES_CORE),
    ("lists", LISTS),
    ("sets", SETS),
    ("zsets", ZSETS),
    ("zsets-core", ZSETS_CORE),
    ("multi", MULTI),
];

fn s_get(c: &mut Ctx) -> Cmd {
    with(cmd(&["GET"]), [c.key("s")])
}
fn s_set_plain(c: &mut Ctx) -> Cmd {
    with(cmd(&["SET"]), [c.key("s"), c.value()])
}
/// SET with the options today's Kavach answers like Redis (NX, XX, EX).
fn s_set_core(c: &mut Ctx) -> Cmd {
    let mut v = with(cmd(&["SET"]), [c.key("s"), c.value()]);
    if c.rng.chance(30) {
        v.push(c.rng.pick(&["NX", "XX"]).to_string());
    }
    if c.rng.chance(20) {
        v.push("EX".into());
        v.push(c.rng.pick(&["1000", "100000"]).to_string());
    }
    v
}
fn s_set_full(c: &mut Ctx) -> Cmd {
    let mut v = with(cmd(&["SET"]), [c.key("s"), c.value()]);
    for _ in 0..c.rng.below(3) {
        match c.rng.below(8) {
            0 => v.push("NX".into()),
            1 => v.push("XX".into()),
            2 => v.push("GET".into()),
            3 => v.push("KEEPTTL".into()),
            4 => v.extend(["EX".to_string(), c.seconds()]),
            5 => v.extend(["PX".to_string(), format!("{}000", c.seconds())]),
            6 => v.extend(["EXAT".to_string(), c.unix_s_future()]),
            _ => v.extend(["PXAT".to_string(), format!("{}000", c.unix_s_future())]),
        }
    }
    v
}
fn s_mget(c: &mut Ctx) -> Cmd {
    with(cmd(&["MGET"]), c.keys("s", 4))
}
fn s_mset(c: &mut Ctx) -> Cmd {
    let mut v = cmd(&["MSET"]);
    for _ in 0..1 + c.rng.below(3) {
        v.push(c.key("s"));
        v.push(c.value());
    }
    if c.rng.chance(3) {
        v.pop();
    }
    v
}
fn s_msetnx(c: &mut Ctx) -> Cmd {
    let mut v = s_mset(c);
    v[0] = "MSETNX".into();
    v
}
fn s_incr(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["INCR", "DECR"]);
    with(cmd(&[name]), [c.key("s")])
}
fn s_incrby(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["INCRBY", "DECRBY"]);
    let by = if c.rng.chance(5) {
        c.rng
            .pick(&["9223372036854775807", "-9223372036854775808"])
            .to_string()
    } else {
        c.int_or_bad(-100, 100)
    };
    with(cmd(&[name]), [c.key("s"), by])
}
fn s_incrbyfloat(c: &mut Ctx) -> Cmd {
    let by = c
        .rng
        .pick(&["1.5", "-0.25", "10", "1e3", "abc", "inf", "0.1", "-7"]);
    with(cmd(&["INCRBYFLOAT"]), [c.key("s"), by.to_string()])
}
fn s_append(c: &mut Ctx) -> Cmd {
    with(cmd(&["APPEND"]), [c.key("s"), c.value()])
}
fn s_strlen(c: &mut Ctx) -> Cmd {
    with(cmd(&["STRLEN"]), [c.key("s")])
}
fn s_getset(c: &mut Ctx) -> Cmd {
    with(cmd(&["GETSET"]), [c.key("s"), c.value()])
}
fn s_getdel(c: &mut Ctx) -> Cmd {
    with(cmd(&["GETDEL"]), [c.key("s")])
}
fn s_getex(c: &mut Ctx) -> Cmd {
    let mut v = with(cmd(&["GETEX"]), [c.key("s")]);
    match c.rng.below(6) {
        0 => {}
        1 => v.extend(["EX".to_string(), c.seconds()]),
        2 => v.extend(["PX".to_string(), format!("{}000", c.seconds())]),
        3 => v.extend(["EXAT".to_string(), c.unix_s()]),
        4 => v.extend(["PXAT".to_string(), format!("{}000", c.unix_s())]),
        _ => v.push("PERSIST".into()),
    }
    v
}
fn s_setnx(c: &mut Ctx) -> Cmd {
    with(cmd(&["SETNX"]), [c.key("s"), c.value()])
}
fn s_setex(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["SETEX", "PSETEX"]);
    let t = c.seconds();
    let t = if name == "PSETEX" {
        format!("{t}000")
    } else {
        t
    };
    with(cmd(&[name]), [c.key("s"), t, c.value()])
}
fn s_getrange(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["GETRANGE", "SUBSTR"]);
    with(
        cmd(&[name]),
        [c.key("s"), c.int_or_bad(-12, 12), c.int_or_bad(-12, 12)],
    )
}
fn s_setrange(c: &mut Ctx) -> Cmd {
    with(
        cmd(&["SETRANGE"]),
        [c.key("s"), c.int_or_bad(-1, 30), c.value()],
    )
}
fn s_lcs(c: &mut Ctx) -> Cmd {
    let mut v = with(cmd(&["LCS"]), [c.key("s"), c.key("s")]);
    match c.rng.below(4) {
        0 => {}
        1 => v.push("LEN".into()),
        2 => v.push("IDX".into()),
        _ => v.extend(
            ["IDX", "MINMATCHLEN", "1", "WITHMATCHLEN"]
                .iter()
                .map(|s| s.to_string()),
        ),
    }
    v
}
fn s_setbit(c: &mut Ctx) -> Cmd {
    let bit = c.rng.pick(&["0", "1", "1", "2"]);
    with(
        cmd(&["SETBIT"]),
        [c.key("s"), c.int_or_bad(0, 100), bit.to_string()],
    )
}
fn s_getbit(c: &mut Ctx) -> Cmd {
    with(cmd(&["GETBIT"]), [c.key("s"), c.int_or_bad(0, 100)])
}
fn s_bitcount(c: &mut Ctx) -> Cmd {
    let mut v = with(cmd(&["BITCOUNT"]), [c.key("s")]);
    if c.rng.chance(60) {
        v.extend([c.int(-10, 10), c.int(-10, 10)]);
        if c.rng.chance(40) {
            v.push(c.rng.pick(&["BYTE", "BIT"]).to_string());
        }
    }
    v
}
fn s_bitpos(c: &mut Ctx) -> Cmd {
    let mut v = with(
        cmd(&["BITPOS"]),
        [c.key("s"), c.rng.pick(&["0", "1"]).to_string()],
    );
    for _ in 0..c.rng.below(3) {
        v.push(c.int(-10, 10));
    }
    if v.len() == 5 && c.rng.chance(40) {
        v.push(c.rng.pick(&["BYTE", "BIT"]).to_string());
    }
    v
}
fn s_bitop(c: &mut Ctx) -> Cmd {
    let op = c.rng.pick(&["AND", "OR", "XOR", "NOT"]);
    let srcs = if op == "NOT" {
        vec![c.key("s")]
    } else {
        c.keys("s", 3)
    };
    with(cmd(&["BITOP", op]), std::iter::once(c.key("s")).chain(srcs))
}

static STRINGS: &[Gen] = &[
    g!("GET", s_get),
    g!("SET", s_set_full),
    g!("MGET", s_mget),
    g!("MSET", s_mset),
    g!("MSETNX", s_msetnx),
    g!("INCR DECR", s_incr),
    g!("INCRBY DECRBY", s_incrby),
    g!("INCRBYFLOAT", s_incrbyfloat),
    g!("APPEND", s_append),
    g!("STRLEN", s_strlen),
    g!("GETSET", s_getset),
    g!("GETDEL", s_getdel),
    g!("GETEX", s_getex),
    g!("SETNX", s_setnx),
    g!("SETEX PSETEX", s_setex),
    g!("GETRANGE SUBSTR", s_getrange),
    g!("SETRANGE", s_setrange),
    g!("LCS", s_lcs),
    g!("SETBIT", s_setbit),
    g!("GETBIT", s_getbit),
    g!("BITCOUNT", s_bitcount),
    g!("BITPOS", s_bitpos),
    g!("BITOP", s_bitop),
];

static STRINGS_CORE: &[Gen] = &[
    g!("GET", s_get),
    g!("SET", s_set_plain),
    g!("SET NX XX EX", s_set_core),
    g!("MGET", s_mget),
    g!("MSET", s_mset),
    g!("INCR DECR", s_incr),
    g!("INCRBY DECRBY", s_incrby),
    g!("APPEND", s_append),
    g!("STRLEN", s_strlen),
];

fn k_del(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["DEL", "UNLINK"]);
    with(cmd(&[name]), c.keys("k", 3))
}
fn k_del_core(c: &mut Ctx) -> Cmd {
    let prefix = c.rng.pick(&["s", "h", "z", "k"]);
    with(cmd(&["DEL"]), c.keys(prefix, 3))
}
fn k_exists(c: &mut Ctx) -> Cmd {
    let prefix = c.rng.pick(&["s", "h", "z", "l", "t", "k"]);
    with(cmd(&["EXISTS"]), c.keys(prefix, 3))
}
fn k_type(c: &mut Ctx) -> Cmd {
    let prefix = c.rng.pick(&["s", "h", "z", "l", "t", "k"]);
    with(cmd(&["TYPE"]), [c.key(prefix)])
}
fn k_dbsize(_: &mut Ctx) -> Cmd {
    cmd(&["DBSIZE"])
}
fn k_scan(c: &mut Ctx) -> Cmd {
    let mut v = cmd(&["SCAN", "0"]);
    if c.rng.chance(50) {
        v.extend([
            "MATCH".to_string(),
            c.rng.pick(&["*", "s*", "x", "h?", "[sz]*"]).into(),
        ]);
    }
    if c.rng.chance(50) {
        v.extend(["COUNT".to_string(), c.int(1, 20)]);
    }
    v
}
fn k_scan_type(c: &mut Ctx) -> Cmd {
    let mut v = k_scan(c);
    v.extend([
        "TYPE".to_string(),
        c.rng
            .pick(&["string", "hash", "zset", "list", "set", "nosuchtype"])
            .into(),
    ]);
    v
}
fn k_rename(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["RENAME", "RENAMENX"]);
    let prefix = c.rng.pick(&["s", "h", "z", "l", "t", "k"]);
    with(cmd(&[name]), [c.key(prefix), c.key(prefix)])
}
fn k_copy(c: &mut Ctx) -> Cmd {
    let prefix = c.rng.pick(&["s", "h", "z", "l", "t", "k"]);
    let mut v = with(cmd(&["COPY"]), [c.key(prefix), c.key(prefix)]);
    if c.rng.chance(30) {
        v.extend(["DB".to_string(), c.int(0, 3)]);
    }
    if c.rng.chance(40) {
        v.push("REPLACE".into());
    }
    v
}
fn k_keys(c: &mut Ctx) -> Cmd {
    with(
        cmd(&["KEYS"]),
        [c.rng
            .pick(&["*", "s*", "?", "[a-z]0", "x*", "*1"])
            .to_string()],
    )
}
fn k_touch(c: &mut Ctx) -> Cmd {
    with(cmd(&["TOUCH"]), c.keys("k", 3))
}
fn k_expire(c: &mut Ctx) -> Cmd {
    let prefix = c.rng.pick(&["s", "h", "z", "l", "t", "k"]);
    let key = c.key(prefix);
    let mut v = match c.rng.below(4) {
        0 => with(cmd(&["EXPIRE"]), [key, c.seconds()]),
        1 => with(cmd(&["PEXPIRE"]), [key, format!("{}000", c.seconds())]),
        2 => with(cmd(&["EXPIREAT"]), [key, c.unix_s()]),
        _ => with(cmd(&["PEXPIREAT"]), [key, format!("{}000", c.unix_s())]),
    };
    if c.rng.chance(30) {
        v.push(c.rng.pick(&["NX", "XX", "GT", "LT", "NX"]).to_string());
    }
    v
}
fn k_ttl(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"]);
    let prefix = c.rng.pick(&["s", "h", "z", "l", "t", "k"]);
    with(cmd(&[name]), [c.key(prefix)])
}
fn k_persist(c: &mut Ctx) -> Cmd {
    let prefix = c.rng.pick(&["s", "h", "z", "l", "t", "k"]);
    with(cmd(&["PERSIST"]), [c.key(prefix)])
}
fn k_select(c: &mut Ctx) -> Cmd {
    let db = if c.rng.chance(5) {
        c.rng.pick(&["16", "-1", "x"]).to_string()
    } else {
        c.int(0, 3)
    };
    with(cmd(&["SELECT"]), [db])
}
fn k_swapdb(c: &mut Ctx) -> Cmd {
    with(cmd(&["SWAPDB"]), [c.int(0, 3), c.int(0, 3)])
}
fn k_move(c: &mut Ctx) -> Cmd {
    let prefix = c.rng.pick(&["s", "h", "z", "l", "t", "k"]);
    with(cmd(&["MOVE"]), [c.key(prefix), c.int(0, 3)])
}
fn k_flushdb(c: &mut Ctx) -> Cmd {
    // Rare: it empties the database the sequence is building.
    if c.rng.chance(20) {
        cmd(&["FLUSHDB"])
    } else {
        cmd(&["DBSIZE"])
    }
}
fn k_set(c: &mut Ctx) -> Cmd {
    // Keys of the keys family hold strings (the other families' keys meet them through the
    // shared names and the prefixes the keys commands draw from).
    with(cmd(&["SET"]), [c.key("k"), c.value()])
}

static KEYS: &[Gen] = &[
    g!("SET (keys of this family)", k_set),
    g!("DEL UNLINK", k_del),
    g!("EXISTS", k_exists),
    g!("TYPE", k_type),
    g!("DBSIZE", k_dbsize),
    g!("SCAN", k_scan),
    g!("SCAN TYPE", k_scan_type),
    g!("RENAME RENAMENX", k_rename),
    g!("COPY", k_copy),
    g!("KEYS", k_keys),
    g!("TOUCH", k_touch),
    g!("EXPIRE PEXPIRE EXPIREAT PEXPIREAT", k_expire),
    g!("TTL PTTL EXPIRETIME PEXPIRETIME", k_ttl),
    g!("PERSIST", k_persist),
    g!("SELECT", k_select),
    g!("SWAPDB", k_swapdb),
    g!("MOVE", k_move),
    g!("FLUSHDB", k_flushdb),
];

static KEYS_CORE: &[Gen] = &[
    g!("SET (keys of this family)", k_set),
    g!("DEL", k_del_core),
    g!("EXISTS", k_exists),
    g!("TYPE", k_type),
    g!("DBSIZE", k_dbsize),
    g!("SCAN", k_scan),
    g!("SCAN TYPE", k_scan_type),
];

fn h_set(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["HSET", "HMSET"]);
    let mut v = with(cmd(&[name]), [c.key("h")]);
    for _ in 0..1 + c.rng.below(3) {
        v.push(c.field());
        v.push(c.value());
    }
    if c.rng.chance(3) {
        v.pop();
    }
    v
}
fn h_get(c: &mut Ctx) -> Cmd {
    with(cmd(&["HGET"]), [c.key("h"), c.field()])
}
fn h_mget(c: &mut Ctx) -> Cmd {
    let mut v = with(cmd(&["HMGET"]), [c.key("h")]);
    for _ in 0..1 + c.rng.below(3) {
        v.push(c.field());
    }
    v
}
fn h_getall(c: &mut Ctx) -> Cmd {
    with(cmd(&["HGETALL"]), [c.key("h")])
}
fn h_del(c: &mut Ctx) -> Cmd {
    let mut v = with(cmd(&["HDEL"]), [c.key("h")]);
    for _ in 0..1 + c.rng.below(2) {
        v.push(c.field());
    }
    v
}
fn h_setnx(c: &mut Ctx) -> Cmd {
    with(cmd(&["HSETNX"]), [c.key("h"), c.field(), c.value()])
}
fn h_field_cmd(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["HEXISTS", "HSTRLEN"]);
    with(cmd(&[name]), [c.key("h"), c.field()])
}
fn h_key_cmd(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["HLEN", "HKEYS", "HVALS"]);
    with(cmd(&[name]), [c.key("h")])
}
fn h_incrby(c: &mut Ctx) -> Cmd {
    with(
        cmd(&["HINCRBY"]),
        [c.key("h"), c.field(), c.int_or_bad(-50, 50)],
    )
}
fn h_incrbyfloat(c: &mut Ctx) -> Cmd {
    let by = c.rng.pick(&["1.5", "-0.25", "10", "abc", "2e2"]);
    with(
        cmd(&["HINCRBYFLOAT"]),
        [c.key("h"), c.field(), by.to_string()],
    )
}
fn h_scan(c: &mut Ctx) -> Cmd {
    let mut v = with(cmd(&["HSCAN"]), [c.key("h"), "0".to_string()]);
    if c.rng.chance(40) {
        v.extend([
            "MATCH".to_string(),
            c.rng.pick(&["*", "f*", "f[0-2]"]).into(),
        ]);
    }
    if c.rng.chance(40) {
        v.extend(["COUNT".to_string(), c.int(1, 10)]);
    }
    v
}

static HASHES: &[Gen] = &[
    g!("HSET HMSET", h_set),
    g!("HGET", h_get),
    g!("HMGET", h_mget),
    g!("HGETALL", h_getall),
    g!("HDEL", h_del),
    g!("HSETNX", h_setnx),
    g!("HEXISTS HSTRLEN", h_field_cmd),
    g!("HLEN HKEYS HVALS", h_key_cmd),
    g!("HINCRBY", h_incrby),
    g!("HINCRBYFLOAT", h_incrbyfloat),
    g!("HSCAN", h_scan),
];

static HASHES_CORE: &[Gen] = &[
    g!("HSET HMSET", h_set),
    g!("HGET", h_get),
    g!("HMGET", h_mget),
    g!("HGETALL", h_getall),
    g!("HDEL", h_del),
];

fn l_push(c: &mut Ctx) -> Cmd {
    let name = c
        .rng
        .pick(&["LPUSH", "RPUSH", "LPUSH", "RPUSH", "LPUSHX", "RPUSHX"]);
    let mut v = with(cmd(&[name]), [c.key("l")]);
    for _ in 0..1 + c.rng.below(3) {
        v.push(c.member());
    }
    v
}
fn l_pop(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["LPOP", "RPOP"]);
    let mut v = with(cmd(&[name]), [c.key("l")]);
    if c.rng.chance(40) {
        v.push(c.int_or_bad(-1, 4));
    }
    v
}
fn l_len(c: &mut Ctx) -> Cmd {
    with(cmd(&["LLEN"]), [c.key("l")])
}
fn l_range(c: &mut Ctx) -> Cmd {
    with(
        cmd(&["LRANGE"]),
        [c.key("l"), c.int_or_bad(-6, 6), c.int_or_bad(-6, 6)],
    )
}
fn l_index(c: &mut Ctx) -> Cmd {
    with(cmd(&["LINDEX"]), [c.key("l"), c.int_or_bad(-6, 6)])
}
fn l_set(c: &mut Ctx) -> Cmd {
    with(
        cmd(&["LSET"]),
        [c.key("l"), c.int_or_bad(-6, 6), c.member()],
    )
}
fn l_rem(c: &mut Ctx) -> Cmd {
    with(
        cmd(&["LREM"]),
        [c.key("l"), c.int_or_bad(-2, 2), c.member()],
    )
}
fn l_trim(c: &mut Ctx) -> Cmd {
    with(
        cmd(&["LTRIM"]),
        [c.key("l"), c.int_or_bad(-6, 6), c.int_or_bad(-6, 6)],
    )
}
fn l_insert(c: &mut Ctx) -> Cmd {
    let wh = c.rng.pick(&["BEFORE", "AFTER", "before", "MIDDLE"]);
    with(
        cmd(&["LINSERT"]),
        [c.key("l"), wh.to_string(), c.member(), c.member()],
    )
}
fn l_pos(c: &mut Ctx) -> Cmd {
    let mut v = with(cmd(&["LPOS"]), [c.key("l"), c.member()]);
    for _ in 0..c.rng.below(3) {
        match c.rng.below(3) {
            0 => v.extend([
                "RANK".to_string(),
                c.rng.pick(&["1", "-1", "2", "0", "-2"]).into(),
            ]),
            1 => v.extend(["COUNT".to_string(), c.int(0, 3)]),
            _ => v.extend(["MAXLEN".to_string(), c.int(0, 4)]),
        }
    }
    v
}
fn l_move(c: &mut Ctx) -> Cmd {
    if c.rng.chance(30) {
        return with(cmd(&["RPOPLPUSH"]), [c.key("l"), c.key("l")]);
    }
    let from = c.rng.pick(&["LEFT", "RIGHT"]);
    let to = c.rng.pick(&["LEFT", "RIGHT", "UP"]);
    with(
        cmd(&["LMOVE"]),
        [c.key("l"), c.key("l"), from.to_string(), to.to_string()],
    )
}
fn l_mpop(c: &mut Ctx) -> Cmd {
    let keys = c.keys("l", 3);
    let mut v = with(cmd(&["LMPOP", &keys.len().to_string()]), keys);
    v.push(c.rng.pick(&["LEFT", "RIGHT"]).to_string());
    if c.rng.chance(50) {
        v.extend(["COUNT".to_string(), c.int_or_bad(0, 4)]);
    }
    v
}

static LISTS: &[Gen] = &[
    g!("LPUSH RPUSH LPUSHX RPUSHX", l_push),
    g!("LPOP RPOP", l_pop),
    g!("LLEN", l_len),
    g!("LRANGE", l_range),
    g!("LINDEX", l_index),
    g!("LSET", l_set),
    g!("LREM", l_rem),
    g!("LTRIM", l_trim),
    g!("LINSERT", l_insert),
    g!("LPOS", l_pos),
    g!("LMOVE RPOPLPUSH", l_move),
    g!("LMPOP", l_mpop),
];

fn t_add(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["SADD", "SADD", "SREM"]);
    let mut v = with(cmd(&[name]), [c.key("t")]);
    for _ in 0..1 + c.rng.below(3) {
        v.push(c.member());
    }
    v
}
fn t_one(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["SMEMBERS", "SCARD"]);
    with(cmd(&[name]), [c.key("t")])
}
fn t_ismember(c: &mut Ctx) -> Cmd {
    if c.rng.chance(50) {
        with(cmd(&["SISMEMBER"]), [c.key("t"), c.member()])
    } else {
        with(cmd(&["SMISMEMBER"]), [c.key("t"), c.member(), c.member()])
    }
}
fn t_move(c: &mut Ctx) -> Cmd {
    with(cmd(&["SMOVE"]), [c.key("t"), c.key("t"), c.member()])
}
fn t_algebra(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["SINTER", "SUNION", "SDIFF"]);
    with(cmd(&[name]), c.keys("t", 3))
}
fn t_store(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]);
    with(
        cmd(&[name]),
        std::iter::once(c.key("t")).chain(c.keys("t", 3)),
    )
}
fn t_intercard(c: &mut Ctx) -> Cmd {
    let keys = c.keys("t", 3);
    let mut v = with(cmd(&["SINTERCARD", &keys.len().to_string()]), keys);
    if c.rng.chance(40) {
        v.extend(["LIMIT".to_string(), c.int_or_bad(0, 3)]);
    }
    v
}
fn t_scan(c: &mut Ctx) -> Cmd {
    let mut v = with(cmd(&["SSCAN"]), [c.key("t"), "0".to_string()]);
    if c.rng.chance(40) {
        v.extend([
            "MATCH".to_string(),
            c.rng.pick(&["*", "m*", "m[0-2]"]).into(),
        ]);
    }
    if c.rng.chance(40) {
        v.extend(["COUNT".to_string(), c.int(1, 10)]);
    }
    v
}

static SETS: &[Gen] = &[
    g!("SADD SREM", t_add),
    g!("SMEMBERS SCARD", t_one),
    g!("SISMEMBER SMISMEMBER", t_ismember),
    g!("SMOVE", t_move),
    g!("SINTER SUNION SDIFF", t_algebra),
    g!("SINTERSTORE SUNIONSTORE SDIFFSTORE", t_store),
    g!("SINTERCARD", t_intercard),
    g!("SSCAN", t_scan),
];

fn z_add(c: &mut Ctx) -> Cmd {
    let mut v = with(cmd(&["ZADD"]), [c.key("z")]);
    for _ in 0..c.rng.below(3) {
        v.push(
            c.rng
                .pick(&["NX", "XX", "GT", "LT", "CH", "INCR"])
                .to_string(),
        );
    }
    for _ in 0..1 + c.rng.below(3) {
        v.push(c.score());
        v.push(c.member());
    }
    v
}
fn z_add_core(c: &mut Ctx) -> Cmd {
    let mut v = with(cmd(&["ZADD"]), [c.key("z")]);
    for _ in 0..1 + c.rng.below(3) {
        v.push(c.score_exact());
        v.push(c.member());
    }
    v
}
fn z_incrby(c: &mut Ctx) -> Cmd {
    with(cmd(&["ZINCRBY"]), [c.key("z"), c.score(), c.member()])
}
fn z_score(c: &mut Ctx) -> Cmd {
    if c.rng.chance(50) {
        with(cmd(&["ZSCORE"]), [c.key("z"), c.member()])
    } else {
        with(cmd(&["ZMSCORE"]), [c.key("z"), c.member(), c.member()])
    }
}
fn z_rank(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["ZRANK", "ZREVRANK"]);
    with(cmd(&[name]), [c.key("z"), c.member()])
}
fn z_card(c: &mut Ctx) -> Cmd {
    with(cmd(&["ZCARD"]), [c.key("z")])
}
fn z_count(c: &mut Ctx) -> Cmd {
    if c.rng.chance(50) {
        with(
            cmd(&["ZCOUNT"]),
            [c.key("z"), c.score_bound(), c.score_bound()],
        )
    } else {
        with(
            cmd(&["ZLEXCOUNT"]),
            [c.key("z"), c.lex_bound(), c.lex_bound()],
        )
    }
}
fn z_limit(c: &mut Ctx, v: &mut Cmd) {
    if c.rng.chance(30) {
        v.extend(["LIMIT".to_string(), c.int(-1, 3), c.int(-1, 4)]);
    }
}
fn z_range(c: &mut Ctx) -> Cmd {
    let mut v = with(cmd(&["ZRANGE"]), [c.key("z")]);
    match c.rng.below(3) {
        0 => {
            v.extend([c.int_or_bad(-5, 5), c.int_or_bad(-5, 5)]);
        }
        1 => {
            v.extend([c.score_bound(), c.score_bound(), "BYSCORE".to_string()]);
        }
        _ => {
            v.extend([c.lex_bound(), c.lex_bound(), "BYLEX".to_string()]);
        }
    }
    if c.rng.chance(30) {
        v.push("REV".into());
    }
    z_limit(c, &mut v);
    if c.rng.chance(40) {
        v.push("WITHSCORES".into());
    }
    v
}
fn z_rangestore(c: &mut Ctx) -> Cmd {
    let mut v = with(cmd(&["ZRANGESTORE"]), [c.key("z"), c.key("z")]);
    if c.rng.chance(50) {
        v.extend([c.int(-5, 5), c.int(-5, 5)]);
    } else {
        v.extend([c.score_bound(), c.score_bound(), "BYSCORE".to_string()]);
    }
    if c.rng.chance(30) {
        v.push("REV".into());
    }
    v
}
fn z_old_range(c: &mut Ctx) -> Cmd {
    let key = c.key("z");
    let mut v = match c.rng.below(5) {
        0 => with(
            cmd(&["ZREVRANGE"]),
            [key, c.int_or_bad(-5, 5), c.int_or_bad(-5, 5)],
        ),
        1 => with(
            cmd(&["ZREVRANGEBYSCORE"]),
            [key, c.score_bound(), c.score_bound()],
        ),
        2 => with(cmd(&["ZRANGEBYLEX"]), [key, c.lex_bound(), c.lex_bound()]),
        3 => with(
            cmd(&["ZREVRANGEBYLEX"]),
            [key, c.lex_bound(), c.lex_bound()],
        ),
        _ => with(
            cmd(&["ZRANGEBYSCORE"]),
            [key, c.score_bound(), c.score_bound()],
        ),
    };
    let lex = v[0].ends_with("LEX");
    if !lex && v[0] != "ZREVRANGE" && c.rng.chance(40) {
        v.push("WITHSCORES".into());
    }
    if v[0] != "ZREVRANGE" {
        z_limit(c, &mut v);
    } else if c.rng.chance(40) {
        v.push("WITHSCORES".into());
    }
    v
}
fn z_rangebyscore_core(c: &mut Ctx) -> Cmd {
    let mut v = with(
        cmd(&["ZRANGEBYSCORE"]),
        [c.key("z"), c.score_bound(), c.score_bound()],
    );
    if c.rng.chance(40) {
        v.push("WITHSCORES".into());
    }
    if c.rng.chance(30) {
        v.extend(["LIMIT".to_string(), c.int(0, 3), c.int(-1, 4)]);
    }
    v
}
fn z_rem(c: &mut Ctx) -> Cmd {
    let mut v = with(cmd(&["ZREM"]), [c.key("z")]);
    for _ in 0..1 + c.rng.below(2) {
        v.push(c.member());
    }
    v
}
fn z_remrange(c: &mut Ctx) -> Cmd {
    let key = c.key("z");
    match c.rng.below(3) {
        0 => with(
            cmd(&["ZREMRANGEBYRANK"]),
            [key, c.int_or_bad(-4, 4), c.int_or_bad(-4, 4)],
        ),
        1 => with(
            cmd(&["ZREMRANGEBYSCORE"]),
            [key, c.score_bound(), c.score_bound()],
        ),
        _ => with(
            cmd(&["ZREMRANGEBYLEX"]),
            [key, c.lex_bound(), c.lex_bound()],
        ),
    }
}
fn z_pop(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["ZPOPMIN", "ZPOPMAX"]);
    let mut v = with(cmd(&[name]), [c.key("z")]);
    if c.rng.chance(40) {
        v.push(c.int_or_bad(-1, 3));
    }
    v
}
fn z_setop_args(c: &mut Ctx, v: &mut Cmd, store: bool) {
    let keys = c.keys("z", 3);
    let n = keys.len();
    v.push(n.to_string());
    v.extend(keys);
    let diff = v[0].starts_with("ZDIFF");
    if !diff && c.rng.chance(30) {
        v.push("WEIGHTS".into());
        for _ in 0..n {
            v.push(c.rng.pick(&["1", "2", "0.5", "-1", "0"]).to_string());
        }
    }
    if !diff && c.rng.chance(30) {
        v.extend([
            "AGGREGATE".to_string(),
            c.rng.pick(&["SUM", "MIN", "MAX"]).into(),
        ]);
    }
    if !store && c.rng.chance(50) {
        v.push("WITHSCORES".into());
    }
}
fn z_setop(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["ZUNION", "ZINTER", "ZDIFF"]);
    let mut v = cmd(&[name]);
    z_setop_args(c, &mut v, false);
    v
}
fn z_setop_store(c: &mut Ctx) -> Cmd {
    let name = c.rng.pick(&["ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"]);
    let mut v = with(cmd(&[name]), [c.key("z")]);
    z_setop_args(c, &mut v, true);
    v
}
fn z_scan(c: &mut Ctx) -> Cmd {
    let mut v = with(cmd(&["ZSCAN"]), [c.key("z"), "0".to_string()]);
    if c.rng.chance(40) {
        v.extend([
            "MATCH".to_string(),
            c.rng.pick(&["*", "m*", "m[0-2]"]).into(),
        ]);
    }
    if c.rng.chance(40) {
        v.extend(["COUNT".to_string(), c.int(1, 10)]);
    }
    v
}

static ZSETS: &[Gen] = &[
    g!("ZADD", z_add),
    g!("ZINCRBY", z_incrby),
    g!("ZSCORE ZMSCORE", z_score),
    g!("ZRANK ZREVRANK", z_rank),
    g!("ZCARD", z_card),
    g!("ZCOUNT ZLEXCOUNT", z_count),
    g!("ZRANGE", z_range),
    g!("ZRANGESTORE", z_rangestore),
    g!(
        "ZREVRANGE ZRANGEBYSCORE ZREVRANGEBYSCORE ZRANGEBYLEX ZREVRANGEBYLEX",
        z_old_range
    ),
    g!("ZREM", z_rem),
    g!(
        "ZREMRANGEBYRANK ZREMRANGEBYSCORE ZREMRANGEBYLEX",
        z_remrange
    ),
    g!("ZPOPMIN ZPOPMAX", z_pop),
    g!("ZUNION ZINTER ZDIFF", z_setop),
    g!("ZUNIONSTORE ZINTERSTORE ZDIFFSTORE", z_setop_store),
    g!("ZSCAN", z_scan),
];

static ZSETS_CORE: &[Gen] = &[
    g!("ZADD", z_add_core),
    g!("ZRANGEBYSCORE", z_rangebyscore_core),
    g!("ZREM", z_rem),
];

fn m_multi(_: &mut Ctx) -> Cmd {
    cmd(&["MULTI"])
}
fn m_end(c: &mut Ctx) -> Cmd {
    cmd(&[c.rng.pick(&["EXEC", "EXEC", "DISCARD"])])
}
fn m_watch(c: &mut Ctx) -> Cmd {
    if c.rng.chance(25) {
        return cmd(&["UNWATCH"]);
    }
    let prefix = c.rng.pick(&["s", "h", "z", "l", "t", "k"]);
    with(cmd(&["WATCH"]), c.keys(prefix, 2))
}

static MULTI: &[Gen] = &[
    g!("MULTI", m_multi),
    g!("EXEC DISCARD", m_end),
    g!("WATCH UNWATCH", m_watch),
];

// --- servers and connections ---------------------------------------------------------------------

/// A child process killed when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis(dir: &Path) -> (Running, u16) {
    ensure_tool("redis-server", "redis-server");
    let port = free_port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
    let running = Running(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    (running, port)
}

fn start_kavach(dir: &str) -> (Running, u16) {
    let (child, port, _) = spawn_serve(
        dir,
        &["--shards", "4", "--log-mib", "4", "--slot-mib", "16"],
    );
    (Running(child), port)
}

/// A raw RESP connection.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(port: u16, resp3: bool) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        let mut c = Conn {
            stream,
            buf: Vec::new(),
        };
        if resp3 {
            let hello = c.call(&cmd(&["HELLO", "3"]));
            assert!(matches!(hello, Reply::Map(_)), "HELLO 3: {hello:?}");
        }
        c
    }

    fn call(&mut self, args: &[String]) -> Reply {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        self.stream.write_all(&out).expect("send a command");
        loop {
            match parse_reply(&self.buf, &Limits::default()) {
                Ok(Some((reply, used))) => {
                    self.buf.drain(..used);
                    return reply;
                }
                Ok(None) => {}
                Err(e) => panic!("malformed reply to {args:?}: {e:?}"),
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = match self.stream.read(&mut chunk) {
                Ok(n) => n,
                Err(e) => panic!("no reply to {args:?}: {e}"),
            };
            assert!(
                n > 0,
                "connection closed while waiting for a reply to {args:?}"
            );
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

// --- normalisation -------------------------------------------------------------------------------

fn upper(s: &str) -> String {
    s.to_ascii_uppercase()
}

/// Sort key of a reply (its RESP3 encoding).
fn sort_key(r: &Reply) -> Vec<u8> {
    let mut out = Vec::new();
    r.encode_as(&mut out, true);
    out
}

/// The reply to `args` with documented non-determinism removed (see the module documentation).
/// Scans are not here: they are run to the end by [`run_command`].
fn normalise(args: &[String], reply: Reply) -> Reply {
    let name = upper(&args[0]);
    match (name.as_str(), reply) {
        ("SMEMBERS" | "SINTER" | "SUNION" | "SDIFF" | "KEYS" | "HKEYS" | "HVALS", r) => match r {
            Reply::Array(mut items) => {
                items.sort_by_key(sort_key);
                Reply::Array(items)
            }
            Reply::Set(mut items) => {
                items.sort_by_key(sort_key);
                Reply::Set(items)
            }
            other => other,
        },
        ("HGETALL", Reply::Map(mut pairs)) => {
            pairs.sort_by_key(|(k, _)| sort_key(k));
            Reply::Map(pairs)
        }
        ("HGETALL", Reply::Array(items)) if items.len() % 2 == 0 => {
            let mut pairs: Vec<Vec<Reply>> = items.chunks(2).map(<[Reply]>::to_vec).collect();
            pairs.sort_by_key(|p| sort_key(&p[0]));
            Reply::Array(pairs.concat())
        }
        (_, r) => r,
    }
}

/// An EXEC reply with each command's reply normalised as that command's own would be.
fn normalise_exec(queued: Option<&[Cmd]>, reply: Reply) -> Reply {
    match (queued, reply) {
        (Some(cmds), Reply::Array(items)) if cmds.len() == items.len() => Reply::Array(
            cmds.iter()
                .zip(items)
                .map(|(c, r)| normalise(c, r))
                .collect(),
        ),
        (_, reply) => reply,
    }
}

/// Allowed difference between the two servers' integer replies to `name` (time moves on).
fn time_tolerance(name: &str) -> i64 {
    match name {
        "TTL" | "EXPIRETIME" => 1,
        "PTTL" | "PEXPIRETIME" => 1500,
        _ => 0,
    }
}

/// Whether two normalised replies to `args` agree; `queued` are the commands an EXEC ran.
fn agree(args: &[String], queued: Option<&[Cmd]>, a: &Reply, b: &Reply) -> bool {
    let name = upper(&args[0]);
    match (a, b) {
        (Reply::Integer(x), Reply::Integer(y)) if *x > 0 && *y > 0 => {
            (x - y).abs() <= time_tolerance(&name)
        }
        (Reply::Array(xs), Reply::Array(ys)) if name == "EXEC" => match queued {
            Some(cmds) if cmds.len() == xs.len() && xs.len() == ys.len() => cmds
                .iter()
                .zip(xs.iter().zip(ys))
                .all(|(c, (x, y))| agree(c, None, x, y)),
            _ => a == b,
        },
        _ => a == b,
    }
}

// --- running a sequence --------------------------------------------------------------------------

/// A server under test: its two connections and what each has queued in MULTI.
struct Side {
    conns: [Conn; 2],
}

/// What one connection is doing: outside MULTI, or queueing (the commands its server accepted).
#[derive(Clone, Default)]
struct TxState {
    queued: Option<Vec<Cmd>>,
}

/// Runs `args` on connection `c` of `side`, returning the normalised reply. A scan command is
/// run to the end (cursor by cursor) and its reply is everything it returned, sorted.
fn run_command(side: &mut Side, c: usize, args: &Cmd, in_multi: bool) -> Reply {
    let name = upper(&args[0]);
    let scan = matches!(name.as_str(), "SCAN" | "HSCAN" | "SSCAN" | "ZSCAN");
    if !scan || in_multi {
        let reply = side.conns[c].call(args);
        return normalise(args, reply);
    }
    let cursor_at = if name == "SCAN" { 1 } else { 2 };
    let mut args = args.clone();
    let mut seen: Vec<Vec<Reply>> = Vec::new();
    for _round in 0..10_000 {
        let reply = side.conns[c].call(&args);
        let Reply::Array(parts) = &reply else {
            return reply; // an error: compared as it is
        };
        let [Reply::Bulk(cursor), Reply::Array(items)] = parts.as_slice() else {
            return Reply::Error(format!("malformed scan reply: {reply:?}").into_bytes());
        };
        // Hash and sorted set scans return pairs: keep them together.
        let width = if name == "HSCAN" || name == "ZSCAN" {
            2
        } else {
            1
        };
        for chunk in items.chunks(width) {
            seen.push(chunk.to_vec());
        }
        if cursor == b"0" {
            seen.sort_by_key(|x| x.iter().map(sort_key).collect::<Vec<_>>());
            seen.dedup();
            return Reply::Array(seen.concat());
        }
        args[cursor_at] = String::from_utf8_lossy(cursor).into_owned();
    }
    Reply::Error(b"scan did not finish in 10000 rounds".to_vec())
}

/// The enabled families' generators, each with its family's name.
fn generators(families: &[&str]) -> Vec<(&'static str, &'static Gen)> {
    let mut out = Vec::new();
    for want in families {
        let (name, gens) = FAMILIES
            .iter()
            .find(|(name, _)| name == want)
            .unwrap_or_else(|| panic!("no family {want} in FAMILIES"));
        for g in gens.iter() {
            out.push((*name, g));
        }
    }
    out
}

/// What a difference looks like: enough to understand it without a rerun.
struct Trail(Vec<String>);

impl Trail {
    fn push(&mut self, line: String) {
        if self.0.len() == 30 {
            self.0.remove(0);
        }
        self.0.push(line);
    }
}

/// A reply as readable text: strings quoted, RESP3 kinds named.
fn text(r: &Reply) -> String {
    let q = |b: &[u8]| format!("{:?}", String::from_utf8_lossy(b));
    let list = |items: &[Reply]| items.iter().map(text).collect::<Vec<_>>().join(", ");
    match r {
        Reply::Simple(s) => format!("+{}", String::from_utf8_lossy(s)),
        Reply::Error(e) => format!("-{}", String::from_utf8_lossy(e)),
        Reply::Integer(n) => format!(":{n}"),
        Reply::Bulk(b) => q(b),
        Reply::NullBulk => "nil".into(),
        Reply::NullArray => "nil-array".into(),
        Reply::Null => "null".into(),
        Reply::Array(items) => format!("[{}]", list(items)),
        Reply::Set(items) => format!("set{{{}}}", list(items)),
        Reply::Push(items) => format!("push[{}]", list(items)),
        Reply::Map(pairs) => format!(
            "map{{{}}}",
            pairs
                .iter()
                .map(|(k, v)| format!("{}: {}", text(k), text(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Reply::Double(d) => format!("double({})", String::from_utf8_lossy(d)),
        Reply::Boolean(b) => format!("bool({b})"),
        Reply::Verbatim(f, t) => format!("verbatim({}:{})", String::from_utf8_lossy(f), q(t)),
    }
}

fn show(args: &[String]) -> String {
    args.iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One sequence: which servers (the first is the reference), which families, which seed.
struct Run<'a> {
    labels: (&'a str, &'a str),
    ports: (u16, u16),
    families: &'a [&'a str],
    seed: u64,
    steps: usize,
    resp3: bool,
    clock: &'a Clock,
    /// A command sent to the second server only, after FLUSHALL (for the canary test).
    tamper: Option<Cmd>,
}

/// Runs one seeded sequence of commands against both servers and panics at the first
/// difference, printing the seed and the commands before it.
fn run_sequence(run: &Run) {
    let &Run {
        labels: label,
        ports,
        families,
        seed,
        steps,
        resp3,
        clock,
        ..
    } = run;
    let gens = generators(families);
    let keys_full = families.contains(&"keys");
    let open = |port| Side {
        conns: [Conn::open(port, resp3), Conn::open(port, resp3)],
    };
    let mut a = open(ports.0);
    let mut b = open(ports.1);
    let flush = cmd(&["FLUSHALL"]);
    assert_eq!(a.conns[0].call(&flush), Reply::simple("OK"));
    assert_eq!(b.conns[0].call(&flush), Reply::simple("OK"));
    if let Some(tamper) = &run.tamper {
        b.conns[0].call(tamper);
    }
    let mut rng = Rng(seed);
    let mut tx = [TxState::default(), TxState::default()];
    let mut trail = Trail(Vec::new());
    // What the sequence exercised (printed at its end, shown by `cargo test -- --nocapture`).
    let mut errors = std::collections::BTreeMap::<String, usize>::new();
    let mut replies = 0usize;
    let protocol = if resp3 { "RESP3" } else { "RESP2" };
    let fail = |trail: &Trail, what: String| -> ! {
        panic!(
            "{what}\nseed {seed}, {protocol}, families {families:?}; replay with \
             KAVACH_DIFF_SEED={seed} cargo test -p kavach --test differential\n\
             last commands (connection: command => {} reply):\n  {}",
            label.0,
            trail.0.join("\n  ")
        )
    };
    for step in 0..steps {
        // Mostly the first connection; the second makes WATCH meet another client.
        let c = if rng.chance(12) { 1 } else { 0 };
        let in_multi = tx[c].queued.is_some();
        let (family, g, args) = loop {
            let (family, g) = gens[rng.below(gens.len())];
            let mut ctx = Ctx {
                rng: &mut rng,
                clock,
            };
            let args = (g.make)(&mut ctx);
            // A scan's cursor is opaque: inside MULTI it could not be followed to the end.
            if !(in_multi && upper(&args[0]).ends_with("SCAN")) {
                break (family, g, args);
            }
        };
        let name = upper(&args[0]);
        let queued = if name == "EXEC" {
            tx[c].queued.clone()
        } else {
            None
        };
        let ra = normalise_exec(queued.as_deref(), run_command(&mut a, c, &args, in_multi));
        let rb = normalise_exec(queued.as_deref(), run_command(&mut b, c, &args, in_multi));
        trail.push(format!("{c}: {} => {}", show(&args), text(&ra)));
        if !agree(&args, queued.as_deref(), &ra, &rb) {
            fail(
                &trail,
                format!(
                    "step {step} ({family}: {}): `{}` on connection {c}\n  {}: {}\n  {}: {}",
                    g.name,
                    show(&args),
                    label.0,
                    text(&ra),
                    label.1,
                    text(&rb)
                ),
            );
        }
        match &ra {
            Reply::Error(e) => {
                let text = String::from_utf8_lossy(e);
                let class: String = text.chars().take(40).collect();
                *errors.entry(class).or_default() += 1;
            }
            _ => replies += 1,
        }
        // Follow MULTI state from the reference server's replies.
        match (name.as_str(), &ra) {
            ("MULTI", Reply::Simple(s)) if s == b"OK" => tx[c].queued = Some(Vec::new()),
            ("EXEC" | "DISCARD", _) => tx[c].queued = None,
            (_, Reply::Simple(s)) if in_multi && s == b"QUEUED" => {
                if let Some(q) = tx[c].queued.as_mut() {
                    q.push(args.clone());
                }
            }
            _ => {}
        }
    }
    // Close any transaction, then compare every key's type, value and expiry.
    for (c, state) in tx.iter().enumerate() {
        if state.queued.is_some() {
            let discard = cmd(&["DISCARD"]);
            a.conns[c].call(&discard);
            b.conns[c].call(&discard);
        }
    }
    eprintln!(
        "differential: seed {seed} {protocol} {families:?}: {replies} replies, errors {errors:?}"
    );
    let dbs = if keys_full { 0..4 } else { 0..1 };
    for db in dbs {
        if keys_full {
            let select = cmd(&["SELECT", &db.to_string()]);
            a.conns[0].call(&select);
            b.conns[0].call(&select);
        }
        let scan = cmd(&["SCAN", "0", "COUNT", "100"]);
        let ka = run_command(&mut a, 0, &scan, false);
        let kb = run_command(&mut b, 0, &scan, false);
        if ka != kb {
            fail(
                &trail,
                format!(
                    "after {steps} steps, db {db} holds different keys\n  {}: {}\n  {}: {}",
                    label.0,
                    text(&ka),
                    label.1,
                    text(&kb)
                ),
            );
        }
        let Reply::Array(keys) = ka else { continue };
        for key in keys {
            let Reply::Bulk(key) = key else { continue };
            let key = String::from_utf8_lossy(&key).into_owned();
            let kind = a.conns[0].call(&cmd(&["TYPE", &key]));
            let mut reads = vec![cmd(&["TYPE", &key])];
            let read = match &kind {
                Reply::Simple(t) if t == b"string" => cmd(&["GET", &key]),
                Reply::Simple(t) if t == b"hash" => cmd(&["HGETALL", &key]),
                Reply::Simple(t) if t == b"list" => cmd(&["LRANGE", &key, "0", "-1"]),
                Reply::Simple(t) if t == b"set" => cmd(&["SMEMBERS", &key]),
                Reply::Simple(t) if t == b"zset" => {
                    cmd(&["ZRANGEBYSCORE", &key, "-inf", "+inf", "WITHSCORES"])
                }
                other => fail(&trail, format!("key {key:?} has the kind {}", text(other))),
            };
            reads.push(read);
            if keys_full {
                reads.push(cmd(&["PTTL", &key]));
            }
            for r in reads {
                let x = run_command(&mut a, 0, &r, false);
                let y = run_command(&mut b, 0, &r, false);
                if !agree(&r, None, &x, &y) {
                    fail(
                        &trail,
                        format!(
                            "after {steps} steps, `{}` differs\n  {}: {}\n  {}: {}",
                            show(&r),
                            label.0,
                            text(&x),
                            label.1,
                            text(&y)
                        ),
                    );
                }
            }
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}"))
    })
}

/// The seeds to run: KAVACH_DIFF_SEED alone, or the default ones plus KAVACH_DIFF_SEEDS more
/// from a random base.
fn seeds(defaults: &[u64]) -> Vec<u64> {
    if let Some(seed) = env_u64("KAVACH_DIFF_SEED") {
        return vec![seed];
    }
    let mut seeds = defaults.to_vec();
    if let Some(more) = env_u64("KAVACH_DIFF_SEEDS") {
        let base = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        eprintln!("differential: {more} more seeds from {base}");
        seeds.extend((0..more).map(|i| base.wrapping_add(i)));
    }
    seeds
}

fn steps() -> usize {
    env_u64("KAVACH_DIFF_STEPS").map_or(STEPS, |s| s as usize)
}

fn clock() -> Clock {
    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    Clock {
        far_s: now_s + 10_000_000,
    }
}

#[test]
fn kavach_replies_like_redis_7_to_random_sequences() {
    let scratch = Scratch::new("differential");
    let redis_dir = scratch.path("redis");
    std::fs::create_dir_all(&redis_dir).unwrap();
    let (_redis, redis_port) = start_redis(Path::new(&redis_dir));
    let (_kavach, kavach_port) = start_kavach(&scratch.path("store"));
    // KAVACH_DIFF_FAMILIES=strings,lists tries families before they are in ENABLED.
    let chosen = std::env::var("KAVACH_DIFF_FAMILIES").ok();
    let families: Vec<&str> = match &chosen {
        Some(list) => list.split(',').map(str::trim).collect(),
        None => ENABLED.to_vec(),
    };
    let clock = clock();
    for seed in seeds(SEEDS) {
        for resp3 in [false, true] {
            run_sequence(&Run {
                labels: ("redis", "kavach"),
                ports: (redis_port, kavach_port),
                families: &families,
                seed,
                steps: steps(),
                resp3,
                clock: &clock,
                tamper: None,
            });
        }
    }
}

/// Every family in the table, enabled or not, on two real Redis servers: they must agree, so
/// the generators and the normalisation only compare what Redis itself makes deterministic.
#[test]
fn generators_agree_between_two_redis_servers() {
    let scratch = Scratch::new("differential-self");
    let dirs = [scratch.path("one"), scratch.path("two")];
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
    }
    let (_one, port_one) = start_redis(Path::new(&dirs[0]));
    let (_two, port_two) = start_redis(Path::new(&dirs[1]));
    let all: Vec<&str> = FAMILIES.iter().map(|(name, _)| *name).collect();
    let clock = clock();
    for seed in seeds(&[11, 12, 13]) {
        for resp3 in [false, true] {
            run_sequence(&Run {
                labels: ("redis one", "redis two"),
                ports: (port_one, port_two),
                families: &all,
                seed,
                steps: steps(),
                resp3,
                clock: &clock,
                tamper: None,
            });
        }
    }
}

/// The comparison can fail, and says how to replay: two Redis servers, one of which is given
/// a key the other lacks before the sequence starts, differ (at the latest in the final dump),
/// and the message names the seed.
#[test]
fn a_difference_is_caught_and_names_its_seed() {
    let scratch = Scratch::new("differential-canary");
    let dirs = [scratch.path("one"), scratch.path("two")];
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
    }
    let (_one, port_one) = start_redis(Path::new(&dirs[0]));
    let (_two, port_two) = start_redis(Path::new(&dirs[1]));
    let clock = clock();
    let result = std::panic::catch_unwind(|| {
        run_sequence(&Run {
            labels: ("redis one", "redis two"),
            ports: (port_one, port_two),
            families: &["strings-core"],
            seed: 99,
            steps: 50,
            resp3: false,
            clock: &clock,
            tamper: Some(cmd(&["SET", "only-here", "1"])),
        })
    });
    let err = result.expect_err("servers holding different keys must differ");
    let text = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.contains("seed 99"), "{text}");
    assert!(text.contains("KAVACH_DIFF_SEED=99"), "{text}");
    assert!(text.contains("only-here"), "{text}");
}
