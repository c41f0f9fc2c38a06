//! The chained table's incremental rehash (`crates/dstore/src/table.rs`), against a model:
//! random inserts, replacements, removals and lookups through many doublings agree with a
//! `HashMap` and leave a table that validates after every operation; a scan that runs across a
//! rehash returns every key present for its whole length; `validate` accepts a half-rehashed
//! table and names the field of each kind of damage to one; how much an operation allocates
//! depends on the table's counts, never on the keys' hashes; a table written only by replacing
//! values finishes its rehash; in an arena without the incremental flag (a store made before
//! it) every doubling is done in one step.

use std::collections::{HashMap, HashSet};

use dipper::{Arena, DipperError};
use dstore::table::{self, E_HASH, E_NEXT, R_NEXT, R_OLD, R_OLD_N, T_REHASH};
use pmem::rng::SplitMix64;

/// An arena whose tables rehash incrementally, as every shard of a store made today.
fn arena() -> Arena {
    let mut a = Arena::new();
    table::set_incremental(&mut a);
    a
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

fn put(a: &mut Arena, t: u64, seed: u64, k: &[u8], v: &[u8]) {
    let h = table::hash(seed, k);
    let old = table::find(a, t, h, k);
    let e = table::new_entry(a, h, k, v.len(), 0).unwrap();
    let at = e.value_at(a);
    a.write(at, v);
    match old {
        Some(o) => table::replace(a, t, o, e),
        None => table::insert(a, t, e).unwrap(),
    }
}

fn remove(a: &mut Arena, t: u64, seed: u64, k: &[u8]) -> bool {
    match table::find(a, t, table::hash(seed, k), k) {
        Some(f) => {
            table::unlink(a, t, f);
            table::free_entry(a, f.entry);
            true
        }
        None => false,
    }
}

#[test]
fn random_operations_agree_with_a_hash_map_through_many_doublings() {
    for seed in [1u64, 0xfeed, 0x5eed_5eed] {
        let mut rng = SplitMix64::new(seed);
        let mut a = arena();
        let t = table::create(&mut a, 4).unwrap();
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let (mut rehashing_seen, mut doublings, mut last_n) = (0u64, 0, 4);
        for step in 0..30_000u64 {
            // Keys drawn from a range that widens, so the table keeps growing but removals
            // and replacements hit present keys too.
            let k = key(rng.below(step / 2 + 16));
            match rng.below(10) {
                0..=5 => {
                    let v = step.to_le_bytes().repeat(1 + rng.below(3) as usize);
                    put(&mut a, t, seed, &k, &v);
                    model.insert(k, v);
                }
                6..=7 => {
                    assert_eq!(
                        remove(&mut a, t, seed, &k),
                        model.remove(&k).is_some(),
                        "step {step}"
                    );
                }
                _ => {
                    let got = table::find(&a, t, table::hash(seed, &k), &k)
                        .map(|f| f.entry.value(&a).to_vec());
                    assert_eq!(got.as_ref(), model.get(&k), "step {step}");
                }
            }
            if table::rehashing(&a, t) {
                rehashing_seen += 1;
            }
            let n = table::buckets(&a, t);
            if n != last_n {
                assert_eq!(n, last_n * 2, "doubles one step at a time");
                doublings += 1;
                last_n = n;
            }
            if step % 97 == 0 || table::rehashing(&a, t) && step % 7 == 0 {
                assert_eq!(
                    table::validate(&a, t, "t").unwrap(),
                    model.len() as u64,
                    "step {step}"
                );
            }
        }
        assert!(doublings >= 10, "{doublings} doublings");
        assert!(
            rehashing_seen > 1000,
            "operations saw a rehash running {rehashing_seen} times"
        );
        // Every key of the model is found with its value; the entries are exactly the model.
        for (k, v) in &model {
            let f = table::find(&a, t, table::hash(seed, k), k).expect("present");
            assert_eq!(f.entry.value(&a), &v[..]);
        }
        let listed: HashSet<Vec<u8>> = table::entries(&a, t)
            .into_iter()
            .map(|e| e.key(&a).to_vec())
            .collect();
        assert_eq!(listed, model.keys().cloned().collect::<HashSet<_>>());
        // Emptying the table frees every block but the header and the bucket arrays.
        let keys: Vec<_> = model.keys().cloned().collect();
        for k in keys {
            assert!(remove(&mut a, t, seed, &k));
        }
        assert_eq!(table::validate(&a, t, "t").unwrap(), 0);
        table::destroy(&mut a, t, |_, _| {});
        assert_eq!(a.blocks(), 0, "destroy frees the table's every block");
        assert_eq!(a.live_bytes(), 0);
    }
}

/// A table of 66 entries whose rehash (64 to 128 buckets) has just started.
fn mid_rehash(seed: u64) -> (Arena, u64, Vec<Vec<u8>>) {
    let mut a = arena();
    let t = table::create(&mut a, 64).unwrap();
    let mut keys = Vec::new();
    for i in 0..66 {
        put(&mut a, t, seed, &key(i), b"v");
        keys.push(key(i));
    }
    assert!(table::rehashing(&a, t), "the 65th insert starts a rehash");
    (a, t, keys)
}

#[test]
fn a_scan_across_rehashes_returns_every_key_present_throughout() {
    let seed = 99;
    let mut a = arena();
    let t = table::create(&mut a, 4).unwrap();
    for i in 0..200 {
        put(&mut a, t, seed, &key(i), b"x");
    }
    // Keys 0..100 stay for the whole scan; 100..200 are removed during it; 2400 keys from 1000
    // on are added during its first 60 steps (the table doubles from 256 to 4096 buckets), so
    // rehashes start and finish while the cursor walks.
    let mut seen = HashSet::new();
    let (mut v, mut steps, mut added) = (0u64, 0u64, 1000u64);
    let (mut during, mut sizes) = (0, HashSet::new());
    loop {
        let mut out = Vec::new();
        v = table::scan_step(&a, t, v, &mut out);
        for e in out {
            seen.insert(e.key(&a).to_vec());
        }
        if table::rehashing(&a, t) {
            during += 1;
        }
        sizes.insert(table::buckets(&a, t));
        steps += 1;
        if v == 0 {
            break;
        }
        if steps < 100 {
            remove(&mut a, t, seed, &key(100 + steps));
        }
        if steps < 60 {
            for _ in 0..40 {
                put(&mut a, t, seed, &key(added), b"y");
                added += 1;
            }
        }
        assert!(steps < 100_000, "the walk ends");
    }
    assert!(during > 3, "steps during a rehash: {during}");
    assert!(
        sizes.len() >= 3,
        "the table doubled during the walk: {sizes:?}"
    );
    for i in 0..100 {
        assert!(seen.contains(&key(i)), "key {i} missed");
    }
    table::validate(&a, t, "t").unwrap();
}

#[test]
fn a_half_rehashed_table_validates_and_its_damage_is_named() {
    let seed = 3;
    let (mut a, t, keys) = mid_rehash(seed);
    // Move part of the old array: some keys live in the new array, some in the old.
    for i in 0..3 {
        remove(&mut a, t, seed, &key(i));
    }
    assert!(table::rehashing(&a, t));
    assert_eq!(table::validate(&a, t, "t").unwrap(), keys.len() as u64 - 3);
    for k in &keys[3..] {
        assert!(table::find(&a, t, table::hash(seed, k), k).is_some());
    }
    let r = a.get_u64(t as usize + T_REHASH) as usize;
    let next = a.get_u64(r + R_NEXT);
    let old_n = a.get_u64(r + R_OLD_N);
    assert!(0 < next && next < old_n, "half done: {next} of {old_n}");

    let field_of = |b: &Arena| match table::validate(b, t, "t") {
        Err(DipperError::Corrupt { field, .. }) => field,
        other => panic!("expected a corruption, got {other:?}"),
    };
    let mut b = a.clone();
    b.put_u64(t as usize + T_REHASH, 1 << 40);
    assert_eq!(field_of(&b), "rehash block");
    let mut b = a.clone();
    b.put_u64(r + R_NEXT, old_n);
    assert_eq!(field_of(&b), "rehash next");
    let mut b = a.clone();
    b.put_u64(r + R_OLD_N, old_n / 2);
    assert_eq!(field_of(&b), "old buckets");
    let mut b = a.clone();
    b.put_u64(r + R_OLD_N, u64::MAX);
    assert_eq!(field_of(&b), "old buckets");
    let mut b = a.clone();
    b.put_u64(r + R_OLD, u64::MAX - 8);
    assert_eq!(field_of(&b), "old buckets");
    // Claiming that a moved bucket was not moved: its entries, now in the new array, are no
    // longer counted (the old bucket was emptied when it moved).
    let moved = (0..next)
        .rev()
        .find(|&i| {
            table::entries(&a, t)
                .iter()
                .any(|e| e.hash(&a) & (old_n - 1) == i)
        })
        .expect("a moved bucket held an entry");
    let mut b = a.clone();
    b.put_u64(r + R_NEXT, moved);
    assert_eq!(field_of(&b), "count");
    // An entry in an old bucket whose hash names another bucket.
    let mut b = a.clone();
    let old_b = a.get_u64(r + R_OLD) as usize;
    let live_old = (next..old_n)
        .map(|i| old_b + i as usize * 8)
        .find(|&s| a.get_u64(s) != 0)
        .expect("an unmoved old bucket holds an entry");
    let e = a.get_u64(live_old) as usize;
    b.put_u64(e + E_HASH, a.get_u64(e + E_HASH) ^ 1);
    assert_eq!(field_of(&b), "entry hash");
    let mut b = a.clone();
    b.put_u64(e + E_NEXT, e as u64);
    assert_eq!(field_of(&b), "count", "a cycle");
}

#[test]
fn allocations_follow_the_counts_not_the_hashes() {
    // The same operations on two tables hashed with different seeds leave arenas with the same
    // top, live bytes and block count after every operation (the DIPPER admission rule and a
    // store rebuilt from another's log rely on it, docs/format/dstore-ops.md).
    let mut rng = SplitMix64::new(5);
    let (mut a, mut b) = (arena(), arena());
    let ta = table::create(&mut a, 4).unwrap();
    let tb = table::create(&mut b, 4).unwrap();
    let mut present = HashSet::new();
    for step in 0..5000u64 {
        let k = key(rng.below(step / 3 + 8));
        if rng.below(4) == 0 {
            let x = remove(&mut a, ta, 1, &k);
            assert_eq!(x, remove(&mut b, tb, 2, &k));
            present.remove(&k);
        } else {
            put(&mut a, ta, 1, &k, b"value");
            put(&mut b, tb, 2, &k, b"value");
            present.insert(k);
        }
        assert_eq!(
            (a.top(), a.live_bytes(), a.blocks()),
            (b.top(), b.live_bytes(), b.blocks()),
            "step {step}"
        );
        assert_eq!(table::rehashing(&a, ta), table::rehashing(&b, tb));
    }
    assert!(present.len() > 500);
}

/// `next` fields of the given entries.
fn links(a: &Arena, offs: &[u64]) -> Vec<u64> {
    offs.iter()
        .map(|&o| a.get_u64(o as usize + E_NEXT))
        .collect()
}

#[test]
fn each_insert_relinks_a_bounded_number_of_entries() {
    // The doubling of a table of 2^14 entries, which a one-step doubling relinks all at once:
    // the insert that starts it relinks nothing, and each later one only the entries of
    // REHASH_STEP old buckets.
    let seed = 11;
    let mut a = arena();
    let t = table::create(&mut a, 4).unwrap();
    let n = 1u64 << 14;
    for i in 0..n {
        put(&mut a, t, seed, &key(i), b"v");
    }
    assert_eq!(table::buckets(&a, t), n);
    assert!(!table::rehashing(&a, t));
    let offs: Vec<u64> = table::entries(&a, t).iter().map(|e| e.off).collect();
    let before = links(&a, &offs);
    put(&mut a, t, seed, &key(n), b"v");
    assert!(table::rehashing(&a, t));
    assert_eq!(
        links(&a, &offs),
        before,
        "starting the doubling moves nothing"
    );
    let (mut ops, mut most, mut total) = (0u64, 0, 0);
    while table::rehashing(&a, t) {
        let sample = ops % 64 == 0;
        let before = if sample { links(&a, &offs) } else { Vec::new() };
        put(&mut a, t, seed, &key(n + 1 + ops), b"v");
        if sample {
            let changed = links(&a, &offs)
                .iter()
                .zip(&before)
                .filter(|(x, y)| x != y)
                .count();
            most = most.max(changed);
            total += changed;
        }
        ops += 1;
    }
    assert_eq!(ops, n / table::REHASH_STEP, "operations to finish");
    assert!(total > 0, "the sampled inserts moved entries");
    assert!(most <= 48, "an insert relinked {most} entries");
    assert_eq!(table::validate(&a, t, "t").unwrap(), n + 1 + ops);
}

#[test]
fn small_tables_double_at_once_and_large_ones_incrementally() {
    let seed = 17;
    let mut a = arena();
    let t = table::create(&mut a, 4).unwrap();
    let mut i = 0;
    while table::buckets(&a, t) < table::REHASH_INCREMENTAL_MIN {
        put(&mut a, t, seed, &key(i), b"v");
        assert!(
            !table::rehashing(&a, t),
            "{} buckets",
            table::buckets(&a, t)
        );
        i += 1;
    }
    // The first doubling from REHASH_INCREMENTAL_MIN buckets runs over several operations.
    while table::buckets(&a, t) == table::REHASH_INCREMENTAL_MIN {
        put(&mut a, t, seed, &key(i), b"v");
        i += 1;
    }
    assert!(table::rehashing(&a, t));
    assert_eq!(table::validate(&a, t, "t").unwrap(), i);
}

#[test]
fn replacing_values_alone_finishes_a_rehash_and_frees_the_old_array() {
    // A large table whose doubling has just started, then only replacements of present keys
    // (a YCSB update phase): each moves REHASH_STEP old buckets, so the old array is gone after
    // old_buckets / REHASH_STEP of them, and the table agrees with a model throughout.
    for seed in [3u64, 0xabc] {
        let mut rng = SplitMix64::new(seed);
        let mut a = arena();
        let t = table::create(&mut a, 4).unwrap();
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut i = 0u64;
        while !table::rehashing(&a, t) || table::buckets(&a, t) < 1024 {
            put(&mut a, t, seed, &key(i), b"first");
            model.insert(key(i), b"first".to_vec());
            i += 1;
        }
        let old_n = table::buckets(&a, t) / 2;
        let (live, blocks) = (a.live_bytes(), a.blocks());
        let mut replaces = 0u64;
        while table::rehashing(&a, t) {
            let k = key(rng.below(i));
            let v = vec![b'a' + (replaces % 26) as u8; 5];
            put(&mut a, t, seed, &k, &v);
            model.insert(k, v);
            replaces += 1;
            assert!(
                replaces <= old_n / table::REHASH_STEP,
                "still rehashing after {replaces} replacements of {old_n} old buckets"
            );
            if replaces % 17 == 0 {
                assert_eq!(
                    table::validate(&a, t, "t").unwrap(),
                    i,
                    "replace {replaces}"
                );
            }
        }
        assert_eq!(replaces, old_n / table::REHASH_STEP);
        assert_eq!(table::count(&a, t), i);
        assert_eq!(table::validate(&a, t, "t").unwrap(), i);
        // The old array and the rehash block were freed; the entries were replaced one for one
        // by entries of the same size.
        assert_eq!(a.blocks(), blocks - 2, "old array and rehash block freed");
        assert_eq!(
            live - a.live_bytes(),
            old_n * 8 + table::R_BYTES as u64,
            "live bytes fell by the old array and the rehash block"
        );
        for (k, v) in &model {
            let f = table::find(&a, t, table::hash(seed, k), k).expect("present");
            assert_eq!(f.entry.value(&a), &v[..]);
        }
    }
}

#[test]
fn a_removal_sweep_advances_a_rehash() {
    let (mut a, t, keys) = mid_rehash(23);
    let next = |a: &Arena| a.get_u64(a.get_u64(t as usize + T_REHASH) as usize + R_NEXT);
    let before = next(&a);
    let gone = table::retain(
        &mut a,
        t,
        |a, e| e.key(a) != keys[0].as_slice(),
        table::free_entry,
    );
    assert_eq!(gone, 1);
    assert!(table::rehashing(&a, t));
    assert_eq!(next(&a), before + table::REHASH_STEP);
    assert_eq!(table::validate(&a, t, "t").unwrap(), keys.len() as u64 - 1);
}

#[test]
fn without_the_incremental_flag_every_doubling_is_done_in_one_step() {
    // An arena of a store made before incremental rehash (user word USER_TABLE_FLAGS 0): its
    // tables never hold a rehash block between operations, so binaries from before read it.
    let seed = 29;
    let mut a = Arena::new();
    assert!(!table::incremental(&a));
    let t = table::create(&mut a, 4).unwrap();
    let mut model = HashMap::new();
    let mut rng = SplitMix64::new(seed);
    for step in 0..6000u64 {
        let k = key(rng.below(step / 2 + 8));
        if rng.below(5) == 0 {
            assert_eq!(remove(&mut a, t, seed, &k), model.remove(&k).is_some());
        } else {
            put(&mut a, t, seed, &k, b"v");
            model.insert(k, ());
        }
        assert!(!table::rehashing(&a, t), "step {step}");
    }
    assert!(
        table::buckets(&a, t) >= 1024,
        "doubled past the incremental size"
    );
    assert_eq!(table::validate(&a, t, "t").unwrap(), model.len() as u64);
}

#[test]
fn a_rehash_found_in_an_arena_without_the_flag_is_finished_by_the_next_write() {
    // A store written by a build that rehashed every store incrementally (its arenas have no
    // flag) may hold a rehash block: the next write to the table finishes it.
    let (mut a, t, keys) = mid_rehash(31);
    a.set_user(table::USER_TABLE_FLAGS, 0);
    assert!(table::rehashing(&a, t));
    put(&mut a, t, 31, &keys[3], b"new value");
    assert!(!table::rehashing(&a, t));
    assert_eq!(table::validate(&a, t, "t").unwrap(), keys.len() as u64);
}
