//! A list: a ring of element offsets in one arena block, so a push or pop at either end and a
//! read by index are O(1).
//!
//! | offset | field |
//! | --- | --- |
//! | 0 | capacity: slots in the ring |
//! | 8 | head: the slot of element 0 |
//! | 16 | length |
//! | 24 | `capacity` slots of 8 bytes: element `i` is in slot `(head + i) mod capacity` |
//!
//! Each slot holds the offset of an element block: a `u64` length, then the bytes. The ring
//! doubles when a push finds it full and halves when a removal leaves it a quarter full (never
//! below [`LIST_CAP_MIN`]); a resize rewrites it with head 0. A list never holds more than
//! [`LIST_LEN_MAX`] elements, so the ring stays within one arena block.

use dipper::{Arena, DipperError, Result};

/// Capacity field.
pub const L_CAP: usize = 0;
/// Head field.
pub const L_HEAD: usize = 8;
/// Length field.
pub const L_LEN: usize = 16;
/// First slot.
pub const L_SLOTS: usize = 24;
/// Element block: length field; the bytes follow at [`ELEM_BYTES`].
pub const ELEM_LEN: usize = 0;
/// Element block: first byte.
pub const ELEM_BYTES: usize = 8;
/// Smallest ring.
pub const LIST_CAP_MIN: u64 = 4;
/// Most elements of one list (the ring of `2 x` this many slots still fits an arena block).
pub const LIST_LEN_MAX: u64 = 1 << 24;

fn ring_bytes(cap: u64) -> usize {
    L_SLOTS + cap as usize * 8
}

/// Make an empty ring with room for `cap` elements.
pub fn create(a: &mut Arena, cap: u64) -> Result<u64> {
    let cap = cap.max(LIST_CAP_MIN);
    let r = a.alloc(ring_bytes(cap))?;
    a.put_u64(r as usize + L_CAP, cap);
    a.put_u64(r as usize + L_HEAD, 0);
    a.put_u64(r as usize + L_LEN, 0);
    Ok(r)
}

/// Number of elements.
pub fn len(a: &Arena, r: u64) -> u64 {
    a.get_u64(r as usize + L_LEN)
}

fn cap(a: &Arena, r: u64) -> u64 {
    a.get_u64(r as usize + L_CAP)
}

fn slot_at(a: &Arena, r: u64, i: u64) -> usize {
    let (cap, head) = (cap(a, r), a.get_u64(r as usize + L_HEAD));
    r as usize + L_SLOTS + ((head + i) % cap) as usize * 8
}

/// The element block at index `i` (< length).
pub fn elem(a: &Arena, r: u64, i: u64) -> u64 {
    a.get_u64(slot_at(a, r, i))
}

/// The bytes of an element block.
pub fn elem_bytes(a: &Arena, e: u64) -> &[u8] {
    let n = a.get_u64(e as usize + ELEM_LEN) as usize;
    a.bytes(e as usize + ELEM_BYTES, n)
}

/// A new element block holding `bytes`.
pub fn new_elem(a: &mut Arena, bytes: &[u8]) -> Result<u64> {
    let e = a.alloc(ELEM_BYTES + bytes.len())?;
    a.put_u64(e as usize + ELEM_LEN, bytes.len() as u64);
    a.write(e as usize + ELEM_BYTES, bytes);
    Ok(e)
}

fn free_elem(a: &mut Arena, e: u64) {
    let n = a.get_u64(e as usize + ELEM_LEN) as usize;
    a.free(e, ELEM_BYTES + n);
}

/// Every element block, head first.
fn blocks(a: &Arena, r: u64) -> Vec<u64> {
    (0..len(a, r)).map(|i| elem(a, r, i)).collect()
}

/// Replace the ring at `*slot` by one holding `items` (head 0, capacity `cap`).
fn rewrite(a: &mut Arena, slot: usize, items: &[u64], cap: u64) -> Result<u64> {
    let old = a.get_u64(slot);
    let cap = cap.max(items.len() as u64).max(LIST_CAP_MIN);
    let r = create(a, cap)?;
    for (i, &e) in items.iter().enumerate() {
        a.put_u64(r as usize + L_SLOTS + i * 8, e);
    }
    a.put_u64(r as usize + L_LEN, items.len() as u64);
    let old_cap = self::cap(a, old);
    a.free(old, ring_bytes(old_cap));
    a.put_u64(slot, r);
    Ok(r)
}

/// Halve the ring at `*slot` if it is a quarter full or less.
fn maybe_shrink(a: &mut Arena, slot: usize) -> Result<()> {
    let r = a.get_u64(slot);
    let (n, c) = (len(a, r), cap(a, r));
    if c > LIST_CAP_MIN && n * 4 <= c {
        let items = blocks(a, r);
        rewrite(a, slot, &items, c / 2)?;
    }
    Ok(())
}

