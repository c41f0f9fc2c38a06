//! The sorted-set commands (ZADD ... ZSCAN), with Redis 7.0's arguments, error texts and reply
//! shapes in RESP2 and RESP3.
//!
//! Reads go through the [`View`]'s `zset_*` methods, so a range query costs two rank lookups
//! plus the members it returns on a store that can do that; writes are `ZAdd`/`ZRem` effects,
//! and the `*STORE` commands `Put` their whole result (or `Del` it when empty).
//!
//! Scores are printed as Redis 7.0 prints doubles: `%.17g` (so `1.1` reads back as
//! `1.1000000000000001`), `inf`/`-inf`. RESP3 sends them as doubles; `WITHSCORES` replies pair
//! each member with its score in a two-element array in RESP3 and interleave them in RESP2.
//!
//! Where Redis's answer depends on its compact encoding of small sets (at most 128 members),
//! small sets answer the same way: lex ranges over mixed scores walk the set as Redis walks it,
//! ZSCAN returns the whole set at once with scores as Redis keeps them, ZRANDMEMBER samples in
//! the set's order. Larger sets scan in steps whose cursor is the next score to visit.
//!
//! BZPOPMIN, BZPOPMAX and BZMPOP pop at once when they can; otherwise they return
//! [`Action::Block`] on their keys and write nothing (inside EXEC they answer as a timeout).

use std::cell::Cell;
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use super::{
    Action, CommandError, CommandResult, Ctx, READ, READ_FAST, SCAN_COUNT_MAX, Spec, WRITE,
    WRITE_NO_OOM, is, parse_float, parse_float_with, parse_int,
};
use crate::backend::BackendError;
use crate::glob::glob_match;
use crate::resp::{
    parse_strict_i64, write_array_header, write_bulk, write_double_text, write_integer, write_null,
    write_null_array,
};
use model::{Bytes, Db, Effect, Kind, LexBound, ScoreBound, Txn, Value, View};

const WRITE_ONLY: &[&str] = &["write"];
const WRITE_DENYOOM: &[&str] = &["write", "denyoom"];
const WRITE_MOVABLE: &[&str] = &["write", "denyoom", "movablekeys"];
const WRITE_POP_MOVABLE: &[&str] = &["write", "movablekeys"];
const BLOCKING_POP: &[&str] = &["write", "noscript", "blocking", "fast"];
const BLOCKING_MPOP: &[&str] = &["write", "blocking", "movablekeys"];
const READ_MOVABLE: &[&str] = &["readonly", "movablekeys"];

/// This family's commands, sorted by name.
pub(super) static SPECS: &[Spec] = &[
    spec!("bzmpop", -5, BLOCKING_MPOP, 0, 0, 0, cmd_bzmpop),
    spec!("bzpopmax", -3, BLOCKING_POP, 1, -2, 1, cmd_bzpopmax),
    spec!("bzpopmin", -3, BLOCKING_POP, 1, -2, 1, cmd_bzpopmin),
    spec!("zadd", -4, WRITE, 1, 1, 1, cmd_zadd),
    spec!("zcard", 2, READ_FAST, 1, 1, 1, cmd_zcard),
    spec!("zcount", 4, READ_FAST, 1, 1, 1, cmd_zcount),
    spec!("zdiff", -3, READ_MOVABLE, 0, 0, 0, cmd_zdiff),
    spec!("zdiffstore", -4, WRITE_MOVABLE, 1, 1, 1, cmd_zdiffstore),
    spec!("zincrby", 4, WRITE, 1, 1, 1, cmd_zincrby),
    spec!("zinter", -3, READ_MOVABLE, 0, 0, 0, cmd_zinter),
    spec!("zintercard", -3, READ_MOVABLE, 0, 0, 0, cmd_zintercard),
    spec!("zinterstore", -4, WRITE_MOVABLE, 1, 1, 1, cmd_zinterstore),
    spec!("zlexcount", 4, READ_FAST, 1, 1, 1, cmd_zlexcount),
    spec!("zmpop", -4, WRITE_POP_MOVABLE, 0, 0, 0, cmd_zmpop),
    spec!("zmscore", -3, READ_FAST, 1, 1, 1, cmd_zmscore),
    spec!("zpopmax", -2, WRITE_NO_OOM, 1, 1, 1, cmd_zpopmax),
    spec!("zpopmin", -2, WRITE_NO_OOM, 1, 1, 1, cmd_zpopmin),
    spec!("zrandmember", -2, READ, 1, 1, 1, cmd_zrandmember),
    spec!("zrange", -4, READ, 1, 1, 1, cmd_zrange),
    spec!("zrangebylex", -4, READ, 1, 1, 1, cmd_zrangebylex),
    spec!("zrangebyscore", -4, READ, 1, 1, 1, cmd_zrangebyscore),
    spec!("zrangestore", -5, WRITE_DENYOOM, 1, 2, 1, cmd_zrangestore),
    spec!("zrank", 3, READ_FAST, 1, 1, 1, cmd_zrank),
    spec!("zrem", -3, WRITE_NO_OOM, 1, 1, 1, cmd_zrem),
    spec!("zremrangebylex", 4, WRITE_ONLY, 1, 1, 1, cmd_zremrangebylex),
    spec!(
        "zremrangebyrank",
        4,
        WRITE_ONLY,
        1,
        1,
        1,
        cmd_zremrangebyrank
    ),
    spec!(
        "zremrangebyscore",
        4,
        WRITE_ONLY,
        1,
        1,
        1,
        cmd_zremrangebyscore
    ),
    spec!("zrevrange", -4, READ, 1, 1, 1, cmd_zrevrange),
    spec!("zrevrangebylex", -4, READ, 1, 1, 1, cmd_zrevrangebylex),
    spec!("zrevrangebyscore", -4, READ, 1, 1, 1, cmd_zrevrangebyscore),
    spec!("zrevrank", 3, READ_FAST, 1, 1, 1, cmd_zrevrank),
    spec!("zscan", -3, READ, 1, 1, 1, cmd_zscan),
    spec!("zscore", 3, READ_FAST, 1, 1, 1, cmd_zscore),
    spec!("zunion", -3, READ_MOVABLE, 0, 0, 0, cmd_zunion),
    spec!("zunionstore", -4, WRITE_MOVABLE, 1, 1, 1, cmd_zunionstore),
];

// ---------------------------------------------------------------------------------------------
// Shared pieces: errors, parsing, formatting
// ---------------------------------------------------------------------------------------------

/// Members with their scores, in some stated order.
type Scored = Vec<(Bytes, f64)>;

fn wrongtype() -> CommandError {
    CommandError::Backend(BackendError::WrongType)
}

fn err(text: &str) -> CommandError {
    CommandError::Other(text.to_string())
}

/// Whether `key` holds a sorted set (`false`: absent); `WRONGTYPE` for another kind.
fn zset_exists(t: &dyn View, db: Db, key: &[u8]) -> Result<bool, CommandError> {
    match t.kind(db, key) {
        None => Ok(false),
        Some(Kind::ZSet) => Ok(true),
        Some(_) => Err(wrongtype()),
    }
}

/// A score argument (ZADD, ZINCRBY, WEIGHTS): Redis's strict float grammar, keeping the sign of
/// a negative zero as strtod does (ZINCRBY of a new member by `-0` answers `-0`).
fn parse_score_arg(arg: &[u8]) -> Option<f64> {
    let value = parse_float(arg)?;
    Some(if value == 0.0 && arg.first() == Some(&b'-') {
        -0.0
    } else {
        value
    })
}

/// A score range end (`zslParseRange`): `(` for exclusive, then what strtod reads of the rest
/// (leading spaces skipped, overflow to infinity; an empty number is 0); NaN refused.
fn parse_score_bound(arg: &[u8]) -> Result<ScoreBound, CommandError> {
    let (exclusive, number) = match arg.strip_prefix(b"(") {
        Some(rest) => (true, rest),
        None => (false, arg),
    };
    let score = if number.is_empty() {
        0.0
    } else {
        parse_float_with(number, false).ok_or(CommandError::MinMaxNotFloat)?
    };
    Ok(ScoreBound { score, exclusive })
}

/// A lexicographic range end (`zslParseLexRangeItem`): `-`, `+`, `[member` or `(member`.
fn parse_lex_bound(arg: &[u8]) -> Result<LexBound, CommandError> {
    match arg.split_first() {
        Some((b'+', [])) => Ok(LexBound::Max),
        Some((b'-', [])) => Ok(LexBound::Min),
        Some((b'[', rest)) => Ok(LexBound::Inclusive(rest.to_vec())),
        Some((b'(', rest)) => Ok(LexBound::Exclusive(rest.to_vec())),
        _ => Err(err("ERR min or max not valid string range item")),
    }
}

