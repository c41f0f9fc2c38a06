//! Shared setup for the integration tests: pools on the persistence simulator.
#![allow(dead_code)]

use integrity::{CreateOptions, Geometry, Mode, OpenOptions, OpenReport, Protected};
use pmem::rng::SplitMix64;
use pmem::{Domain, Medium, Pool, SimConfig, SimMedium, kinds};
use std::sync::Arc;

pub type Sim = Arc<SimMedium>;
pub const PAGE: usize = 4096;

/// A pool image with a `data` region of `pages` pages, filled with seeded bytes, protected in
/// `mode` with stripes of `k`, closed cleanly.
pub fn image(pages: u64, k: u32, mode: Mode, seed: u64) -> Vec<u8> {
    let geo = Geometry::new(pages, k).unwrap();
    let size = (64 * 1024 + pages * PAGE as u64 + geo.meta_bytes).next_multiple_of(4096);
    let sim = Arc::new(SimMedium::new(size as usize, SimConfig::default()));
    let sim = Pool::format(sim, Domain::Sim).unwrap();
    let mut pool = Pool::open_medium(sim, &pmem::OpenOptions::default()).unwrap();
    let data = pool
        .create_region(
            "data",
            kinds::RAW,
            pages * PAGE as u64,
            pmem::Alignment::Page,
        )
        .unwrap();
    let mut rng = SplitMix64::new(seed);
    let mut bytes = vec![0u8; PAGE];
    for p in 0..pages {
        fill(&mut rng, &mut bytes);
        pool.medium()
            .write(data.offset as usize + p as usize * PAGE, &bytes);
    }
    pool.medium()
        .persist(data.offset as usize, (pages as usize) * PAGE)
        .unwrap();
    let opts = CreateOptions {
        mode,
        stripe_pages: k,
        period_ms: 1000,
    };
    integrity::create_in_pool(&mut pool, "data", &opts, &mut |_, _| {}).unwrap();
    let sim = pool.close().unwrap();
    sim.durable_image()
}

