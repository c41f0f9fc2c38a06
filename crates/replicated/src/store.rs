//! What a replicated node keeps in its store besides the data: how far it applied the
//! replicated log (the applied mark, written in the same store transaction as each record's
//! effects), applying records and snapshots, and making snapshots.
//!
//! The mark is what lets a node keep its store across restarts and the log be trimmed: a store
//! whose mark says L holds exactly the effects of every record up to L (the mark and the
//! effects commit together, so a crash keeps both or neither), and needs only the records
//! after L. The log is trimmed no further than the lowest mark of the primary and its live
//! backups; a store whose mark is below what was trimmed gets a snapshot instead.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::collections::HashSet;

use model::{Bytes, DATABASES, Db, Effect, Keyspace, Scope, Value};
use replication::host::StoreSink;
use server::backend::Backend;
use server::oplog::Op;

/// The key of the applied mark (database 0). It starts with a NUL byte and is hidden from
/// SCAN, KEYS, DBSIZE and RANDOMKEY.
pub const MARK_KEY: &[u8] = b"\x00kavach:replicated-applied";
const MARK_DB: Db = 0;

/// Encoded effects per snapshot piece (a piece is one protocol frame).
pub const SNAPSHOT_PIECE_BYTES: usize = 1 << 20;

/// The log a store follows and the last record of it the store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// The replicated log's UUID.
    pub uuid: [u8; 16],
    /// Every record up to this LSN is applied.
    pub lsn: u64,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The effect that records `mark`.
pub fn mark_put(mark: Mark) -> Effect {
    Effect::Put {
        db: MARK_DB,
        key: MARK_KEY.to_vec(),
        // Fixed width, so a new mark overwrites the old one in place (see `put_mark`).
        value: Value::String(format!("{}:{:020}", hex(&mark.uuid), mark.lsn).into_bytes()),
        expire_at_ms: 0,
    }
}

/// The effect that forgets the mark (the store no longer matches any point of the log).
pub fn mark_del() -> Effect {
    Effect::Del {
        db: MARK_DB,
        key: MARK_KEY.to_vec(),
    }
}