/// Formats a double as Redis 7.0 replies with it (`addReplyDouble`, `%.17g`): 17 significant
/// digits with trailing zeros dropped, exponent form below 1e-4 and from 1e17, `inf`/`-inf`,
/// and `-0` for a negative zero.
pub(crate) fn format_score(value: f64) -> String {
    if value.is_nan() {
        return "nan".to_string();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // `{:.16e}` rounds to 17 significant digits exactly as printf does: `-1.1000000000000001e0`.
    let sci = format!("{value:.16e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let digits = digits.trim_end_matches('0');
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
        let zeros = "0".repeat(exponent.unsigned_abs() as usize - 1);
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

/// Formats a score as Redis 7.0 keeps it in a compact (listpack) sorted set, which ZSCAN of a
/// small set shows: whole numbers up to 2^62 in magnitude as integers, others as
/// [`format_score`].
fn format_compact_score(value: f64) -> String {
    const LIMIT: f64 = 4_611_686_018_427_387_904.0; // 2^62, Redis's (double)(LLONG_MAX/2)
    if (-LIMIT..=LIMIT).contains(&value) && value.fract() == 0.0 {
        // Whole and within 2^62: exact as an i64.
        return (value as i64).to_string();
    }
    format_score(value)
}

fn write_score(out: &mut Vec<u8>, score: f64, resp3: bool) {
    write_double_text(out, format_score(score).as_bytes(), resp3);
}

/// The null array: `*-1` in RESP2, `_` in RESP3.
fn write_nil_array(out: &mut Vec<u8>, resp3: bool) {
    if resp3 {
        write_null(out, true);
    } else {
        write_null_array(out);
    }
}

/// Members in order, with their scores if `with_scores`: interleaved in RESP2, each pair a
/// two-element array in RESP3 (Redis 7's ZRANGE family, ZUNION, ZRANDMEMBER).
fn write_members(out: &mut Vec<u8>, items: &[(Bytes, f64)], with_scores: bool, resp3: bool) {
    let flat = with_scores && !resp3;
    write_array_header(out, items.len() * if flat { 2 } else { 1 });
    for (member, score) in items {
        if with_scores && resp3 {
            write_array_header(out, 2);
        }
        write_bulk(out, member);
        if with_scores {
            write_score(out, *score, resp3);
        }
    }
}

fn write_count(out: &mut Vec<u8>, n: u64) -> CommandResult {
    write_integer(out, i64::try_from(n).unwrap_or(i64::MAX));
    Ok(Action::Continue)
}

/// `getPositiveLongFromObjectOrReply` with Redis's message for both a non-number and a
/// negative number.
fn parse_positive(arg: &[u8], message: &str) -> Result<i64, CommandError> {
    match parse_strict_i64(arg) {
        Some(n) if n >= 0 => Ok(n),
        _ => Err(err(message)),
    }
}

/// `getRangeLongFromObjectOrReply(1, LONG_MAX)` with a message for every failure.
fn parse_at_least_one(arg: &[u8], message: &str) -> Result<i64, CommandError> {
    match parse_strict_i64(arg) {
        Some(n) if n >= 1 => Ok(n),
        _ => Err(err(message)),
    }
}

/// A blocking command's timeout in seconds, as Redis 7.0 reads it: a float (no leading space),
/// converted to milliseconds by truncation; out-of-range values read as negative. `None` for 0:
/// wait forever.
fn parse_timeout(arg: &[u8]) -> Result<Option<Duration>, CommandError> {
    let not_float = || err("ERR timeout is not a float or out of range");
    if arg.first().is_none_or(u8::is_ascii_whitespace) {
        return Err(not_float());
    }
    let negative = || err("ERR timeout is negative");
    // Whole seconds exactly (Redis computes in long double, finer than f64 here).
    if let Some(seconds) = parse_strict_i64(arg) {
        let ms = seconds.checked_mul(1000).ok_or_else(negative)?;
        let ms = u64::try_from(ms).map_err(|_| negative())?;
        return Ok((ms > 0).then(|| Duration::from_millis(ms)));
    }
    let seconds = parse_float_with(arg, false).ok_or_else(not_float)?;
    let ms = (seconds * 1000.0).trunc();
    // C's conversion of a value beyond `long long` gives LLONG_MIN: "negative".
    const LONG_LONG_END: f64 = 9_223_372_036_854_775_808.0; // 2^63
    if !(0.0..LONG_LONG_END).contains(&ms) {
        return Err(negative());
    }
    // `ms` is a whole number in 0..2^63 here.
    let ms = ms as u64;
    Ok((ms > 0).then(|| Duration::from_millis(ms)))
}

/// What a blocking command does when it found nothing to pop: inside EXEC it answers as a
/// timeout at once (the null array); elsewhere it writes nothing and asks to block on `keys`.
fn nothing_to_pop(
    in_exec: bool,
    resp3: bool,
    db: Db,
    keys: &[Vec<u8>],
    timeout: Option<Duration>,
    out: &mut Vec<u8>,
) -> Action {
    if in_exec {
        write_nil_array(out, resp3);
        return Action::Continue;
    }
    Action::Block {
        keys: keys.iter().map(|k| (db, k.clone())).collect(),
        deadline: timeout.and_then(|t| Instant::now().checked_add(t)),
    }
}

// ---------------------------------------------------------------------------------------------
// A small PRNG for ZRANDMEMBER
// ---------------------------------------------------------------------------------------------

/// SplitMix64 per thread, seeded from std's random hasher keys.
fn random_u64() -> u64 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new(RandomState::new().hash_one(Instant::now()));
    }
    STATE.with(|state| {
        let s = state.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        state.set(s);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// A number in `0..n` (`n > 0`).
fn random_below(n: u64) -> u64 {
    ((u128::from(random_u64()) * u128::from(n)) >> 64) as u64
}

// ---------------------------------------------------------------------------------------------
// Ranges
// ---------------------------------------------------------------------------------------------

/// A range of a sorted set by rank, score or member bytes.
#[derive(Debug, Clone, PartialEq)]
enum Range {
    /// Ranks `start..=end`, negative from the end (ZRANGE's default).
    Rank(i64, i64),
    /// Scores between two ends.
    Score(ScoreBound, ScoreBound),
    /// Members between two ends (for members of one score).
    Lex(LexBound, LexBound),
}

/// Ranks `start..=end` (negative from the end) of a sorted set of `len` members as an
/// ascending interval `[from, to)`, clamped as Redis clamps them; `None` if empty.
fn rank_span(len: u64, start: i64, end: i64) -> Option<(u64, u64)> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let start = if start < 0 { len + start } else { start }.max(0);
    let end = if end < 0 { len + end } else { end };
    if start > end || start >= len {
        return None;
    }
    let end = end.min(len - 1);
    Some((start as u64, end as u64 + 1))
}

/// The ranks `[from, to)` a range selects (before LIMIT); with `rev`, ranks of a rank range
/// count from the highest member.
fn range_ranks(t: &dyn View, db: Db, key: &[u8], range: &Range, rev: bool) -> (u64, u64) {
    let (from, to) = match range {
        Range::Rank(start, end) => {
            let len = t.zset_len(db, key);
            match rank_span(len, *start, *end) {
                None => (0, 0),
                Some((s, e)) if rev => (len - e, len - s),
                Some(span) => span,
            }
        }
        Range::Score(min, max) => (
            t.zset_rank_of_score(db, key, *min),
            t.zset_rank_above(db, key, *max),
        ),
        Range::Lex(min, max) => (
            t.zset_rank_of_lex(db, key, min),
            t.zset_rank_above_lex(db, key, max),
        ),
    };
    (from, to.max(from))
}

/// Applies `LIMIT offset count` to the ranks `[from, to)`, counting from the top when `rev`:
/// a negative offset selects nothing, a negative count everything after the offset.
fn apply_limit(from: u64, to: u64, limit: Option<(i64, i64)>, rev: bool) -> (u64, u64) {
    let Some((offset, count)) = limit else {
        return (from, to);
    };
    let Ok(offset) = u64::try_from(offset) else {
        return (from, from);
    };
    let available = (to - from).saturating_sub(offset);
    let take = u64::try_from(count).map_or(available, |c| c.min(available));
    if take == 0 {
        return (from, from);
    }
    if rev {
        (to - offset - take, to - offset)
    } else {
        (from + offset, from + offset + take)
    }
}

/// The ranks `[from, to)` a range query selects, LIMIT applied. Lex ranges of small sets walk
/// the set as Redis walks its compact encoding, so that sets of mixed scores (where Redis leaves
/// lex ranges unspecified) answer as Redis answers them.
fn selected_ranks(
    t: &dyn View,
    db: Db,
    key: &[u8],
    range: &Range,
    rev: bool,
    limit: Option<(i64, i64)>,
) -> (u64, u64) {
    if let Range::Lex(min, max) = range {
        let len = t.zset_len(db, key);
        if len <= ZSET_COMPACT_LEN {
            let members: Vec<Bytes> = t
                .zset_range(db, key, 0, len)
                .into_iter()
                .map(|(m, _)| m)
                .collect();
            return lex_walk(&members, min, max, rev, limit);
        }
    }
    let (from, to) = range_ranks(t, db, key, range, rev);
    apply_limit(from, to, limit, rev)
}

/// Sorted sets up to this many members are walked as Redis walks its compact (listpack)
/// encoding, whose size limit this is (`zset-max-listpack-entries`).
const ZSET_COMPACT_LEN: u64 = 128;

/// Whether `member` is at or past the lower end `min`.
fn lex_gte_min(member: &[u8], min: &LexBound) -> bool {
    match min {
        LexBound::Min => true,
        LexBound::Max => false,
        LexBound::Inclusive(b) => member >= b.as_slice(),
        LexBound::Exclusive(b) => member > b.as_slice(),
    }
}

/// Whether `member` is at or before the upper end `max`.
fn lex_lte_max(member: &[u8], max: &LexBound) -> bool {
    match max {
        LexBound::Min => false,
        LexBound::Max => true,
        LexBound::Inclusive(b) => member <= b.as_slice(),
        LexBound::Exclusive(b) => member < b.as_slice(),
    }
}

/// Whether a lex range can hold nothing whatever the members (`min` above `max`, or equal with
/// an open end).
fn lex_range_empty(min: &LexBound, max: &LexBound) -> bool {
    fn rank(b: &LexBound) -> (u8, &[u8], bool) {
        match b {
            LexBound::Min => (0, &[], false),
            LexBound::Inclusive(x) => (1, x, false),
            LexBound::Exclusive(x) => (1, x, true),
            LexBound::Max => (2, &[], false),
        }
    }
    let (a, b) = (rank(min), rank(max));
    match (a.0, a.1).cmp(&(b.0, b.1)) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Equal => a.2 || b.2,
        std::cmp::Ordering::Less => false,
    }
}

/// Redis 7.0's walk of a compact sorted set for a lex range (`zzlFirstInLexRange`,
/// `zzlLastInLexRange`, then LIMIT's offset skipped unchecked and members taken while inside
/// the far end), as ascending ranks `[from, to)`.
fn lex_walk(
    members: &[Bytes],
    min: &LexBound,
    max: &LexBound,
    rev: bool,
    limit: Option<(i64, i64)>,
) -> (u64, u64) {
    let (first, last) = match (members.first(), members.last()) {
        (Some(first), Some(last)) => (first, last),
        _ => return (0, 0),
    };
    if lex_range_empty(min, max) || !lex_gte_min(last, min) || !lex_lte_max(first, max) {
        return (0, 0);
    }
    let (offset, count) = limit.unwrap_or((0, -1));
    let Ok(offset) = usize::try_from(offset) else {
        return (0, 0);
    };
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    if !rev {
        let Some(start) = members.iter().position(|m| lex_gte_min(m, min)) else {
            return (0, 0);
        };
        if !lex_lte_max(&members[start], max) {
            return (0, 0);
        }
        let from = start.saturating_add(offset).min(members.len());
        let taken = members[from..]
            .iter()
            .take(count)
            .take_while(|m| lex_lte_max(m, max))
            .count();
        return (from as u64, (from + taken) as u64);
    }
    let Some(start) = members.iter().rposition(|m| lex_lte_max(m, max)) else {
        return (0, 0);
    };
    if !lex_gte_min(&members[start], min) || offset > start {
        return (0, 0);
    }
    // Inclusive top after the offset, then downwards.
    let top = start - offset;
    let taken = members[..=top]
        .iter()
        .rev()
        .take(count)
        .take_while(|m| lex_gte_min(m, min))
        .count();
    ((top + 1 - taken) as u64, (top + 1) as u64)
}

/// The members a range query selects, in reply order.
fn select(
    t: &dyn View,
    db: Db,
    key: &[u8],
    range: &Range,
    rev: bool,
    limit: Option<(i64, i64)>,
) -> Scored {
    let (from, to) = selected_ranks(t, db, key, range, rev, limit);
    if from >= to {
        return Vec::new();
    }
    let mut items = t.zset_range(db, key, from, to);
    if rev {
        items.reverse();
    }
    items
}

/// How ZRANGE's arguments fix its range kind and direction (the older commands fix them).
#[derive(Clone, Copy, PartialEq)]
enum By {
    Rank,
    Score,
    Lex,
}

/// A parsed ZRANGE-family query.
struct RangeQuery {
    range: Range,
    rev: bool,
    limit: Option<(i64, i64)>,
    with_scores: bool,
}

/// Parses `<min> <max> [options]` starting at `args[at]` the way Redis 7.0's
/// `zrangeGenericCommand` does: `by`/`rev` are `None` when the options may choose them.
fn parse_range_query(
    args: &[Vec<u8>],
    at: usize,
    store: bool,
    mut by: Option<By>,
    mut rev: Option<bool>,
) -> Result<RangeQuery, CommandError> {
    let mut with_scores = false;
    let mut limit = None;
    let mut j = at + 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        let word = &args[j];
        if !store && is(word, "withscores") {
            with_scores = true;
        } else if is(word, "limit") && left >= 2 {
            limit = Some((parse_int(&args[j + 1])?, parse_int(&args[j + 2])?));
            j += 2;
        } else if rev.is_none() && is(word, "rev") {
            rev = Some(true);
        } else if by.is_none() && is(word, "bylex") {
            by = Some(By::Lex);
        } else if by.is_none() && is(word, "byscore") {
            by = Some(By::Score);
        } else {
            return Err(CommandError::Syntax);
        }
        j += 1;
    }
    let rev = rev.unwrap_or(false);
    let by = by.unwrap_or(By::Rank);
    // Redis 7.0 tests the count only: `LIMIT <any offset> -1` is no limit, and allowed.
    if limit.is_some_and(|(_, count)| count != -1) && by == By::Rank {
        return Err(err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if with_scores && by == By::Lex {
        return Err(err(
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    // Reversed score and lex ranges are given as max, min.
    let (lo, hi) = if rev && by != By::Rank {
        (&args[at + 1], &args[at])
    } else {
        (&args[at], &args[at + 1])
    };
    let range = match by {
        By::Rank => Range::Rank(parse_int(lo)?, parse_int(hi)?),
        By::Score => Range::Score(parse_score_bound(lo)?, parse_score_bound(hi)?),
        By::Lex => Range::Lex(parse_lex_bound(lo)?, parse_lex_bound(hi)?),
    };
    Ok(RangeQuery {
        range,
        rev,
        // A rank range ignores an accepted LIMIT (count -1), offset included, as Redis 7.0.
        limit: limit.filter(|_| by != By::Rank),
        with_scores,
    })
}

fn range_reply(
    ctx: &mut Ctx<'_>,
    args: &[Vec<u8>],
    out: &mut Vec<u8>,
    by: Option<By>,
    rev: Option<bool>,
) -> CommandResult {
    let query = parse_range_query(args, 2, false, by, rev)?;
    let (db, resp3, key) = (ctx.db(), ctx.resp3(), &args[1]);
    ctx.read(&[key], |t| {
        if !zset_exists(t, db, key)? {
            write_array_header(out, 0);
            return Ok(());
        }
        let items = select(t, db, key, &query.range, query.rev, query.limit);
        write_members(out, &items, query.with_scores, resp3);
        Ok(())
    })?;
    Ok(Action::Continue)
}

fn cmd_zrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    range_reply(ctx, args, out, None, None)
}

fn cmd_zrevrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    range_reply(ctx, args, out, Some(By::Rank), Some(true))
}

fn cmd_zrangebyscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    range_reply(ctx, args, out, Some(By::Score), Some(false))
}

fn cmd_zrevrangebyscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    range_reply(ctx, args, out, Some(By::Score), Some(true))
}

fn cmd_zrangebylex(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    range_reply(ctx, args, out, Some(By::Lex), Some(false))
}

fn cmd_zrevrangebylex(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    range_reply(ctx, args, out, Some(By::Lex), Some(true))
}

/// Replaces `dst` with the sorted set `items` (deletes it when empty); the new key has no
/// deadline, as Redis's `setKey` leaves it.
fn store_result(t: &mut dyn Txn, db: Db, dst: &[u8], items: Scored) -> Result<u64, CommandError> {
    let n = items.len() as u64;
    let effect = if items.is_empty() {
        if t.kind(db, dst).is_none() {
            return Ok(0);
        }
        Effect::Del {
            db,
            key: dst.to_vec(),
        }
    } else {
        // One zero: the stores never keep a negative zero.
        let pairs = items.into_iter().map(|(m, s)| (s + 0.0, m)).collect();
        Effect::Put {
            db,
            key: dst.to_vec(),
            value: Value::ZSet(pairs),
            expire_at_ms: 0,
        }
    };
    t.apply(vec![effect])?;
    Ok(n)
}

fn cmd_zrangestore(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let query = parse_range_query(args, 3, true, None, None)?;
    let (db, dst, src) = (ctx.db(), &args[1], &args[2]);
    let n = ctx.write(&[dst, src], |t| {
        let items = if zset_exists(t, db, src)? {
            select(t, db, src, &query.range, query.rev, query.limit)
        } else {
            Vec::new()
        };
        store_result(t, db, dst, items)
    })?;
    write_count(out, n)
}

fn cmd_zcount(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let range = Range::Score(parse_score_bound(&args[2])?, parse_score_bound(&args[3])?);
    count_range(ctx, &args[1], &range, out)
}

fn cmd_zlexcount(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let range = Range::Lex(parse_lex_bound(&args[2])?, parse_lex_bound(&args[3])?);
    count_range(ctx, &args[1], &range, out)
}

fn count_range(ctx: &mut Ctx<'_>, key: &[u8], range: &Range, out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let n = ctx.read(&[key], |t| {
        zset_exists(t, db, key)?;
        let (from, to) = selected_ranks(t, db, key, range, false, None);
        Ok(to - from)
    })?;
    write_count(out, n)
}