pub fn fill(rng: &mut SplitMix64, buf: &mut [u8]) {
    for chunk in buf.chunks_mut(8) {
        let v = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

pub fn sim_of(image: Vec<u8>) -> Sim {
    Arc::new(SimMedium::from_image(image, SimConfig::default()))
}

pub type Handle = (Pool<Sim>, Protected<Sim>, OpenReport);

/// Open the pool on `sim` and its protected `data` region.
pub fn open(sim: Sim, opts: OpenOptions) -> integrity::Result<Handle> {
    let pool = Pool::open_medium(sim, &pmem::OpenOptions::default())?;
    let (prot, report) = integrity::open_in_pool(&pool, "data", opts, &mut |_, _| {})?;
    Ok((pool, prot, report))
}

pub fn open_mode(sim: Sim, mode: Mode) -> Handle {
    open(
        sim,
        OpenOptions {
            mode: Some(mode),
            ..Default::default()
        },
    )
    .unwrap()
}

/// Every data page's bytes.
pub fn data_of<M: Medium + 'static>(prot: &Protected<M>) -> Vec<u8> {
    let n = prot.geometry().data_pages as usize * PAGE;
    let mut b = vec![0u8; n];
    prot.medium().read(prot.data_offset() as usize, &mut b);
    b
}

/// The redundancy the region should hold for `data`, computed here independently of the
/// library's update paths: page checksums and their blocks, parity checksums and their blocks,
/// parity pages. Returned as (pagesums+blocks, paritysums+blocks, parity).
pub fn expected_redundancy(uuid: &pmem::Uuid, geo: &Geometry, data: &[u8]) -> Vec<Vec<u8>> {
    use integrity::checksum::{Tag, checksum, xor_into};
    let k = geo.stripe_pages as usize;
    let sums: Vec<u32> = (0..geo.data_pages as usize)
        .map(|p| {
            checksum(
                uuid,
                Tag::DataPage,
                p as u64,
                &data[p * PAGE..(p + 1) * PAGE],
            )
        })
        .collect();
    let mut parity = vec![0u8; geo.stripes as usize * PAGE];
    for p in 0..geo.data_pages as usize {
        let s = p / k;
        xor_into(
            &mut parity[s * PAGE..(s + 1) * PAGE],
            &data[p * PAGE..(p + 1) * PAGE],
        );
    }
    let psums: Vec<u32> = (0..geo.stripes as usize)
        .map(|s| {
            checksum(
                uuid,
                Tag::ParityPage,
                s as u64,
                &parity[s * PAGE..(s + 1) * PAGE],
            )
        })
        .collect();
    let with_blocks = |v: &[u32], tag: Tag| {
        let mut bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        bytes.resize(bytes.len().next_multiple_of(64), 0);
        let blocks: Vec<u8> = bytes
            .chunks(64)
            .enumerate()
            .flat_map(|(i, b)| checksum(uuid, tag, i as u64, b).to_le_bytes())
            .collect();
        bytes.extend(blocks);
        bytes
    };
    vec![
        with_blocks(&sums, Tag::PageBlock),
        with_blocks(&psums, Tag::ParityBlock),
        parity,
    ]
}

/// The redundancy the region holds, in the shape of [`expected_redundancy`].
pub fn stored_redundancy<M: Medium>(pool: &Pool<M>, geo: &Geometry) -> Vec<Vec<u8>> {
    let meta = pool.region("data.integrity").unwrap().offset as usize;
    let read = |at: u64, len: usize| {
        let mut b = vec![0u8; len];
        pool.medium().read(meta + at as usize, &mut b);
        b
    };
    let pad = |n: u64| (n as usize * 4).next_multiple_of(64);
    let blocks = |n: u64| pad(n) / 64 * 4;
    let mut pages = read(geo.pagesums_at, pad(geo.data_pages));
    pages.extend(read(geo.pageblocks_at, blocks(geo.data_pages)));
    let mut par = read(geo.paritysums_at, pad(geo.stripes));
    par.extend(read(geo.parityblocks_at, blocks(geo.stripes)));
    vec![pages, par, read(geo.parity_at, geo.stripes as usize * PAGE)]
}

pub fn redundancy_is_current(pool: &Pool<Sim>, prot: &Protected<Sim>) -> bool {
    let geo = prot.geometry();
    stored_redundancy(pool, &geo) == expected_redundancy(&pool.uuid(), &geo, &data_of(prot))
}

/// The 128-byte shadow batch record that earlier writers of format version 1 kept at offset
/// 4096 of the integrity region (`docs/format/integrity.md`, "Reserved page"), encoded here
/// from that description: `seq`, `first_page`, eight words of bits, a CRC-32C over those 80
/// bytes seeded with (`M`, 2), zeros.
pub fn legacy_shadow_record(uuid: &pmem::Uuid, seq: u64, first: u64, bits: &[u64; 8]) -> Vec<u8> {
    use integrity::checksum::{Tag, checksum};
    let mut b = vec![0u8; 128];
    b[0..8].copy_from_slice(&seq.to_le_bytes());
    b[8..16].copy_from_slice(&first.to_le_bytes());
    for (i, w) in bits.iter().enumerate() {
        b[16 + 8 * i..24 + 8 * i].copy_from_slice(&w.to_le_bytes());
    }
    let crc = checksum(uuid, Tag::Meta, 2, &b[..80]);
    b[80..84].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Offset of the reserved page (the retired shadow record) in an integrity region.
pub const RETIRED_AT: usize = 4096;

/// Rewrite the header copy in force of the integrity region at `meta` in `img` with `change`
/// applied, as the next header write would (the other copy, `seq` + 1): how an earlier writer
/// left a region it marked unverified.
pub fn rewrite_header(
    img: &mut [u8],
    meta: usize,
    uuid: &pmem::Uuid,
    change: impl FnOnce(&mut integrity::header::Header),
) {
    use integrity::header::Header;
    use integrity::layout::{HEADER_BYTES, HEADER_COPY_OFFSETS};
    let mut h = HEADER_COPY_OFFSETS
        .iter()
        .filter_map(|&off| {
            let at = meta + off;
            let b: [u8; HEADER_BYTES] = img[at..at + HEADER_BYTES].try_into().unwrap();
            Header::decode(&b, uuid, at as u64).ok()
        })
        .max_by_key(|h| h.seq)
        .expect("a valid header copy");
    change(&mut h);
    h.seq += 1;
    let at = meta + HEADER_COPY_OFFSETS[(h.seq % 2) as usize];
    img[at..at + HEADER_BYTES].copy_from_slice(&h.encode());
}
