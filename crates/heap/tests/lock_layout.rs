//! `PMutex` and `PRwLock` are `Pod` for every `Pod` value type, so they must have no padding
//! for any of them: padding bytes are uninitialised, and `bytemuck::bytes_of` (which `Tx::set`
//! uses to store a value) would read them. Before the locks were laid out `packed(8)`, a value
//! aligned to 16 left 8 bytes of padding after the reserved word (`PMutex<u128>` was 32 bytes
//! for 24 bytes of fields), and `PMutex::<u128>::zeroed()` stored with `Tx::set` read them.

use std::mem::{align_of, size_of};
use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use heap::{Heap, HeapOptions, PMutex, PRwLock, RawHeap};
use pmem::{SimConfig, SimMedium};

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C, align(32))]
struct Wide([u64; 4]);

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C, align(64))]
struct Line([u64; 8]);

/// A lock around `T` is its 8 reserved bytes and `T`, nothing more, and its bytes are exactly
/// those of the value after the reserved word.
fn no_padding<T: Pod + PartialEq + std::fmt::Debug>(value: T) {
    let name = std::any::type_name::<T>();
    assert_eq!(size_of::<PMutex<T>>(), 8 + size_of::<T>(), "PMutex<{name}>");
    assert_eq!(
        size_of::<PRwLock<T>>(),
        8 + size_of::<T>(),
        "PRwLock<{name}>"
    );
    assert!(align_of::<PMutex<T>>() <= 8, "PMutex<{name}>");

    let zero = PMutex::<T>::zeroed();
    assert!(bytemuck::bytes_of(&zero).iter().all(|b| *b == 0));
    let m = PMutex::new(value);
    assert_eq!(&bytemuck::bytes_of(&m)[8..], bytemuck::bytes_of(&value));
    let l = PRwLock::new(value);
    assert_eq!(&bytemuck::bytes_of(&l)[8..], bytemuck::bytes_of(&value));
    assert_eq!(&bytemuck::bytes_of(&m)[..8], &[0; 8]);
}

#[test]
fn locks_have_no_padding_for_any_alignment() {
    no_padding(7u8);
    no_padding(0x0102_0304u32);
    no_padding(u64::MAX - 1);
    no_padding(0x0f0e_0d0c_0b0a_0908_0706_0504_0302_0100u128);
    no_padding([3u128; 3]);
    no_padding(Wide([1, 2, 3, 4]));
    no_padding(Line([9; 8]));
    no_padding(());
}

heap::pool_tag!(Locks);

/// The case of the report: a zeroed `PMutex<u128>` stored with `Tx::set`, then locked and used.
#[test]
fn a_lock_around_u128_round_trips_through_a_transaction() {
    const LEN: u64 = 4 << 20;
    let sim = Arc::new(SimMedium::new(LEN as usize, SimConfig::default()));
    RawHeap::format(&*sim, 0, LEN, [7; 16], &HeapOptions::small()).unwrap();
    let h = Heap::<Locks>::new(Arc::new(RawHeap::open(sim, 0, LEN).unwrap())).unwrap();
    let root = h.root::<[PMutex<u128>; 2]>().unwrap();
    let big = u128::MAX - 5;
    h.transaction(|tx| {
        tx.set(root, [PMutex::zeroed(), PMutex::new(big)])?;
        let first: heap::PPtr<PMutex<u128>, Locks> = root.cast();
        let v = tx.lock(first)?;
        assert_eq!(v.offset(), first.offset() + 8);
        tx.set(v, 41)?;
        tx.update(v, |x| *x += 1)
    })
    .unwrap();
    let [a, b] = h.get(root).unwrap();
    assert_eq!(format!("{a:?}"), "PMutex { value: 42 }");
    assert_eq!(format!("{b:?}"), format!("PMutex {{ value: {big} }}"));
    assert_eq!(&bytemuck::bytes_of(&a)[8..], &42u128.to_ne_bytes());
}