/// Push `bytes` at the head (`left`) or the tail of the list whose ring offset is at `slot`.
pub fn push(a: &mut Arena, slot: usize, left: bool, bytes: &[u8]) -> Result<()> {
    let e = new_elem(a, bytes)?;
    let mut r = a.get_u64(slot);
    let (n, c) = (len(a, r), cap(a, r));
    if n == c {
        let items = blocks(a, r);
        r = rewrite(a, slot, &items, c * 2)?;
    }
    let c = cap(a, r);
    let head = a.get_u64(r as usize + L_HEAD);
    if left {
        let h = (head + c - 1) % c;
        a.put_u64(r as usize + L_HEAD, h);
        a.put_u64(r as usize + L_SLOTS + h as usize * 8, e);
    } else {
        let at = slot_at(a, r, n);
        a.put_u64(at, e);
    }
    a.put_u64(r as usize + L_LEN, n + 1);
    Ok(())
}

/// Remove up to `count` elements from the head (`left`) or the tail.
pub fn pop(a: &mut Arena, slot: usize, left: bool, count: u64) -> Result<()> {
    let r = a.get_u64(slot);
    let n = len(a, r);
    let k = count.min(n);
    for _ in 0..k {
        let (n, c) = (len(a, r), cap(a, r));
        let head = a.get_u64(r as usize + L_HEAD);
        let e = if left {
            let e = elem(a, r, 0);
            a.put_u64(r as usize + L_HEAD, (head + 1) % c);
            e
        } else {
            elem(a, r, n - 1)
        };
        a.put_u64(r as usize + L_LEN, n - 1);
        free_elem(a, e);
    }
    maybe_shrink(a, slot)
}

/// Replace element `i` (< length).
pub fn set(a: &mut Arena, r: u64, i: u64, bytes: &[u8]) -> Result<()> {
    let e = new_elem(a, bytes)?;
    let at = slot_at(a, r, i);
    let old = a.get_u64(at);
    a.put_u64(at, e);
    free_elem(a, old);
    Ok(())
}

/// Insert `bytes` so that it becomes element `i` (<= length).
pub fn insert(a: &mut Arena, slot: usize, i: u64, bytes: &[u8]) -> Result<()> {
    let r = a.get_u64(slot);
    let n = len(a, r);
    if i == 0 {
        return push(a, slot, true, bytes);
    }
    if i == n {
        return push(a, slot, false, bytes);
    }
    let e = new_elem(a, bytes)?;
    let mut items = blocks(a, r);
    items.insert(i as usize, e);
    let c = cap(a, r);
    let c = if items.len() as u64 > c { c * 2 } else { c };
    rewrite(a, slot, &items, c)?;
    Ok(())
}

/// Remove the elements at `indices` (ascending, each < length).
pub fn remove_at(a: &mut Arena, slot: usize, indices: &[u64]) -> Result<()> {
    let r = a.get_u64(slot);
    let items = blocks(a, r);
    let mut keep = Vec::with_capacity(items.len().saturating_sub(indices.len()));
    let mut next = indices.iter().peekable();
    for (i, e) in items.into_iter().enumerate() {
        if next.peek().is_some_and(|&&x| x == i as u64) {
            next.next();
            free_elem(a, e);
        } else {
            keep.push(e);
        }
    }
    let c = cap(a, r);
    rewrite(a, slot, &keep, c)?;
    maybe_shrink(a, slot)
}

/// Keep only elements `start..end` (clamped to the length).
pub fn trim(a: &mut Arena, slot: usize, start: u64, end: u64) -> Result<()> {
    let r = a.get_u64(slot);
    let n = len(a, r);
    let end = end.min(n);
    let start = start.min(end);
    pop(a, slot, false, n - end)?;
    pop(a, slot, true, start)
}

/// Free every element and the ring.
pub fn destroy(a: &mut Arena, r: u64) {
    for e in blocks(a, r) {
        free_elem(a, e);
    }
    let c = cap(a, r);
    a.free(r, ring_bytes(c));
}