fn remove_range(ctx: &mut Ctx<'_>, key: &[u8], range: &Range, out: &mut Vec<u8>) -> CommandResult {
    let db = ctx.db();
    let n = ctx.write(&[key], |t| {
        if !zset_exists(t, db, key)? {
            return Ok(0);
        }
        let (from, to) = selected_ranks(t, db, key, range, false, None);
        if from >= to {
            return Ok(0);
        }
        let members: Vec<Bytes> = t
            .zset_range(db, key, from, to)
            .into_iter()
            .map(|(m, _)| m)
            .collect();
        let n = members.len() as u64;
        t.apply(vec![Effect::ZRem {
            db,
            key: key.to_vec(),
            members,
        }])?;
        Ok(n)
    })?;
    write_count(out, n)
}

fn cmd_zremrangebyrank(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let range = Range::Rank(parse_int(&args[2])?, parse_int(&args[3])?);
    remove_range(ctx, &args[1], &range, out)
}

fn cmd_zremrangebyscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let range = Range::Score(parse_score_bound(&args[2])?, parse_score_bound(&args[3])?);
    remove_range(ctx, &args[1], &range, out)
}

fn cmd_zremrangebylex(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let range = Range::Lex(parse_lex_bound(&args[2])?, parse_lex_bound(&args[3])?);
    remove_range(ctx, &args[1], &range, out)
}

// ---------------------------------------------------------------------------------------------
// ZADD, ZINCRBY, ZREM
// ---------------------------------------------------------------------------------------------

/// ZADD's options.
#[derive(Debug, Default, Clone, Copy)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

/// What a ZADD did.
#[derive(Debug, Default)]
struct AddOutcome {
    added: u64,
    updated: u64,
    /// With INCR: the member's new score, `None` if the options skipped it.
    new_score: Option<f64>,
}

