//! A store grows from empty to `--data` bytes without a restart and with the default
//! configuration (no size setting): SETs of `--value-bytes` values under distinct keys,
//! through `dstore::Store::open_dir` exactly as `kavach serve` opens its store, and written
//! as `kavach serve` writes (one data-model transaction with a `Put` per SET, which waits for
//! a checkpoint when the log is full instead of failing). At each
//! reporting point (every doubling of the data from 1 MiB, and the end) it prints one JSON line:
//! the data written (keys + values of the live keys), the store's used memory (allocated arena
//! bytes, INFO's used_memory), the arena bytes, the shadow slots' capacity, and the pool file's
//! size (its length and the blocks it occupies), with the file/data ratio. At the end it
//! closes the store, reopens it, and checks every key's length and a sample of values.
//!
//! `cargo run --release -p kavach-bench --bin grow_bench -- --dir /dev/shm/kavach-grow --data 4GiB`
//! (needs about 2.5 x `--data` of space in `--dir`, and as much memory for the DRAM state and
//! its mirror). The run for the 4 GiB target is the same command; 256MiB is the quick
//! one.

#![forbid(unsafe_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use dstore::{Config, Store};

#[derive(Debug, Parser)]
struct Args {
    /// Directory of the store (must not hold one; removed first with --fresh).
    #[arg(long, default_value = "/dev/shm/kavach-grow")]
    dir: PathBuf,
    /// Bytes of data (keys + values) to write: 256MiB, 4GiB, ...
    #[arg(long, default_value = "256MiB")]
    data: String,
    /// Bytes of each value.
    #[arg(long, default_value_t = 1000)]
    value_bytes: usize,
    /// Remove --dir first.
    #[arg(long)]
    fresh: bool,
}

fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits.parse().with_context(|| format!("size `{text}`"))?;
    let mul: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => bail!("unknown unit in `{text}` (use KiB, MiB, GiB)"),
    };
    n.checked_mul(mul).context("size too large")
}

fn key(i: u64) -> Vec<u8> {
    format!("key:{i:012}").into_bytes()
}

fn value(i: u64, len: usize) -> Vec<u8> {
    let mut v = vec![b'a' + (i % 26) as u8; len];
    let tag = i.to_le_bytes();
    let n = tag.len().min(len);
    v[..n].copy_from_slice(&tag[..n]);
    v
}

/// (apparent length, bytes of allocated blocks) of the pool file.
fn file_size(path: &Path) -> Result<(u64, u64)> {
    let m = std::fs::metadata(path).with_context(|| format!("stat {}", path.display()))?;
    Ok((m.len(), m.blocks() * 512))
}

fn report(
    store: &Store<std::sync::Arc<pmem::Mapping>>,
    path: &Path,
    keys: u64,
    data: u64,
    started: Instant,
) -> Result<()> {
    let st = store.engine().stats();
    let (len, disk) = file_size(path)?;
    let mut top = 0u64;
    for shard in 0..store.engine().shards() {
        top += store
            .engine()
            .read(shard, |a| a.top() as u64)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    println!(
        "{}",
        serde_json::json!({
            "keys": keys,
            "data_bytes": data,
            "used_memory": store.used_memory(),
            "arena_bytes": st.arena_bytes,
            "arena_top_bytes": top,
            "slot_capacity_bytes": st.slot_capacity_bytes,
            "pool_file_bytes": len,
            "pool_disk_bytes": disk,
            "file_over_data": (len as f64 / data.max(1) as f64 * 1000.0).round() / 1000.0,
            "file_over_used_memory":
                (len as f64 / store.used_memory().max(1) as f64 * 1000.0).round() / 1000.0,
            "checkpoints": st.checkpoints,
            "seconds": started.elapsed().as_secs(),
        })
    );
    Ok(())
}

fn main() -> Result<()> {
    let a = Args::parse();
    let target = parse_size(&a.data)?;
    if a.value_bytes == 0 || a.value_bytes > 1 << 20 {
        bail!("--value-bytes must be in 1..=1048576");
    }
    if a.fresh {
        let _ = std::fs::remove_dir_all(&a.dir);
    }
    if a.dir.join(dstore::POOL_FILE).exists() {
        bail!("{} already holds a store (use --fresh)", a.dir.display());
    }
    let config = Config::default();
    let (store, opened) = Store::open_dir(&a.dir, config.clone())
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("open the store")?;
    let path = opened.path.clone();
    let started = Instant::now();
    let (len, _) = file_size(&path)?;
    eprintln!(
        "grow_bench: new store {} of {} bytes; writing {target} bytes of data in values of {} \
         bytes",
        path.display(),
        len,
        a.value_bytes
    );
    report(&store, &path, 0, 0, started)?;
    let mut data = 0u64;
    let mut keys = 0u64;
    let mut next_report = 1u64 << 20;
    while data < target {
        let k = key(keys);
        let v = value(keys, a.value_bytes);
        let put = model::Effect::Put {
            db: 0,
            key: k.clone(),
            value: model::Value::String(v.clone()),
            expire_at_ms: 0,
        };
        model::Keyspace::transact(&store, model::Scope::Keys(&[(0, &k)]), true, &mut |t| {
            t.apply(vec![put.clone()])
        })
        .map_err(|e| anyhow::anyhow!("SET {keys}: {e}"))?;
        data += (k.len() + v.len()) as u64;
        keys += 1;
        if data >= next_report {
            report(&store, &path, keys, data, started)?;
            next_report *= 2;
        }
    }
    report(&store, &path, keys, data, started)?;
    store.close().map_err(|e| anyhow::anyhow!("{e}"))?;
    drop(store);
    let (store, opened) = Store::open_dir(&a.dir, config)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("reopen the store")?;
    eprintln!(
        "grow_bench: reopened in {} ms ({} records replayed)",
        opened.recovery.total_ms,
        opened.recovery.active_records + opened.recovery.archived_records
    );
    let n = store.dbsize().map_err(|e| anyhow::anyhow!("{e}"))?;
    if n != keys {
        bail!("reopened with {n} keys, wrote {keys}");
    }
    let step = (keys / 1000).max(1);
    let mut i = 0;
    while i < keys {
        let got = store.get(&key(i)).map_err(|e| anyhow::anyhow!("{e}"))?;
        if got.as_deref() != Some(&value(i, a.value_bytes)[..]) {
            bail!("key {i} lost or changed after reopening");
        }
        i += step;
    }
    report(&store, &path, keys, data, started)?;
    store.close().map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!("grow_bench: {keys} keys verified after reopening");
    Ok(())
}
