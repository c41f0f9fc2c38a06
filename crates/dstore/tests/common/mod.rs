//! Set-up shared by several test files: the object workload and its model (the object crash
//! tests `objects.rs` and `objects_file.rs`), and reading a format document's constants table
//! (the `format_*` tests).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use dstore::Store;
use pmem::SimMedium;
use pmem::format_doc::{compare_constants, named_rows, verdict};
use pmem::rng::SplitMix64;

/// One object operation of a workload.
#[derive(Debug, Clone)]
pub enum ObjOp {
    /// `owrite` of `data` at `offset`.
    Write {
        name: Vec<u8>,
        offset: u64,
        data: Vec<u8>,
    },
    /// `DEL` of the object.
    Delete(Vec<u8>),
}

/// Object name to its bytes.
pub type Objects = BTreeMap<Vec<u8>, Vec<u8>>;

/// `n` operations on the objects `obj0` to `obj2`: one in ten a delete, the others a write
/// whose offset and length `place` draws; byte k of write i is `(31 k + 7 i + seed) | mark`.
pub fn workload(
    seed: u64,
    n: usize,
    mut place: impl FnMut(&mut SplitMix64) -> (u64, usize),
    mark: u8,
) -> Vec<ObjOp> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|i| {
            let name = format!("obj{}", rng.below(3)).into_bytes();
            if rng.below(10) == 0 {
                ObjOp::Delete(name)
            } else {
                let (offset, len) = place(&mut rng);
                let data = (0..len)
                    .map(|k| (k as u64 * 31 + i as u64 * 7 + seed) as u8 | mark)
                    .collect();
                ObjOp::Write { name, offset, data }
            }
        })
        .collect()
}

/// The model's effect of one operation.
pub fn apply(m: &mut Objects, op: &ObjOp) {
    match op {
        ObjOp::Write { name, offset, data } => {
            let o = m.entry(name.clone()).or_default();
            let end = *offset as usize + data.len();
            if o.len() < end {
                o.resize(end, 0);
            }
            o[*offset as usize..end].copy_from_slice(data);
        }
        ObjOp::Delete(name) => {
            m.remove(name);
        }
    }
}

/// The model's objects after each prefix of `ops` (index i: after i operations).
pub fn models(ops: &[ObjOp]) -> Vec<Objects> {
    let mut m = Objects::new();
    let mut v = vec![m.clone()];
    for op in ops {
        apply(&mut m, op);
        v.push(m.clone());
    }
    v
}

/// Run one operation on the store; whether it was acknowledged.
pub fn run(s: &Store<Arc<SimMedium>>, op: &ObjOp) -> bool {
    match op {
        ObjOp::Write { name, offset, data } => s.owrite(name, *offset, data).is_ok(),
        ObjOp::Delete(name) => s.del(&[name]).is_ok(),
    }
}

/// Run `ops` in order with a checkpoint after the operations whose index is in `save_after`,
/// then close; stops at the first operation or checkpoint that fails (a crash). Returns how many
/// operations were acknowledged.
pub fn run_all(s: &Store<Arc<SimMedium>>, ops: &[ObjOp], save_after: &[usize]) -> usize {
    let mut acked = 0;
    for (i, op) in ops.iter().enumerate() {
        if !run(s, op) {
            return acked;
        }
        acked += 1;
        if save_after.contains(&i) && s.save().is_err() {
            return acked;
        }
    }
    let _ = s.close();
    acked
}

/// The store's objects `obj0` to `obj2`, read whole.
pub fn contents(s: &Store<Arc<SimMedium>>) -> Objects {
    let mut out = Objects::new();
    for i in 0..3 {
        let name = format!("obj{i}").into_bytes();
        if let Some(size) = s.object_size(&name).unwrap() {
            let data = s.oread(&name, 0, size as usize).unwrap().unwrap();
            assert_eq!(data.len() as u64, size);
            out.insert(name, data);
        }
    }
    out
}

/// The text of `docs/format/NAME`.
pub fn format_doc(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/format")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Check the constants table after `marker` in `md` against `code`: every constant of the code
/// is in the table with the same value (`what` names the table in a failure).
pub fn check_constants(md: &str, marker: &str, what: &str, code: &[(&str, u64)]) {
    let rows = named_rows(md, marker, "| constant | value | meaning |", 0).unwrap();
    let doc: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r.name.to_string(),
                r.cells[1]
                    .parse()
                    .unwrap_or_else(|e| panic!("{}: {e}", r.line)),
            )
        })
        .collect();
    let required: Vec<&str> = code.iter().map(|c| c.0).collect();
    verdict(what, compare_constants(&doc, code, &required)).unwrap();
}