/// Adds or updates `(score, member)` pairs in order, as `zsetAdd` does one at a time (a member
/// named twice sees its first update).
fn zadd_apply(
    t: &mut dyn Txn,
    db: Db,
    key: &[u8],
    flags: AddFlags,
    pairs: &[(f64, &[u8])],
) -> Result<AddOutcome, CommandError> {
    let mut outcome = AddOutcome::default();
    if !zset_exists(t, db, key)? && flags.xx {
        return Ok(outcome);
    }
    // Scores this command set, by member, in the order first set.
    let mut changed: Vec<(f64, Bytes)> = Vec::new();
    let mut index: HashMap<&[u8], usize> = HashMap::new();
    for &(score, member) in pairs {
        let current = match index.get(member) {
            Some(&i) => Some(changed[i].0),
            None => t.zset_score(db, key, member),
        };
        let new = match current {
            Some(current) => {
                if flags.nx {
                    continue;
                }
                let mut new = score;
                if flags.incr {
                    new += current;
                    if new.is_nan() {
                        return Err(err("ERR resulting score is not a number (NaN)"));
                    }
                }
                if (flags.lt && new >= current) || (flags.gt && new <= current) {
                    continue;
                }
                outcome.new_score = Some(new);
                if new == current {
                    continue;
                }
                outcome.updated += 1;
                new
            }
            None => {
                if flags.xx {
                    continue;
                }
                outcome.added += 1;
                outcome.new_score = Some(score);
                score
            }
        };
        match index.get(member) {
            Some(&i) => changed[i].0 = new,
            None => {
                index.insert(member, changed.len());
                changed.push((new, member.to_vec()));
            }
        }
    }
    if !changed.is_empty() {
        let members = changed.into_iter().map(|(s, m)| (s + 0.0, m)).collect();
        t.apply(vec![Effect::ZAdd {
            db,
            key: key.to_vec(),
            members,
        }])?;
    }
    Ok(outcome)
}

fn cmd_zadd(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    zadd_generic(ctx, args, out, AddFlags::default())
}

/// ZADD's options, then its score/member pairs, after the flags already given.
fn zadd_generic(
    ctx: &mut Ctx<'_>,
    args: &[Vec<u8>],
    out: &mut Vec<u8>,
    mut flags: AddFlags,
) -> CommandResult {
    let mut at = 2;
    while let Some(word) = args.get(at) {
        let flag = if is(word, "nx") {
            &mut flags.nx
        } else if is(word, "xx") {
            &mut flags.xx
        } else if is(word, "gt") {
            &mut flags.gt
        } else if is(word, "lt") {
            &mut flags.lt
        } else if is(word, "ch") {
            &mut flags.ch
        } else if is(word, "incr") {
            &mut flags.incr
        } else {
            break;
        };
        *flag = true;
        at += 1;
    }
    let elements = &args[at..];
    if elements.is_empty() || elements.len() % 2 != 0 {
        return Err(CommandError::Syntax);
    }
    if flags.nx && flags.xx {
        return Err(err(
            "ERR XX and NX options at the same time are not compatible",
        ));
    }
    if (flags.nx && (flags.gt || flags.lt)) || (flags.gt && flags.lt) {
        return Err(err(
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if flags.incr && elements.len() > 2 {
        return Err(err(
            "ERR INCR option supports a single increment-element pair",
        ));
    }
    let pairs = elements
        .chunks_exact(2)
        .map(|p| parse_score_arg(&p[0]).map(|score| (score, p[1].as_slice())))
        .collect::<Option<Vec<_>>>()
        .ok_or(CommandError::NotFloat)?;
    let (db, resp3, key) = (ctx.db(), ctx.resp3(), &args[1]);
    let outcome = ctx.write(&[key], |t| zadd_apply(t, db, key, flags, &pairs))?;
    if flags.incr {
        match outcome.new_score {
            Some(score) => write_score(out, score, resp3),
            None => write_null(out, resp3),
        }
        return Ok(Action::Continue);
    }
    let n = outcome.added + if flags.ch { outcome.updated } else { 0 };
    write_count(out, n)
}

/// ZINCRBY is ZADD with INCR set, as in Redis (so an option word in its increment's place is a
/// syntax error).
fn cmd_zincrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let flags = AddFlags {
        incr: true,
        ..AddFlags::default()
    };
    zadd_generic(ctx, args, out, flags)
}

fn cmd_zrem(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let (db, key) = (ctx.db(), &args[1]);
    let n = ctx.write(&[key], |t| {
        if !zset_exists(t, db, key)? {
            return Ok(0);
        }
        let mut named = std::collections::HashSet::new();
        let members: Vec<Bytes> = args[2..]
            .iter()
            .filter(|m| named.insert(m.as_slice()) && t.zset_score(db, key, m).is_some())
            .cloned()
            .collect();
        let n = members.len() as u64;
        if n > 0 {
            t.apply(vec![Effect::ZRem {
                db,
                key: key.clone(),
                members,
            }])?;
        }
        Ok(n)
    })?;
    write_count(out, n)
}

// ---------------------------------------------------------------------------------------------
// Point reads
// ---------------------------------------------------------------------------------------------

fn cmd_zcard(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let (db, key) = (ctx.db(), &args[1]);
    let n = ctx.read(&[key], |t| {
        zset_exists(t, db, key)?;
        Ok(t.zset_len(db, key))
    })?;
    write_count(out, n)
}

fn cmd_zscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let (db, resp3, key) = (ctx.db(), ctx.resp3(), &args[1]);
    let score = ctx.read(&[key], |t| {
        zset_exists(t, db, key)?;
        Ok(t.zset_score(db, key, &args[2]))
    })?;
    match score {
        Some(score) => write_score(out, score, resp3),
        None => write_null(out, resp3),
    }
    Ok(Action::Continue)
}

fn cmd_zmscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let (db, resp3, key) = (ctx.db(), ctx.resp3(), &args[1]);
    ctx.read(&[key], |t| {
        zset_exists(t, db, key)?;
        write_array_header(out, args.len() - 2);
        for member in &args[2..] {
            match t.zset_score(db, key, member) {
                Some(score) => write_score(out, score, resp3),
                None => write_null(out, resp3),
            }
        }
        Ok(())
    })?;
    Ok(Action::Continue)
}

fn rank_reply(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>, rev: bool) -> CommandResult {
    let (db, resp3, key) = (ctx.db(), ctx.resp3(), &args[1]);
    let rank = ctx.read(&[key], |t| {
        zset_exists(t, db, key)?;
        let len = t.zset_len(db, key);
        Ok(t.zset_rank(db, key, &args[2])
            .map(|r| if rev { len - 1 - r } else { r }))
    })?;
    match rank {
        Some(rank) => return write_count(out, rank),
        None => write_null(out, resp3),
    }
    Ok(Action::Continue)
}

fn cmd_zrank(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    rank_reply(ctx, args, out, false)
}

fn cmd_zrevrank(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    rank_reply(ctx, args, out, true)
}

// ---------------------------------------------------------------------------------------------
// Pops
// ---------------------------------------------------------------------------------------------

/// Removes up to `count` members from the low (`max` false) or high end of `key`, and returns
/// them lowest first or highest first.
fn pop_members(
    t: &mut dyn Txn,
    db: Db,
    key: &[u8],
    max: bool,
    count: u64,
) -> Result<Scored, CommandError> {
    let len = t.zset_len(db, key);
    let n = count.min(len);
    if n == 0 {
        return Ok(Vec::new());
    }
    let items = if max {
        let mut items = t.zset_range(db, key, len - n, len);
        items.reverse();
        items
    } else {
        t.zset_range(db, key, 0, n)
    };
    t.apply(vec![Effect::ZRem {
        db,
        key: key.to_vec(),
        members: items.iter().map(|(m, _)| m.clone()).collect(),
    }])?;
    Ok(items)
}

/// Pops from the first of `keys` that holds a sorted set (absent keys are skipped, a key of
/// another kind before it is `WRONGTYPE`): its index and the members popped.
fn pop_first(
    t: &mut dyn Txn,
    db: Db,
    keys: &[Vec<u8>],
    max: bool,
    count: u64,
) -> Result<Option<(usize, Scored)>, CommandError> {
    for (i, key) in keys.iter().enumerate() {
        if zset_exists(t, db, key)? {
            return Ok(Some((i, pop_members(t, db, key, max, count)?)));
        }
    }
    Ok(None)
}

fn zpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>, max: bool) -> CommandResult {
    if args.len() > 3 {
        return Err(CommandError::Syntax);
    }
    let count = match args.get(2) {
        Some(arg) => Some(parse_positive(
            arg,
            "ERR value is out of range, must be positive",
        )?),
        None => None,
    };
    let (db, resp3, key) = (ctx.db(), ctx.resp3(), &args[1]);
    let items = ctx.write(&[key], |t| {
        if !zset_exists(t, db, key)? {
            return Ok(Vec::new());
        }
        let n = count.map_or(1, |c| c as u64);
        pop_members(t, db, key, max, n)
    })?;
    // RESP3 nests the pairs when a count was given; otherwise the reply is flat.
    let nested = resp3 && count.is_some();
    write_array_header(out, items.len() * if nested { 1 } else { 2 });
    for (member, score) in &items {
        if nested {
            write_array_header(out, 2);
        }
        write_bulk(out, member);
        write_score(out, *score, resp3);
    }
    Ok(Action::Continue)
}

fn cmd_zpopmin(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    zpop(ctx, args, out, false)
}

fn cmd_zpopmax(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    zpop(ctx, args, out, true)
}

fn bzpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>, max: bool) -> CommandResult {
    let timeout = parse_timeout(&args[args.len() - 1])?;
    let all = &args[1..args.len() - 1];
    let (db, resp3) = (ctx.db(), ctx.resp3());
    let ready = ctx.ready_keys(all, Kind::ZSet)?;
    if ready.as_ref().is_some_and(Vec::is_empty) {
        return Ok(nothing_to_pop(ctx.in_exec(), resp3, db, all, timeout, out));
    }
    let keys = ready.as_deref().unwrap_or(all);
    let scope: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let popped = ctx.write(&scope, |t| pop_first(t, db, keys, max, 1))?;
    let Some((i, items)) = popped else {
        return Ok(nothing_to_pop(ctx.in_exec(), resp3, db, all, timeout, out));
    };
    // `[key, member, score]`, flat in both protocols.
    write_array_header(out, 1 + 2 * items.len());
    write_bulk(out, &keys[i]);
    for (member, score) in &items {
        write_bulk(out, member);
        write_score(out, *score, resp3);
    }
    Ok(Action::Continue)
}

fn cmd_bzpopmin(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    bzpop(ctx, args, out, false)
}

fn cmd_bzpopmax(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    bzpop(ctx, args, out, true)
}