/// Parse a mark's value; `None` if it is not 32 hex digits, `:`, 20 decimal digits.
pub fn parse_mark(v: &[u8]) -> Option<Mark> {
    let s = std::str::from_utf8(v).ok()?;
    let (u, l) = s.split_once(':')?;
    if u.len() != 32 || l.len() != 20 || !l.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut uuid = [0u8; 16];
    for (i, b) in uuid.iter_mut().enumerate() {
        *b = u8::from_str_radix(u.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(Mark {
        uuid,
        lsn: l.parse().ok()?,
    })
}

/// The store's mark, if it has a readable one.
pub fn read_mark(ks: &dyn Keyspace) -> Result<Option<Mark>, String> {
    let mut found = None;
    ks.transact(Scope::Keys(&[(MARK_DB, MARK_KEY)]), false, &mut |t| {
        found = t.string(MARK_DB, MARK_KEY);
        Ok(())
    })
    .map_err(|e| format!("cannot read the applied mark: {e}"))?;
    Ok(found.as_deref().and_then(parse_mark))
}

/// Whether `key` is the mark (hidden from keyspace-wide reads in every database: SWAPDB can
/// carry an old copy of it into another one).
pub fn is_mark(key: &[u8]) -> bool {
    key == MARK_KEY
}

/// Put the mark after `effects` in the transaction `t`; if the store refuses it (near its
/// capacity), forget the mark instead, which a store always takes: the node then rebuilds or
/// takes a snapshot at its next start rather than apply a record twice.
pub fn put_mark(t: &mut dyn model::Txn, mark: Mark) {
    if t.apply(vec![mark_put(mark)]).is_err() {
        let _ = t.apply(vec![mark_del()]);
    }
}

/// Apply `effects` and the mark in one transaction. A refusal of the effects (the store has
/// no room) still moves the mark (the record is then not readable here, as when it was first
/// written near capacity) and is returned.
pub fn apply_marked(ks: &dyn Keyspace, effects: &[Effect], mark: Mark) -> Result<(), String> {
    let mut refusal = None;
    ks.transact(Scope::All, true, &mut |t| {
        if let Err(e) = t.apply(effects.to_vec()) {
            refusal = Some(e.to_string());
        }
        put_mark(t, mark);
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    refusal.map_or(Ok(()), Err)
}

/// Set (or forget, with `None`) the mark alone.
pub fn set_mark(ks: &dyn Keyspace, mark: Option<Mark>) -> Result<(), String> {
    ks.transact(Scope::Keys(&[(MARK_DB, MARK_KEY)]), true, &mut |t| {
        match mark {
            Some(m) => put_mark(t, m),
            None => t.apply(vec![mark_del()])?,
        }
        Ok(())
    })
    .map_err(|e| format!("cannot write the applied mark: {e}"))
}

/// Apply one replicated record (its payload) to the store with its mark. `Err` names what the
/// store refused; the mark moves either way.
pub fn apply_record(inner: &dyn Backend, mark: Mark, payload: &[u8]) -> Result<(), String> {
    let op = Op::decode(payload).map_err(|e| format!("LSN {}: {e}", mark.lsn))?;
    match (&op, inner.keyspace()) {
        (Op::Effects(effects), Some(ks)) => {
            apply_marked(ks, effects, mark).map_err(|e| format!("LSN {}: {e}", mark.lsn))
        }
        (_, ks) => {
            // Records of the first format (one command each): applied, then marked.
            let r = op
                .apply(inner)
                .map_err(|e| format!("LSN {}: {e}", mark.lsn));
            if let Some(ks) = ks {
                set_mark(ks, Some(mark))?;
            }
            r
        }
    }
}

/// Empty the store (every database, the mark included).
pub fn empty(ks: &dyn Keyspace) -> Result<(), String> {
    ks.transact(Scope::All, true, &mut |t| t.apply(vec![Effect::FlushAll]))
        .map_err(|e| format!("cannot empty the store: {e}"))
}

/// Make a snapshot of `ks` and hand it to `send` piece by piece (encoded effects of at most
/// about [`SNAPSHOT_PIECE_BYTES`]), then an empty piece. Every key of every database but the
/// mark, with its value and deadline. The caller keeps writes out while it runs, so the
/// snapshot is the state at one LSN.
pub fn make_snapshot(
    ks: &dyn Keyspace,
    send: &mut dyn FnMut(Vec<u8>) -> Result<(), String>,
) -> Result<u64, String> {
    let keys = scan_pieces(ks, None, send)?;
    send(Vec::new())?;
    Ok(keys)
}

/// The pieces of [`make_snapshot`] without the final empty one; every key sent is added to
/// `names` when given. With writes going on, each key's value is the one it had when the scan
/// reached it.
pub fn scan_pieces(
    ks: &dyn Keyspace,
    mut names: Option<&mut HashSet<(Db, Bytes)>>,
    send: &mut dyn FnMut(Vec<u8>) -> Result<(), String>,
) -> Result<u64, String> {
    let mut piece: Vec<Effect> = Vec::new();
    let mut piece_bytes = 0usize;
    let mut keys = 0u64;
    for db in 0..DATABASES as Db {
        let mut cursor = 0;
        loop {
            let (next, infos) = ks
                .scan(db, cursor, 512)
                .map_err(|e| format!("snapshot: scan of db {db}: {e}"))?;
            let batch: Vec<(Db, &[u8])> = infos
                .iter()
                .filter(|i| !is_mark(&i.key))
                .map(|i| (db, i.key.as_slice()))
                .collect();
            let found = current_values(ks, &batch, false)?;
            for e in found {
                if let (Some(names), Some((db, key))) = (names.as_deref_mut(), e.key()) {
                    names.insert((db, key.to_vec()));
                }
                piece_bytes += effect_bytes(&e);
                piece.push(e);
                keys += 1;
                if piece_bytes >= SNAPSHOT_PIECE_BYTES {
                    send(model::encode_effects(&std::mem::take(&mut piece)))?;
                    piece_bytes = 0;
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    if !piece.is_empty() {
        send(model::encode_effects(&piece))?;
    }
    Ok(keys)
}

/// Each key's current value and deadline as a Put; a key that is absent gives a Del when
/// `absent_as_del`, else nothing. One read transaction.
pub fn current_values(
    ks: &dyn Keyspace,
    keys: &[(Db, &[u8])],
    absent_as_del: bool,
) -> Result<Vec<Effect>, String> {
    let mut found = Vec::with_capacity(keys.len());
    ks.transact(Scope::Keys(keys), false, &mut |t| {
        for &(db, key) in keys {
            match t.value(db, key) {
                Some(value) => found.push(Effect::Put {
                    db,
                    key: key.to_vec(),
                    value,
                    expire_at_ms: t.expire_at(db, key).unwrap_or(0),
                }),
                None if absent_as_del => found.push(Effect::Del {
                    db,
                    key: key.to_vec(),
                }),
                None => {}
            }
        }
        Ok(())
    })
    .map_err(|e| format!("snapshot: read: {e}"))?;
    Ok(found)
}

/// Send `effects` as pieces of at most about [`SNAPSHOT_PIECE_BYTES`].
pub fn send_pieces(
    effects: Vec<Effect>,
    send: &mut dyn FnMut(Vec<u8>) -> Result<(), String>,
) -> Result<(), String> {
    let mut piece = Vec::new();
    let mut bytes = 0;
    for e in effects {
        bytes += effect_bytes(&e);
        piece.push(e);
        if bytes >= SNAPSHOT_PIECE_BYTES {
            send(model::encode_effects(&std::mem::take(&mut piece)))?;
            bytes = 0;
        }
    }
    if !piece.is_empty() {
        send(model::encode_effects(&piece))?;
    }
    Ok(())
}

/// Keys in every database, the mark not counted.
pub fn key_count(ks: &dyn Keyspace) -> Result<u64, String> {
    let mut n = 0;
    for db in 0..DATABASES as Db {
        n += ks
            .dbsize(db)
            .map_err(|e| format!("dbsize of db {db}: {e}"))?;
    }
    let mut mark = false;
    ks.transact(Scope::Keys(&[(MARK_DB, MARK_KEY)]), false, &mut |t| {
        mark = t.kind(MARK_DB, MARK_KEY).is_some();
        Ok(())
    })
    .map_err(|e| format!("cannot read the applied mark: {e}"))?;
    Ok(n - u64::from(mark))
}

fn effect_bytes(e: &Effect) -> usize {
    match e {
        Effect::Put { key, value, .. } => {
            key.len()
                + match value {
                    Value::String(s) => s.len(),
                    Value::Hash(h) => h.iter().map(|(a, b)| a.len() + b.len() + 8).sum(),
                    Value::List(l) => l.iter().map(|x| x.len() + 4).sum(),
                    other => format!("{other:?}").len(),
                }
        }
        _ => 64,
    }
}

/// A backup's store as the replication protocol sees it: its applied LSN, and the snapshots
/// the primary sends. The applier and a snapshot never run at once (`apply_lock`).
pub struct BackupStore {
    inner: Arc<dyn Backend>,
    applied: Arc<AtomicU64>,
    /// Held while records or a snapshot are applied; holds the next snapshot piece expected.
    pub apply_lock: Mutex<Option<u64>>,
    /// A snapshot is coming in (its first piece came, its last not yet).
    in_snapshot: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for BackupStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackupStore")
            .field("applied", &self.applied.load(Ordering::Acquire))
            .field("in_snapshot", &self.in_snapshot())
            .finish()
    }
}

impl BackupStore {
    /// Over `inner`, publishing its applied LSN in `applied`.
    pub fn new(inner: Arc<dyn Backend>, applied: Arc<AtomicU64>) -> BackupStore {
        BackupStore {
            inner,
            applied,
            apply_lock: Mutex::new(None),
            in_snapshot: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether a snapshot is coming in.
    pub fn in_snapshot(&self) -> bool {
        self.in_snapshot.load(Ordering::Acquire)
    }

    /// Give up a snapshot that was cut short (the caller holds `apply_lock` and empties the
    /// store).
    pub fn abandon_snapshot(&self, next: &mut Option<u64>) {
        *next = None;
        self.in_snapshot.store(false, Ordering::Release);
        self.applied.store(0, Ordering::Release);
    }

    /// Publish the applied LSN (after the store took the record and its mark).
    pub fn set_applied(&self, lsn: u64) {
        self.applied.store(lsn, Ordering::Release);
    }
}

impl StoreSink for BackupStore {
    fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    fn snapshot(
        &self,
        uuid: [u8; 16],
        lsn: u64,
        seq: u64,
        last: bool,
        data: &[u8],
    ) -> Result<(), String> {
        let ks = self
            .inner
            .keyspace()
            .ok_or("this backup's store has no data model")?;
        let mut next = self.apply_lock.lock().unwrap_or_else(|p| p.into_inner());
        if seq == 0 {
            self.in_snapshot.store(true, Ordering::Release);
            empty(ks)?;
            self.applied.store(0, Ordering::Release);
        } else if *next != Some(seq) {
            return Err(format!(
                "snapshot piece {seq} out of order (expected {})",
                next.map_or("piece 0".into(), |n| format!("piece {n}"))
            ));
        }
        *next = Some(seq + 1);
        if !data.is_empty() {
            let effects =
                model::decode_effects(data).map_err(|e| format!("snapshot piece {seq}: {e}"))?;
            ks.transact(Scope::All, true, &mut |t| t.apply(effects.clone()))
                .map_err(|e| format!("snapshot piece {seq}: the store refused it: {e}"))?;
        }
        if last {
            set_mark(ks, Some(Mark { uuid, lsn }))?;
            *next = None;
            self.in_snapshot.store(false, Ordering::Release);
            self.applied.store(lsn, Ordering::Release);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_round_trip_and_bad_ones_are_none() {
        let m = Mark {
            uuid: [0xab; 16],
            lsn: 12345,
        };
        let Effect::Put {
            value: Value::String(v),
            ..
        } = mark_put(m)
        else {
            panic!("a put");
        };
        assert_eq!(parse_mark(&v), Some(m));
        for bad in [
            &b""[..],
            b"abc:1",
            b"zz:1",
            &v[..32],
            &v[..v.len() - 1],
            b"00000000000000000000000000000000:x",
        ] {
            assert_eq!(parse_mark(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(is_mark(MARK_KEY));
        assert!(!is_mark(b"kavach:replicated-applied"));
    }
}