/// Check a ring against the arena's bounds: header, every slot in use, every element block.
pub fn validate(a: &Arena, r: u64) -> Result<u64> {
    let top = a.top() as u64;
    let bad = |field: &'static str, expected: String, found: String| DipperError::Corrupt {
        structure: "list ring",
        offset: r,
        field,
        expected,
        found,
    };
    let inside = |off: u64, n: u64| {
        off >= dipper::arena::ARENA_HEADER as u64 && off.checked_add(n).is_some_and(|e| e <= top)
    };
    if !inside(r, L_SLOTS as u64) {
        return Err(bad(
            "ring",
            format!("inside the arena (top {top})"),
            r.to_string(),
        ));
    }
    let (c, head, n) = (cap(a, r), a.get_u64(r as usize + L_HEAD), len(a, r));
    if !(LIST_CAP_MIN..=2 * LIST_LEN_MAX).contains(&c)
        || !inside(r, ring_bytes(c) as u64)
        || head >= c
        || n > c
        || n == 0
    {
        return Err(bad(
            "capacity",
            "a ring inside the arena with 0 < length <= capacity and head < capacity".into(),
            format!("capacity {c}, head {head}, length {n}"),
        ));
    }
    for i in 0..n {
        let e = elem(a, r, i);
        if !inside(e, ELEM_BYTES as u64)
            || !inside(
                e,
                (ELEM_BYTES as u64).saturating_add(a.get_u64(e as usize + ELEM_LEN)),
            )
        {
            return Err(bad(
                "element",
                "an element block inside the arena".into(),
                format!("{e} at index {i}"),
            ));
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    fn read(a: &Arena, slot: usize) -> Vec<Vec<u8>> {
        let r = a.get_u64(slot);
        (0..len(a, r))
            .map(|i| elem_bytes(a, elem(a, r, i)).to_vec())
            .collect()
    }

    #[test]
    fn a_ring_matches_a_deque_through_every_operation() {
        let mut a = Arena::new();
        let slot = a.alloc(8).unwrap() as usize;
        let live_before = a.live_bytes();
        let r = create(&mut a, 0).unwrap();
        a.put_u64(slot, r);
        let mut d: VecDeque<Vec<u8>> = VecDeque::new();
        let mut x = 7u64;
        for step in 0..3000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = format!("e{step}").into_bytes();
            let n = d.len() as u64;
            match (x >> 33) % 7 {
                0 | 1 => {
                    push(&mut a, slot, true, &v).unwrap();
                    d.push_front(v);
                }
                2 | 3 => {
                    push(&mut a, slot, false, &v).unwrap();
                    d.push_back(v);
                }
                4 => {
                    let k = (x >> 40) % 4;
                    let left = x & 1 == 0;
                    pop(&mut a, slot, left, k).unwrap();
                    for _ in 0..k.min(n) {
                        if left {
                            d.pop_front();
                        } else {
                            d.pop_back();
                        }
                    }
                }
                5 => {
                    let i = (x >> 40) % (n + 1);
                    insert(&mut a, slot, i, &v).unwrap();
                    d.insert(i as usize, v);
                }
                _ if n > 0 => {
                    let i = (x >> 40) % n;
                    if x & 2 == 0 {
                        let r = a.get_u64(slot);
                        set(&mut a, r, i, &v).unwrap();
                        d[i as usize] = v;
                    } else {
                        let idx: Vec<u64> = (0..n).filter(|j| j % 3 == i % 3).collect();
                        remove_at(&mut a, slot, &idx).unwrap();
                        for &j in idx.iter().rev() {
                            d.remove(j as usize);
                        }
                    }
                }
                _ => {}
            }
            assert_eq!(read(&a, slot), Vec::from(d.clone()), "step {step}");
            if !d.is_empty() {
                validate(&a, a.get_u64(slot)).unwrap();
            }
        }
        let n = d.len() as u64;
        trim(&mut a, slot, 1, n.saturating_sub(1)).unwrap();
        let kept: Vec<_> = d
            .iter()
            .skip(1)
            .take(n.saturating_sub(2) as usize)
            .cloned()
            .collect();
        assert_eq!(read(&a, slot), kept);
        let r = a.get_u64(slot);
        destroy(&mut a, r);
        assert_eq!(a.live_bytes(), live_before, "every block freed");
    }

    #[test]
    fn damaged_rings_are_caught() {
        let mut a = Arena::new();
        let slot = a.alloc(8).unwrap() as usize;
        let r = create(&mut a, 4).unwrap();
        a.put_u64(slot, r);
        push(&mut a, slot, false, b"x").unwrap();
        validate(&a, r).unwrap();
        for (field, v) in [(L_CAP, 1u64), (L_HEAD, 9), (L_LEN, 5), (L_LEN, 0)] {
            let mut b = a.clone();
            b.put_u64(r as usize + field, v);
            assert!(validate(&b, r).is_err(), "field {field} = {v}");
        }
        let mut b = a.clone();
        let e = elem(&a, r, 0);
        b.put_u64(e as usize + ELEM_LEN, u64::MAX);
        assert!(validate(&b, r).is_err(), "element length");
    }
}