/// `numkeys key... MIN|MAX [COUNT count]` from `args[at]`: the keys, MAX, and the count.
fn parse_mpop(args: &[Vec<u8>], at: usize) -> Result<(&[Vec<u8>], bool, u64), CommandError> {
    let numkeys = parse_at_least_one(&args[at], "ERR numkeys should be greater than 0")?;
    let where_at = usize::try_from(numkeys)
        .ok()
        .and_then(|n| (at + 1).checked_add(n))
        .filter(|&w| w < args.len())
        .ok_or(CommandError::Syntax)?;
    let max = if is(&args[where_at], "min") {
        false
    } else if is(&args[where_at], "max") {
        true
    } else {
        return Err(CommandError::Syntax);
    };
    let mut count = None;
    let mut j = where_at + 1;
    while j < args.len() {
        if count.is_none() && is(&args[j], "count") && j + 1 < args.len() {
            count = Some(parse_at_least_one(
                &args[j + 1],
                "ERR count should be greater than 0",
            )?);
            j += 2;
        } else {
            return Err(CommandError::Syntax);
        }
    }
    let count = count.map_or(1, |c| c as u64);
    Ok((&args[at + 1..where_at], max, count))
}

/// ZMPOP's reply: `[key, [[member, score], ...]]` in both protocols.
fn write_mpop(out: &mut Vec<u8>, key: &[u8], items: &[(Bytes, f64)], resp3: bool) {
    write_array_header(out, 2);
    write_bulk(out, key);
    write_array_header(out, items.len());
    for (member, score) in items {
        write_array_header(out, 2);
        write_bulk(out, member);
        write_score(out, *score, resp3);
    }
}

fn cmd_zmpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let (keys, max, count) = parse_mpop(args, 1)?;
    let (db, resp3) = (ctx.db(), ctx.resp3());
    let scope: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    match ctx.write(&scope, |t| pop_first(t, db, keys, max, count))? {
        Some((i, items)) => write_mpop(out, &keys[i], &items, resp3),
        None => write_nil_array(out, resp3),
    }
    Ok(Action::Continue)
}

fn cmd_bzmpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let (all, max, count) = parse_mpop(args, 2)?;
    let timeout = parse_timeout(&args[1])?;
    let (db, resp3) = (ctx.db(), ctx.resp3());
    let ready = ctx.ready_keys(all, Kind::ZSet)?;
    if ready.as_ref().is_some_and(Vec::is_empty) {
        return Ok(nothing_to_pop(ctx.in_exec(), resp3, db, all, timeout, out));
    }
    let keys = ready.as_deref().unwrap_or(all);
    let scope: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    match ctx.write(&scope, |t| pop_first(t, db, keys, max, count))? {
        Some((i, items)) => write_mpop(out, &keys[i], &items, resp3),
        None => return Ok(nothing_to_pop(ctx.in_exec(), resp3, db, all, timeout, out)),
    }
    Ok(Action::Continue)
}

// ---------------------------------------------------------------------------------------------
// ZRANDMEMBER, ZSCAN
// ---------------------------------------------------------------------------------------------

/// Most members one ZRANDMEMBER with a negative count returns (Redis has no bound and would
/// build the reply until memory runs out); larger counts are refused as out of range.
const RANDMEMBER_REPEATS_MAX: u64 = 1 << 24;

fn cmd_zrandmember(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let (db, resp3, key) = (ctx.db(), ctx.resp3(), &args[1]);
    let Some(count_arg) = args.get(2) else {
        let member = ctx.read(&[key], |t| {
            if !zset_exists(t, db, key)? {
                return Ok(None);
            }
            let len = t.zset_len(db, key);
            let rank = random_below(len.max(1));
            Ok(t.zset_range(db, key, rank, rank + 1).pop())
        })?;
        match member {
            Some((member, _)) => write_bulk(out, &member),
            None => write_null(out, resp3),
        }
        return Ok(Action::Continue);
    };
    let count = parse_int(count_arg)?;
    if count == i64::MIN {
        return Err(err(
            "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        ));
    }
    let with_scores = match args.get(3) {
        None => false,
        Some(word) if args.len() == 4 && is(word, "withscores") => true,
        Some(_) => return Err(CommandError::Syntax),
    };
    let out_of_range = || err("ERR value is out of range");
    if with_scores && count.unsigned_abs() > (i64::MAX / 2) as u64 {
        return Err(out_of_range());
    }
    if count < 0 && count.unsigned_abs() > RANDMEMBER_REPEATS_MAX {
        return Err(out_of_range());
    }
    let items = ctx.read(&[key], |t| {
        if !zset_exists(t, db, key)? || count == 0 {
            return Ok(Vec::new());
        }
        let len = t.zset_len(db, key);
        Ok(random_members(t, db, key, len, count))
    })?;
    write_members(out, &items, with_scores, resp3);
    Ok(Action::Continue)
}

/// ZRANDMEMBER's choice: `-n` draws n members with repetition; `n` at least the size returns
/// the whole set (highest first, as Redis walks it); otherwise n distinct members, in the set's
/// order for a small set (as Redis samples its compact encoding), else in random order.
fn random_members(t: &dyn View, db: Db, key: &[u8], len: u64, count: i64) -> Scored {
    let one = |rank: u64| t.zset_range(db, key, rank, rank + 1).pop();
    if count < 0 {
        return (0..count.unsigned_abs())
            .filter_map(|_| one(random_below(len)))
            .collect();
    }
    let count = count as u64;
    if count >= len {
        let mut all = t.zset_range(db, key, 0, len);
        all.reverse();
        return all;
    }
    if len <= ZSET_COMPACT_LEN && count > 1 {
        // Redis samples a small set's distinct members in the set's own order.
        let all = t.zset_range(db, key, 0, len);
        let mut ranks: Vec<usize> = (0..all.len()).collect();
        for i in 0..count as usize {
            let j = i + random_below((ranks.len() - i) as u64) as usize;
            ranks.swap(i, j);
        }
        ranks.truncate(count as usize);
        ranks.sort_unstable();
        return ranks.into_iter().map(|r| all[r].clone()).collect();
    }
    if count * 3 > len {
        // Most of the set: shuffle it and keep a prefix.
        let mut all = t.zset_range(db, key, 0, len);
        for i in 0..count as usize {
            let j = i + random_below((all.len() - i) as u64) as usize;
            all.swap(i, j);
        }
        all.truncate(count as usize);
        return all;
    }
    let mut seen = std::collections::HashSet::new();
    let mut items = Vec::with_capacity(count as usize);
    while (items.len() as u64) < count {
        let rank = random_below(len);
        if seen.insert(rank) {
            items.extend(one(rank));
        }
    }
    items
}

/// Members longer than this keep a Redis sorted set out of its compact encoding
/// (`zset-max-listpack-value`): such sets are scanned in steps even when small.
const ZSET_COMPACT_MEMBER_BYTES: usize = 64;

/// Parses a SCAN cursor like Redis's `strtoul` call: optional sign (a negative cursor wraps),
/// digits, no leading space, no overflow; an empty cursor is 0.
fn parse_cursor(arg: &[u8]) -> Result<u64, CommandError> {
    let invalid = || err("ERR invalid cursor");
    if arg.is_empty() {
        return Ok(0);
    }
    let (negative, digits) = match arg.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, arg),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(invalid());
    }
    let mut value: u64 = 0;
    for d in digits {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d - b'0')))
            .ok_or_else(invalid)?;
    }
    Ok(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

/// A score as a cursor: order-preserving and never 0 (which starts a scan).
fn score_cursor(score: f64) -> u64 {
    let bits = (score + 0.0).to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

fn cursor_score(cursor: u64) -> f64 {
    if cursor >> 63 == 1 {
        f64::from_bits(cursor & !(1 << 63))
    } else {
        f64::from_bits(!cursor)
    }
}

/// What one ZSCAN step returns.
struct ScanStep {
    next: u64,
    items: Scored,
    /// The set is small: its scores print as Redis's compact encoding prints them.
    compact: bool,
}

/// One step of a ZSCAN: small sets whole (cursor 0 next); larger ones in score order, about
/// `count` members a step and every member of the last score seen, the cursor being the next
/// score. Members present for the whole scan with an unchanged score are returned.
fn zscan_step(t: &dyn View, db: Db, key: &[u8], cursor: u64, count: u64) -> ScanStep {
    let len = t.zset_len(db, key);
    // Like Redis's compact encoding, a small set ignores the cursor.
    if len <= ZSET_COMPACT_LEN {
        let all = t.zset_range(db, key, 0, len);
        if all
            .iter()
            .all(|(m, _)| m.len() <= ZSET_COMPACT_MEMBER_BYTES)
        {
            return ScanStep {
                next: 0,
                items: all,
                compact: true,
            };
        }
    }
    let (next, items) = zscan_scored(t, db, key, cursor, count);
    ScanStep {
        next,
        items,
        compact: false,
    }
}

/// The cursor-driven part of [`zscan_step`].
fn zscan_scored(t: &dyn View, db: Db, key: &[u8], cursor: u64, count: u64) -> (u64, Scored) {
    let start = match cursor {
        0 => 0,
        c => {
            let score = cursor_score(c);
            if score.is_nan() {
                return (0, Vec::new());
            }
            t.zset_rank_of_score(
                db,
                key,
                ScoreBound {
                    score,
                    exclusive: false,
                },
            )
        }
    };
    let first = t.zset_range(db, key, start, start.saturating_add(count));
    let Some(&(_, last)) = first.last() else {
        return (0, Vec::new());
    };
    let end = t.zset_rank_above(
        db,
        key,
        ScoreBound {
            score: last,
            exclusive: false,
        },
    );
    let mut items = first;
    if end > start + items.len() as u64 {
        items.extend(t.zset_range(db, key, start + items.len() as u64, end));
    }
    let next = t
        .zset_range(db, key, end, end + 1)
        .first()
        .map_or(0, |&(_, score)| score_cursor(score));
    (next, items)
}

fn cmd_zscan(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    let cursor = parse_cursor(&args[2])?;
    let (db, key) = (ctx.db(), &args[1]);
    let step = ctx.read(&[key], |t| {
        // A missing key answers an empty scan before the options are looked at.
        if !zset_exists(t, db, key)? {
            return Ok(ScanStep {
                next: 0,
                items: Vec::new(),
                compact: true,
            });
        }
        let mut pattern: Option<&[u8]> = None;
        let mut count: u64 = 10;
        let mut j = 3;
        while j < args.len() {
            let Some(value) = args.get(j + 1) else {
                return Err(CommandError::Syntax);
            };
            if is(&args[j], "count") {
                let n = parse_int(value)?;
                if n < 1 {
                    return Err(CommandError::Syntax);
                }
                count = n as u64;
            } else if is(&args[j], "match") {
                pattern = (value.as_slice() != b"*").then_some(value.as_slice());
            } else {
                return Err(CommandError::Syntax);
            }
            j += 2;
        }
        let count = count.min(SCAN_COUNT_MAX as u64);
        let mut step = zscan_step(t, db, key, cursor, count);
        if let Some(p) = pattern {
            step.items.retain(|(m, _)| glob_match(p, m));
        }
        Ok(step)
    })?;
    // Scores are bulk strings in both protocols, as Redis sends them.
    write_array_header(out, 2);
    write_bulk(out, step.next.to_string().as_bytes());
    write_array_header(out, step.items.len() * 2);
    for (member, score) in &step.items {
        write_bulk(out, member);
        let text = if step.compact {
            format_compact_score(*score)
        } else {
            format_score(*score)
        };
        write_bulk(out, text.as_bytes());
    }
    Ok(Action::Continue)
}

// ---------------------------------------------------------------------------------------------
// ZUNION, ZINTER, ZDIFF (+STORE), ZINTERCARD
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    /// Folds `value` into `target` as Redis's `zunionInterAggregate` does (a sum of opposite
    /// infinities is 0).
    fn fold(self, target: &mut f64, value: f64) {
        match self {
            Aggregate::Sum => {
                *target += value;
                if target.is_nan() {
                    *target = 0.0;
                }
            }
            Aggregate::Min => {
                if value < *target {
                    *target = value;
                }
            }
            Aggregate::Max => {
                if value > *target {
                    *target = value;
                }
            }
        }
    }
}

/// The options after the keys of a set operation.
#[derive(Debug, Clone)]
struct SetOpOptions {
    weights: Vec<f64>,
    aggregate: Aggregate,
    with_scores: bool,
    /// ZINTERCARD's LIMIT (0: none).
    limit: u64,
}

fn parse_setop_options(
    rest: &[Vec<u8>],
    keys: usize,
    op: SetOp,
    store: bool,
    card_only: bool,
) -> Result<SetOpOptions, CommandError> {
    let mut options = SetOpOptions {
        weights: vec![1.0; keys],
        aggregate: Aggregate::Sum,
        with_scores: false,
        limit: 0,
    };
    let weighted = op != SetOp::Diff && !card_only;
    let mut j = 0;
    while j < rest.len() {
        let remaining = rest.len() - j;
        let word = &rest[j];
        if weighted && remaining > keys && is(word, "weights") {
            for (i, arg) in rest[j + 1..=j + keys].iter().enumerate() {
                options.weights[i] =
                    parse_score_arg(arg).ok_or_else(|| err("ERR weight value is not a float"))?;
            }
            j += 1 + keys;
        } else if weighted && remaining >= 2 && is(word, "aggregate") {
            let how = &rest[j + 1];
            options.aggregate = if is(how, "sum") {
                Aggregate::Sum
            } else if is(how, "min") {
                Aggregate::Min
            } else if is(how, "max") {
                Aggregate::Max
            } else {
                return Err(CommandError::Syntax);
            };
            j += 2;
        } else if !store && !card_only && is(word, "withscores") {
            options.with_scores = true;
            j += 1;
        } else if card_only && remaining >= 2 && is(word, "limit") {
            options.limit = parse_positive(&rest[j + 1], "ERR LIMIT can't be negative")? as u64;
            j += 2;
        } else {
            return Err(CommandError::Syntax);
        }
    }
    Ok(options)
}

/// One input of a set operation: a sorted set, a set (every member scores 1) or nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Input {
    Missing,
    ZSet,
    Set,
}

