//! What every crate's `tests/decode_props.rs` shares (included with `#[path]`): the seed corpus
//! of real encodings and the strategies that damage them.
//!
//! The corpus of a decoder lives in `crates/<crate>/tests/corpus/<decoder>/*.bin`. The files a
//! test names are real encodings: the test checks each against what the encoder produces today
//! (so the corpus doubles as a format regression check). To write them after a deliberate
//! format change, run the test with `KAVACH_BLESS_CORPUS=1`. Any other `.bin` file in the
//! directory (an input that once made a decoder panic) is decoded as it is.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

/// Set to write the corpus from the encoders instead of checking it.
pub const BLESS: &str = "KAVACH_BLESS_CORPUS";

/// Property-test settings: `cases` cases, no shrinking marathon, no files written on failure
/// (a failing input is added to the corpus by hand, named for what it found). The inputs are
/// the same on every run, so a failure reproduces; `PROPTEST_RNG_SEED=<n>` explores others.
pub fn config(cases: u32) -> Config {
    let base = Config::default();
    let rng_seed = if std::env::var_os("PROPTEST_RNG_SEED").is_some() {
        base.rng_seed
    } else {
        RngSeed::Fixed(0x6b61_7661_6368)
    };
    Config {
        cases,
        max_shrink_iters: 512,
        failure_persistence: None,
        rng_seed,
        ..base
    }
}

/// Where the corpus of `decoder` lives for the crate at `manifest_dir`.
pub fn corpus_dir(manifest_dir: &str, decoder: &str) -> PathBuf {
    Path::new(manifest_dir)
        .join("tests")
        .join("corpus")
        .join(decoder)
}

/// Check (or, with [`BLESS`], write) the named real encodings of `decoder`, then return every
/// input of its corpus, named ones and found ones, in file-name order.
pub fn corpus(
    manifest_dir: &str,
    decoder: &str,
    real: &[(&str, Vec<u8>)],
) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(manifest_dir, decoder);
    let bless = std::env::var_os(BLESS).is_some();
    if bless {
        std::fs::create_dir_all(&dir).expect("create the corpus directory");
    }
    for (name, bytes) in real {
        let path = dir.join(format!("{name}.bin"));
        if bless {
            std::fs::write(&path, bytes).expect("write a corpus file");
            continue;
        }
        let stored = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run with {BLESS}=1 to write the corpus)",
                path.display()
            )
        });
        assert!(
            stored == *bytes,
            "{} is not what the encoder writes today: a format change needs its document \
             updated and the corpus rewritten ({BLESS}=1)",
            path.display()
        );
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("corpus directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    files.sort();
    assert!(
        files.len() >= real.len(),
        "{}: fewer files than real encodings",
        dir.display()
    );
    files
        .into_iter()
        .map(|p| {
            let name = p
                .file_name()
                .expect("a file")
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read(&p).expect("read a corpus file"))
        })
        .collect()
}

/// One change to an input.
fn mutate(b: &mut Vec<u8>, kind: u8, at: u64, value: u64) {
    let len = b.len() as u64;
    match kind {
        // Flip one bit.
        0 if len > 0 => {
            let bit = at % (len * 8);
            b[(bit / 8) as usize] ^= 1 << (bit % 8);
        }
        // Cut the tail.
        1 => b.truncate((at % (len + 1)) as usize),
        // Extend with a run of one byte.
        2 => b.extend(std::iter::repeat_n(value as u8, (at % 64) as usize + 1)),
        // Set one byte.
        3 if len > 0 => b[(at % len) as usize] = value as u8,
        // Overwrite a 4-byte word (lengths, counts, tags).
        4 if len >= 4 => {
            let p = (at % (len - 3)) as usize;
            b[p..p + 4].copy_from_slice(&(value as u32).to_le_bytes());
        }
        // Overwrite an 8-byte word (offsets, sizes, sequence numbers).
        5 if len >= 8 => {
            let p = (at % (len - 7)) as usize;
            b[p..p + 8].copy_from_slice(&value.to_le_bytes());
        }
        // Small numbers in a 4-byte word: near-valid lengths and counts.
        6 if len >= 4 => {
            let p = (at % (len - 3)) as usize;
            b[p..p + 4].copy_from_slice(&((value % 70) as u32).to_le_bytes());
        }
        _ => {}
    }
}

/// A seed from `seeds`, damaged by one to four mutations (bit flips, truncations, extensions,
/// overwritten bytes and words).
pub fn mutated(seeds: Vec<Vec<u8>>) -> BoxedStrategy<Vec<u8>> {
    assert!(!seeds.is_empty(), "an empty corpus");
    let n = seeds.len();
    (
        0..n,
        prop::collection::vec((0u8..7, any::<u64>(), any::<u64>()), 1..5),
    )
        .prop_map(move |(i, changes)| {
            let mut b = seeds[i].clone();
            for (kind, at, value) in changes {
                mutate(&mut b, kind, at, value);
            }
            b
        })
        .boxed()
}

/// Arbitrary bytes, at most `max` of them.
pub fn bytes(max: usize) -> BoxedStrategy<Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..=max).boxed()
}

/// Arbitrary bytes, exactly `n` of them.
pub fn exact(n: usize) -> BoxedStrategy<Vec<u8>> {
    prop::collection::vec(any::<u8>(), n).boxed()
}

/// `b` cut or zero-padded to `n` bytes (for decoders that take a fixed-size array).
pub fn fit(b: &[u8], n: usize) -> Vec<u8> {
    let mut v = b.to_vec();
    v.resize(n, 0);
    v
}

/// Only the seed bytes of a corpus.
pub fn seeds(corpus: &[(String, Vec<u8>)]) -> Vec<Vec<u8>> {
    corpus.iter().map(|(_, b)| b.clone()).collect()
}
