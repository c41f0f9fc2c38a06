//! The device label at offset 0: how a device shared by several ranks (or namespaces) is cut
//! into partitions, one namespace each. Partition `i` is `[first + i * segment, +segment)`,
//! with `segment = floor((capacity - first) / parts)` rounded down to 1 MiB.

use crate::codec::{Dec, Enc};
use crate::device::Device;
use crate::error::{FsError, Result};

/// Label magic.
pub const LABEL_MAGIC: [u8; 8] = *b"KVCRLABL";
/// Label format version.
pub const LABEL_VERSION: u32 = 1;
/// Bytes the label occupies (CRC32C in the last 4).
pub const LABEL_BYTES: usize = 512;
/// Where partition 0 starts: the label's area is the first MiB.
pub const LABEL_AREA: u64 = 1 << 20;
/// Partitions are aligned to (and sized in) this.
pub const PARTITION_ALIGN: u64 = 1 << 20;
/// Most partitions on one device.
pub const PARTS_MAX: u32 = 4096;

/// A device label.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Label {
    /// The job the device was cut for.
    pub job: String,
    /// Partitions.
    pub parts: u32,
    /// Bytes of each.
    pub segment: u64,
    /// Offset of partition 0.
    pub first: u64,
}

impl Label {
    /// Partition `i`: (offset, bytes).
    pub fn partition(&self, i: u32) -> (u64, u64) {
        (self.first + i as u64 * self.segment, self.segment)
    }

    fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.bytes(&LABEL_MAGIC)
            .u32(LABEL_VERSION)
            .u32(self.parts)
            .u64(self.segment)
            .u64(self.first)
            .name(&self.job);
        let mut b = e.buf;
        b.resize(LABEL_BYTES - 4, 0);
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }
}

/// Cut `dev` into `parts` partitions for `job` and write the label (durable on return).
pub fn write(dev: &dyn Device, job: &str, parts: u32) -> Result<Label> {
    if !(1..=PARTS_MAX).contains(&parts) {
        return Err(FsError::invalid(
            "partitions",
            format!("{parts}: 1..={PARTS_MAX}"),
        ));
    }
    if job.is_empty() || job.len() > crate::layout::JOB_MAX || !crate::codec::valid_name(job) {
        return Err(FsError::invalid(
            "job name",
            format!("{job:?}: 1..=63 bytes, no '/' or NUL"),
        ));
    }
    let cap = dev.capacity();
    let segment = cap.saturating_sub(LABEL_AREA) / parts as u64 / PARTITION_ALIGN * PARTITION_ALIGN;
    if segment < 2 * PARTITION_ALIGN {
        return Err(FsError::NoSpace {
            what: format!(
                "{} has {cap} bytes: {parts} partitions of at least 2 MiB need {}",
                dev.label(),
                LABEL_AREA + parts as u64 * 2 * PARTITION_ALIGN
            ),
        });
    }
    let label = Label {
        job: job.to_string(),
        parts,
        segment,
        first: LABEL_AREA,
    };
    dev.write_at(0, &label.encode())?;
    Ok(label)
}

/// The label of `dev`: `None` if the device does not start with one (blank, or a namespace
/// spanning the whole device); damage if it has the label magic but fails its checks.
pub fn read(dev: &dyn Device) -> Result<Option<Label>> {
    if dev.capacity() < LABEL_BYTES as u64 {
        return Ok(None);
    }
    let mut b = vec![0u8; LABEL_BYTES];
    dev.read_at(0, &mut b)?;
    if b[..8] != LABEL_MAGIC {
        return Ok(None);
    }
    let stored = u32::from_le_bytes(b[LABEL_BYTES - 4..].try_into().unwrap_or([0; 4]));
    let crc = crc32c::crc32c(&b[..LABEL_BYTES - 4]);
    if stored != crc {
        return Err(FsError::damage(
            "device label (crc32c)",
            LABEL_BYTES as u64 - 4,
            format!("{crc:#010x}"),
            format!("{stored:#010x}"),
        ));
    }
    let mut d = Dec::new(&b[8..LABEL_BYTES - 4], 8, "device label");
    let version = d.u32("version")?;
    if version != LABEL_VERSION {
        return Err(FsError::damage(
            "device label (version)",
            8,
            LABEL_VERSION.to_string(),
            version.to_string(),
        ));
    }
    let parts = d.u32("parts")?;
    let segment = d.u64("segment")?;
    let first = d.u64("first")?;
    let job = d.name("job")?;
    let end = (parts as u64)
        .checked_mul(segment)
        .and_then(|x| x.checked_add(first));
    if parts == 0
        || parts > PARTS_MAX
        || first < LABEL_AREA
        || segment % PARTITION_ALIGN != 0
        || segment == 0
        || end.is_none_or(|e| e > dev.capacity())
    {
        return Err(FsError::damage(
            "device label (geometry)",
            12,
            format!(
                "1..={PARTS_MAX} partitions of whole MiB after the label, inside {} bytes",
                dev.capacity()
            ),
            format!("{parts} x {segment} bytes from {first}"),
        ));
    }
    Ok(Some(Label {
        job,
        parts,
        segment,
        first,
    }))
}