impl Input {
    fn of(t: &dyn View, db: Db, key: &[u8]) -> Result<Input, CommandError> {
        match t.kind(db, key) {
            None => Ok(Input::Missing),
            Some(Kind::ZSet) => Ok(Input::ZSet),
            Some(Kind::Set) => Ok(Input::Set),
            Some(_) => Err(wrongtype()),
        }
    }

    fn len(self, t: &dyn View, db: Db, key: &[u8]) -> u64 {
        match self {
            Input::Missing => 0,
            Input::ZSet => t.zset_len(db, key),
            Input::Set => t.set_len(db, key),
        }
    }

    fn members(self, t: &dyn View, db: Db, key: &[u8]) -> Scored {
        match self {
            Input::Missing => Vec::new(),
            Input::ZSet => {
                let len = t.zset_len(db, key);
                t.zset_range(db, key, 0, len)
            }
            Input::Set => t
                .set_members(db, key)
                .into_iter()
                .map(|m| (m, 1.0))
                .collect(),
        }
    }

    fn score(self, t: &dyn View, db: Db, key: &[u8], member: &[u8]) -> Option<f64> {
        match self {
            Input::Missing => None,
            Input::ZSet => t.zset_score(db, key, member),
            Input::Set => t.set_contains(db, key, member).then_some(1.0),
        }
    }
}

/// The result of a set operation: members with scores (unordered), or for ZINTERCARD the
/// count alone.
fn compute_setop(
    t: &dyn View,
    db: Db,
    keys: &[Vec<u8>],
    inputs: &[Input],
    op: SetOp,
    options: &SetOpOptions,
    card_only: bool,
) -> (Scored, u64) {
    let weight = |i: usize| options.weights[i];
    let mut result = Vec::new();
    match op {
        SetOp::Union | SetOp::Inter => {
            // Smallest input first, as Redis orders them (ties keep their order), so sums
            // add up in Redis's order.
            let mut order: Vec<usize> = (0..keys.len()).collect();
            order.sort_by_key(|&i| inputs[i].len(t, db, &keys[i]));
            if op == SetOp::Union {
                let mut index: HashMap<Bytes, usize> = HashMap::new();
                for &i in &order {
                    for (member, score) in inputs[i].members(t, db, &keys[i]) {
                        let mut value = weight(i) * score;
                        if value.is_nan() {
                            value = 0.0;
                        }
                        match index.get(&member) {
                            Some(&at) => {
                                let target: &mut (Bytes, f64) = &mut result[at];
                                options.aggregate.fold(&mut target.1, value);
                            }
                            None => {
                                index.insert(member.clone(), result.len());
                                result.push((member, value));
                            }
                        }
                    }
                }
            } else {
                let first = order[0];
                let mut cardinality = 0;
                'members: for (member, score) in inputs[first].members(t, db, &keys[first]) {
                    let mut total = weight(first) * score;
                    if total.is_nan() {
                        total = 0.0;
                    }
                    for &i in &order[1..] {
                        let Some(value) = inputs[i].score(t, db, &keys[i], &member) else {
                            continue 'members;
                        };
                        options.aggregate.fold(&mut total, value * weight(i));
                    }
                    if card_only {
                        cardinality += 1;
                        if options.limit > 0 && cardinality >= options.limit {
                            break;
                        }
                    } else {
                        result.push((member, total));
                    }
                }
                if card_only {
                    return (result, cardinality);
                }
            }
        }
        SetOp::Diff => {
            for (member, score) in inputs[0].members(t, db, &keys[0]) {
                let elsewhere =
                    (1..keys.len()).any(|i| inputs[i].score(t, db, &keys[i], &member).is_some());
                if !elsewhere {
                    result.push((member, score));
                }
            }
        }
    }
    sort_members(&mut result);
    let n = result.len() as u64;
    (result, n)
}

/// Orders members by score, then by member bytes (the two zeros compare equal).
fn sort_members(items: &mut [(Bytes, f64)]) {
    items.sort_by(|a, b| {
        a.1.partial_cmp(&b.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.0.cmp(&b.0))
    });
}

/// What a set operation answers.
enum SetOpReply {
    /// A count (the STORE forms, ZINTERCARD).
    Count(u64),
    /// The members in order, with their scores or not.
    Members(Scored, bool),
}

/// ZUNION/ZINTER/ZDIFF (`dst` None), their STORE forms, and ZINTERCARD (`card_only`), with
/// `numkeys` at `args[numkeys_at]`, as Redis 7.0's `zunionInterDiffGenericCommand`: the keys'
/// kinds are checked before the options are parsed.
fn setop(
    ctx: &mut Ctx<'_>,
    args: &[Vec<u8>],
    out: &mut Vec<u8>,
    name: &str,
    dst: Option<&[u8]>,
    op: SetOp,
    card_only: bool,
) -> CommandResult {
    let numkeys_at = if dst.is_some() { 2 } else { 1 };
    let numkeys = parse_int(&args[numkeys_at])?;
    if numkeys < 1 {
        return Err(CommandError::Other(format!(
            "ERR at least 1 input key is needed for '{name}' command"
        )));
    }
    let first = numkeys_at + 1;
    let keys_len = usize::try_from(numkeys)
        .ok()
        .filter(|&n| n <= args.len() - first)
        .ok_or(CommandError::Syntax)?;
    let keys = &args[first..first + keys_len];
    let options = parse_setop_options(
        &args[first + keys_len..],
        keys_len,
        op,
        dst.is_some(),
        card_only,
    );
    let (db, resp3) = (ctx.db(), ctx.resp3());
    let mut scope: Vec<&[u8]> = dst.into_iter().collect();
    scope.extend(keys.iter().map(Vec::as_slice));
    let body = |t: &mut dyn Txn| -> Result<SetOpReply, CommandError> {
        let inputs = keys
            .iter()
            .map(|k| Input::of(t, db, k))
            .collect::<Result<Vec<_>, _>>()?;
        let options = options?;
        let (items, n) = compute_setop(t, db, keys, &inputs, op, &options, card_only);
        Ok(match dst {
            Some(dst) => SetOpReply::Count(store_result(t, db, dst, items)?),
            None if card_only => SetOpReply::Count(n),
            None => SetOpReply::Members(items, options.with_scores),
        })
    };
    let reply = if dst.is_some() {
        ctx.write(&scope, body)?
    } else {
        ctx.read(&scope, body)?
    };
    match reply {
        SetOpReply::Count(n) => return write_count(out, n),
        SetOpReply::Members(items, with_scores) => write_members(out, &items, with_scores, resp3),
    }
    Ok(Action::Continue)
}

fn cmd_zunion(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    setop(ctx, args, out, "zunion", None, SetOp::Union, false)
}

fn cmd_zinter(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    setop(ctx, args, out, "zinter", None, SetOp::Inter, false)
}

fn cmd_zdiff(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    setop(ctx, args, out, "zdiff", None, SetOp::Diff, false)
}

fn cmd_zintercard(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    setop(ctx, args, out, "zintercard", None, SetOp::Inter, true)
}

fn cmd_zunionstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    setop(
        ctx,
        args,
        out,
        "zunionstore",
        Some(&args[1]),
        SetOp::Union,
        false,
    )
}

fn cmd_zinterstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    setop(
        ctx,
        args,
        out,
        "zinterstore",
        Some(&args[1]),
        SetOp::Inter,
        false,
    )
}

fn cmd_zdiffstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>], out: &mut Vec<u8>) -> CommandResult {
    setop(
        ctx,
        args,
        out,
        "zdiffstore",
        Some(&args[1]),
        SetOp::Diff,
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::{Keyspace, MemoryKeyspace, Scope};

    #[test]
    fn scores_format_like_redis_7_0() {
        let cases: &[(f64, &str)] = &[
            (1.0, "1"),
            (-1.0, "-1"),
            (0.0, "0"),
            (-0.0, "-0"),
            (1.1, "1.1000000000000001"),
            (1.5, "1.5"),
            (0.1, "0.10000000000000001"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (3.0e-5, "3.0000000000000001e-05"),
            (1.25e-7, "1.2499999999999999e-07"),
            (-1e-7, "-9.9999999999999995e-08"),
            (123.456, "123.456"),
            (-123.456, "-123.456"),
            (100.0, "100"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (1e20, "1e+20"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (-2.5e300, "-2.5000000000000001e+300"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "4.9406564584124654e-324"),
            (1e-320, "9.9998886718268301e-321"),
            (0.6000000000000001, "0.60000000000000009"),
            (99999999999999999.0, "1e+17"),
        ];
        for (value, want) in cases {
            assert_eq!(format_score(*value), *want, "{value:e}");
        }
    }

    #[test]
    fn compact_scores_print_whole_numbers_as_integers() {
        let cases: &[(f64, &str)] = &[
            (1e17, "100000000000000000"),
            (123456789012345678.0, "123456789012345680"),
            (4611686018427387904.0, "4611686018427387904"),
            (-4611686018427387904.0, "-4611686018427387904"),
            (4611686018427388928.0, "4.6116860184273889e+18"),
            (2.5, "2.5"),
            (1.1, "1.1000000000000001"),
            (-0.0, "0"),
            (f64::INFINITY, "inf"),
        ];
        for (value, want) in cases {
            assert_eq!(format_compact_score(*value), *want, "{value:e}");
        }
    }

    fn bound(score: f64, exclusive: bool) -> ScoreBound {
        ScoreBound { score, exclusive }
    }

    #[test]
    fn score_bounds_parse_like_zsl_parse_range() {
        let ok: &[(&[u8], ScoreBound)] = &[
            (b"(1", bound(1.0, true)),
            (b"-inf", bound(f64::NEG_INFINITY, false)),
            (b"(+inf", bound(f64::INFINITY, true)),
            (b"( 1", bound(1.0, true)),
            (b" 1", bound(1.0, false)),
            (b"1e400", bound(f64::INFINITY, false)),
            (b"-1e400", bound(f64::NEG_INFINITY, false)),
            (b"(", bound(0.0, true)),
            (b"", bound(0.0, false)),
        ];
        for (text, want) in ok {
            assert_eq!(parse_score_bound(text), Ok(*want), "{text:?}");
        }
        assert!(parse_score_bound(b"-0").unwrap().score.is_sign_positive());
        for bad in [
            &b"x"[..],
            b"((1",
            b"nan",
            b"(nan",
            b"1 ",
            b"( ",
            b" ",
            b"+",
            b"(-",
        ] {
            assert_eq!(
                parse_score_bound(bad),
                Err(CommandError::MinMaxNotFloat),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn lex_bounds() {
        assert_eq!(parse_lex_bound(b"-"), Ok(LexBound::Min));
        assert_eq!(parse_lex_bound(b"+"), Ok(LexBound::Max));
        assert_eq!(
            parse_lex_bound(b"[a"),
            Ok(LexBound::Inclusive(b"a".to_vec()))
        );
        assert_eq!(
            parse_lex_bound(b"(a"),
            Ok(LexBound::Exclusive(b"a".to_vec()))
        );
        assert_eq!(parse_lex_bound(b"["), Ok(LexBound::Inclusive(Vec::new())));
        assert_eq!(
            parse_lex_bound(b"(("),
            Ok(LexBound::Exclusive(b"(".to_vec()))
        );
        for bad in [&b""[..], b"a", b"+a", b"-a", b"]"] {
            assert!(parse_lex_bound(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn score_arguments_keep_a_negative_zero() {
        assert!(parse_score_arg(b"-0").unwrap().is_sign_negative());
        assert!(parse_score_arg(b"-0.0e3").unwrap().is_sign_negative());
        assert!(parse_score_arg(b"0").unwrap().is_sign_positive());
        assert_eq!(parse_score_arg(b"-1.5"), Some(-1.5));
        assert_eq!(parse_score_arg(b"nan"), None);
        assert_eq!(parse_score_arg(b"1e400"), None);
    }

    #[test]
    fn timeouts_read_like_redis_7_0() {
        let secs = |ms: u64| Ok(Some(Duration::from_millis(ms)));
        assert_eq!(parse_timeout(b"0"), Ok(None));
        assert_eq!(parse_timeout(b"0.0001"), Ok(None));
        assert_eq!(parse_timeout(b"-0.0001"), Ok(None));
        assert_eq!(parse_timeout(b"1"), secs(1000));
        assert_eq!(parse_timeout(b"0.5"), secs(500));
        assert_eq!(parse_timeout(b"1.0019"), secs(1001));
        assert_eq!(
            parse_timeout(b"9223372036854775"),
            secs(9_223_372_036_854_775_000)
        );
        let negative = Err(err("ERR timeout is negative"));
        for text in [
            &b"-1"[..],
            b"-0.5",
            b"inf",
            b"1e30",
            b"9223372036854776",
            b"1e400",
        ] {
            assert_eq!(parse_timeout(text), negative, "{text:?}");
        }
        let not_float = Err(err("ERR timeout is not a float or out of range"));
        for text in [&b"x"[..], b"", b" 1", b"1 ", b"nan", b"1s"] {
            assert_eq!(parse_timeout(text), not_float, "{text:?}");
        }
    }

    #[test]
    fn cursors_read_like_strtoul() {
        assert_eq!(parse_cursor(b"0"), Ok(0));
        assert_eq!(parse_cursor(b""), Ok(0));
        assert_eq!(parse_cursor(b"+5"), Ok(5));
        assert_eq!(parse_cursor(b"-1"), Ok(u64::MAX));
        assert_eq!(parse_cursor(b"18446744073709551615"), Ok(u64::MAX));
        for bad in [
            &b"18446744073709551616"[..],
            b"-",
            b"+",
            b" 1",
            b"1 ",
            b"x",
            b"1.5",
        ] {
            assert!(parse_cursor(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn score_cursors_keep_order_and_are_never_zero() {
        let scores = [
            f64::NEG_INFINITY,
            -1e300,
            -1.5,
            -5e-324,
            0.0,
            5e-324,
            1.0,
            1e300,
            f64::INFINITY,
        ];
        for pair in scores.windows(2) {
            assert!(score_cursor(pair[0]) < score_cursor(pair[1]), "{pair:?}");
        }
        for s in scores {
            assert_ne!(score_cursor(s), 0);
            assert_eq!(cursor_score(score_cursor(s)), s);
        }
        assert_eq!(score_cursor(-0.0), score_cursor(0.0));
    }

    #[test]
    fn rank_spans_clamp_like_redis() {
        assert_eq!(rank_span(5, 0, -1), Some((0, 5)));
        assert_eq!(rank_span(5, -2, -1), Some((3, 5)));
        assert_eq!(rank_span(5, -100, 100), Some((0, 5)));
        assert_eq!(rank_span(5, 3, 1), None);
        assert_eq!(rank_span(5, 5, 10), None);
        assert_eq!(rank_span(5, 0, -6), None);
        assert_eq!(rank_span(0, 0, -1), None);
        assert_eq!(rank_span(5, i64::MIN, i64::MAX), Some((0, 5)));
    }

    #[test]
    fn limits_count_from_the_range_start_or_top() {
        assert_eq!(apply_limit(2, 7, None, false), (2, 7));
        assert_eq!(apply_limit(2, 7, Some((1, 2)), false), (3, 5));
        assert_eq!(apply_limit(2, 7, Some((1, 2)), true), (4, 6));
        assert_eq!(apply_limit(2, 7, Some((1, -1)), false), (3, 7));
        assert_eq!(apply_limit(2, 7, Some((1, -1)), true), (2, 6));
        assert_eq!(apply_limit(2, 7, Some((0, 0)), false), (2, 2));
        assert_eq!(apply_limit(2, 7, Some((-1, 2)), false), (2, 2));
        assert_eq!(apply_limit(2, 7, Some((5, 2)), false), (2, 2));
        assert_eq!(apply_limit(2, 7, Some((4, 100)), true), (2, 3));
        assert_eq!(apply_limit(2, 7, Some((i64::MAX, i64::MAX)), false), (2, 2));
    }

    fn keyspace_with(keys: &[(&str, Value)]) -> MemoryKeyspace {
        let ks = MemoryKeyspace::new();
        let effects: Vec<Effect> = keys
            .iter()
            .map(|(k, v)| Effect::Put {
                db: 0,
                key: k.as_bytes().to_vec(),
                value: v.clone(),
                expire_at_ms: 0,
            })
            .collect();
        ks.transact(Scope::All, true, &mut |t| t.apply(effects.clone()))
            .unwrap();
        ks
    }

    fn zset(pairs: &[(f64, &str)]) -> Value {
        Value::ZSet(
            pairs
                .iter()
                .map(|(s, m)| (*s, m.as_bytes().to_vec()))
                .collect(),
        )
    }

    fn keys(names: &[&str]) -> Vec<Vec<u8>> {
        names.iter().map(|k| k.as_bytes().to_vec()).collect()
    }

    /// Runs `f` in a write transaction of `ks` and returns what it returned.
    fn in_txn<R>(ks: &MemoryKeyspace, f: impl FnOnce(&mut dyn Txn) -> R) -> R {
        let mut f = Some(f);
        let mut result = None;
        ks.transact(Scope::All, true, &mut |t| {
            if let Some(f) = f.take() {
                result = Some(f(t));
            }
            Ok(())
        })
        .unwrap();
        result.unwrap()
    }

    #[test]
    fn pop_first_skips_absent_keys_and_refuses_other_kinds() {
        let ks = keyspace_with(&[
            ("z", zset(&[(1.0, "a"), (2.0, "b"), (3.0, "c")])),
            ("s", Value::String(b"x".to_vec())),
        ]);
        let popped = in_txn(&ks, |t| {
            pop_first(t, 0, &keys(&["none", "z", "s"]), true, 2)
        });
        assert_eq!(
            popped,
            Ok(Some((1, vec![(b"c".to_vec(), 3.0), (b"b".to_vec(), 2.0)])))
        );
        let popped = in_txn(&ks, |t| pop_first(t, 0, &keys(&["z"]), false, 5));
        assert_eq!(popped, Ok(Some((0, vec![(b"a".to_vec(), 1.0)]))));
        // The emptied set is gone, so nothing is left to pop.
        assert_eq!(
            in_txn(&ks, |t| pop_first(t, 0, &keys(&["z"]), false, 1)),
            Ok(None)
        );
        assert_eq!(
            in_txn(&ks, |t| pop_first(
                t,
                0,
                &keys(&["none", "s", "z"]),
                false,
                1
            )),
            Err(wrongtype())
        );
    }

    #[test]
    fn a_blocking_pop_with_nothing_to_pop_blocks_outside_exec() {
        let mut out = Vec::new();
        let action = nothing_to_pop(
            false,
            false,
            3,
            &keys(&["a", "b"]),
            Some(Duration::from_secs(5)),
            &mut out,
        );
        let Action::Block {
            keys: blocked,
            deadline,
        } = action
        else {
            panic!("expected Block, got {action:?}");
        };
        assert_eq!(blocked, vec![(3, b"a".to_vec()), (3, b"b".to_vec())]);
        let deadline = deadline.expect("a deadline");
        assert!(deadline > Instant::now() + Duration::from_secs(1));
        assert!(out.is_empty(), "a blocked command writes no reply");
        let forever = nothing_to_pop(false, true, 0, &keys(&["a"]), None, &mut out);
        assert_eq!(
            forever,
            Action::Block {
                keys: vec![(0, b"a".to_vec())],
                deadline: None
            }
        );
        assert!(out.is_empty());
        // Inside EXEC: the timeout reply at once, in the connection's protocol.
        let action = nothing_to_pop(true, false, 0, &keys(&["a"]), None, &mut out);
        assert_eq!(
            (action, out.as_slice()),
            (Action::Continue, &b"*-1\r\n"[..])
        );
        out.clear();
        let action = nothing_to_pop(true, true, 0, &keys(&["a"]), None, &mut out);
        assert_eq!((action, out.as_slice()), (Action::Continue, &b"_\r\n"[..]));
    }

    #[test]
    fn zadd_applies_pairs_in_order() {
        let ks = keyspace_with(&[("z", zset(&[(1.0, "a"), (5.0, "b")]))]);
        let pairs: [(f64, &[u8]); 4] = [(2.0, b"a"), (3.0, b"a"), (0.0, b"c"), (5.0, b"b")];
        let outcome = in_txn(&ks, |t| zadd_apply(t, 0, b"z", AddFlags::default(), &pairs)).unwrap();
        assert_eq!((outcome.added, outcome.updated), (1, 2));
        let gt = AddFlags {
            gt: true,
            ..AddFlags::default()
        };
        let pairs: [(f64, &[u8]); 2] = [(1.0, b"a"), (9.0, b"b")];
        let outcome = in_txn(&ks, |t| zadd_apply(t, 0, b"z", gt, &pairs)).unwrap();
        assert_eq!((outcome.added, outcome.updated), (0, 1));
        let all = in_txn(&ks, |t| t.zset_range(0, b"z", 0, 10));
        assert_eq!(
            all,
            vec![
                (b"c".to_vec(), 0.0),
                (b"a".to_vec(), 3.0),
                (b"b".to_vec(), 9.0)
            ]
        );
        let incr = AddFlags {
            incr: true,
            ..AddFlags::default()
        };
        let inf: [(f64, &[u8]); 1] = [(f64::INFINITY, b"a")];
        in_txn(&ks, |t| zadd_apply(t, 0, b"z", incr, &inf)).unwrap();
        let minus_inf: [(f64, &[u8]); 1] = [(f64::NEG_INFINITY, b"a")];
        let nan = in_txn(&ks, |t| zadd_apply(t, 0, b"z", incr, &minus_inf));
        assert_eq!(
            nan.unwrap_err(),
            err("ERR resulting score is not a number (NaN)")
        );
        assert_eq!(
            in_txn(&ks, |t| t.zset_score(0, b"z", b"a")),
            Some(f64::INFINITY)
        );
    }

    /// Every member present for a whole large-set scan, with its score unchanged, is returned,
    /// while other members come and go between the steps.
    #[test]
    fn large_scans_cover_every_steady_member() {
        let steady: Vec<(f64, String)> = (0..600)
            .map(|i| (f64::from(i % 37), format!("m{i:04}")))
            .collect();
        let pairs: Vec<(f64, &str)> = steady.iter().map(|(s, m)| (*s, m.as_str())).collect();
        let ks = keyspace_with(&[("z", zset(&pairs))]);
        let mut seen = std::collections::HashSet::new();
        let mut cursor = 0;
        for step in 0.. {
            assert!(step < 1000, "the scan ends");
            let result = in_txn(&ks, |t| zscan_step(t, 0, b"z", cursor, 7));
            assert!(!result.compact);
            for (member, score) in &result.items {
                assert_eq!(in_txn(&ks, |t| t.zset_score(0, b"z", member)), Some(*score));
                seen.insert(member.clone());
            }
            // Churn: add and remove other members around the cursor.
            let churn = format!("churn{step}").into_bytes();
            in_txn(&ks, |t| {
                t.apply(vec![
                    Effect::ZAdd {
                        db: 0,
                        key: b"z".to_vec(),
                        members: vec![(f64::from(step % 40), churn.clone())],
                    },
                    Effect::ZRem {
                        db: 0,
                        key: b"z".to_vec(),
                        members: vec![format!("churn{}", step / 2).into_bytes()],
                    },
                ])
            })
            .unwrap();
            cursor = result.next;
            if cursor == 0 {
                break;
            }
        }
        for (_, member) in &steady {
            assert!(seen.contains(member.as_bytes()), "{member} missed");
        }
    }

    #[test]
    fn random_members_follow_the_count_rules() {
        let pairs: Vec<(f64, String)> = (0..50).map(|i| (f64::from(i), format!("m{i}"))).collect();
        let refs: Vec<(f64, &str)> = pairs.iter().map(|(s, m)| (*s, m.as_str())).collect();
        let ks = keyspace_with(&[("z", zset(&refs))]);
        for count in [1, 5, 20, 49] {
            let items = in_txn(&ks, |t| random_members(t, 0, b"z", 50, count));
            assert_eq!(items.len() as i64, count);
            let distinct: std::collections::HashSet<_> = items.iter().map(|(m, _)| m).collect();
            assert_eq!(distinct.len() as i64, count, "distinct members");
            assert!(
                items.windows(2).all(|w| w[0].1 < w[1].1),
                "a small set's sample comes in the set's order"
            );
            for (member, score) in &items {
                assert_eq!(in_txn(&ks, |t| t.zset_score(0, b"z", member)), Some(*score));
            }
        }
        let all = in_txn(&ks, |t| random_members(t, 0, b"z", 50, 80));
        assert_eq!(all.len(), 50);
        assert_eq!(
            all[0].0,
            b"m49".to_vec(),
            "the whole set comes highest first"
        );
        let big: Vec<(f64, String)> = (0..300).map(|i| (f64::from(i), format!("b{i}"))).collect();
        let big_refs: Vec<(f64, &str)> = big.iter().map(|(s, m)| (*s, m.as_str())).collect();
        let big_ks = keyspace_with(&[("big", zset(&big_refs))]);
        for count in [2, 50, 150, 299] {
            let items = in_txn(&big_ks, |t| random_members(t, 0, b"big", 300, count));
            let distinct: std::collections::HashSet<_> = items.iter().map(|(m, _)| m).collect();
            assert_eq!(
                distinct.len() as i64,
                count,
                "distinct members of a large set"
            );
        }
        let repeated = in_txn(&ks, |t| random_members(t, 0, b"z", 50, -500));
        assert_eq!(repeated.len(), 500);
        let distinct: std::collections::HashSet<_> = repeated.iter().map(|(m, _)| m).collect();
        assert!(distinct.len() > 1, "draws vary");
    }
}
