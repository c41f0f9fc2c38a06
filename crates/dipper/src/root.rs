//! The root object: two checksummed copies at a fixed place; the valid one with the higher
//! sequence number is in force. Writing the other copy and persisting it is the atomic switch
//! of a checkpoint.

use crate::error::{DipperError, Result};
use crate::layout::*;
use pmem::codec::{FixedWriter, Reader};
use pmem::{Medium, Uuid};

/// The decoded root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Root {
    /// Sequence number of the copy.
    pub seq: u64,
    /// Index of the active log.
    pub active: u32,
    /// [`STATE_IDLE`] or [`STATE_CHECKPOINTING`].
    pub state: u32,
    /// Slot of the current shadow image, or [`SLOT_NONE`].
    pub slot: u32,
    /// Number of shards.
    pub shards: u32,
    /// Checkpoint number of the image in `slot` (0 when there is none).
    pub checkpoint: u64,
    /// The state machine's word, fixed at creation (see [`crate::Layout::machine`]).
    pub machine: u32,
}

fn crc(uuid: &Uuid, copy: usize, bytes: &[u8]) -> u32 {
    let seed = crc32c::crc32c_append(crc32c::crc32c(&uuid.0), &(copy as u32).to_le_bytes());
    crc32c::crc32c_append(seed, bytes)
}

impl Root {
    /// Encode as copy `copy`.
    pub fn encode(&self, uuid: &Uuid, copy: usize) -> [u8; ROOT_BYTES] {
        let mut b = [0u8; ROOT_BYTES];
        FixedWriter::new(&mut b)
            .u64_at(ROOT_MAGIC_AT, ROOT_MAGIC)
            .u64_at(ROOT_SEQ_AT, self.seq)
            .u32_at(ROOT_ACTIVE_AT, self.active)
            .u32_at(ROOT_STATE_AT, self.state)
            .u32_at(ROOT_SLOT_AT, self.slot)
            .u32_at(ROOT_SHARDS_AT, self.shards)
            .u64_at(ROOT_CHECKPOINT_AT, self.checkpoint)
            .u32_at(ROOT_MACHINE_AT, self.machine);
        let c = crc(uuid, copy, &b[..ROOT_CRC_AT]);
        FixedWriter::new(&mut b).u32_at(ROOT_CRC_AT, c);
        b
    }

    /// Decode copy `copy` found at medium offset `at`, validating every field.
    pub fn decode(b: &[u8; ROOT_BYTES], uuid: &Uuid, copy: usize, at: u64) -> Result<Root> {
        let rd = Reader::new("root", b).at(at);
        let magic = rd.u64_at("magic", ROOT_MAGIC_AT)?;
        if magic != ROOT_MAGIC {
            return Err(rd
                .invalid(
                    "magic",
                    ROOT_MAGIC_AT,
                    format!("{ROOT_MAGIC:#018x}"),
                    format!("{magic:#018x}"),
                )
                .into());
        }
        let want = crc(
            uuid,
            copy,
            rd.slice_at("crc-covered bytes", 0, ROOT_CRC_AT)?,
        );
        let stored = rd.u32_at("crc", ROOT_CRC_AT)?;
        if stored != want {
            return Err(rd
                .invalid(
                    "crc",
                    ROOT_CRC_AT,
                    format!("{want:#010x}"),
                    format!("{stored:#010x}"),
                )
                .into());
        }
        let root = Root {
            seq: rd.u64_at("seq", ROOT_SEQ_AT)?,
            active: rd.u32_at("active", ROOT_ACTIVE_AT)?,
            state: rd.u32_at("state", ROOT_STATE_AT)?,
            slot: rd.u32_at("slot", ROOT_SLOT_AT)?,
            shards: rd.u32_at("shards", ROOT_SHARDS_AT)?,
            checkpoint: rd.u64_at("checkpoint", ROOT_CHECKPOINT_AT)?,
            machine: rd.u32_at("machine", ROOT_MACHINE_AT)?,
        };
        let reserved = rd.slice_at("reserved", ROOT_RESERVED_AT, ROOT_CRC_AT - ROOT_RESERVED_AT)?;
        if reserved.iter().any(|&x| x != 0) || rd.u32_at("reserved", ROOT_RESERVED2_AT)? != 0 {
            return Err(rd
                .invalid("reserved", ROOT_RESERVED_AT, "zero", "non-zero bytes")
                .into());
        }
        if root.active > 1 {
            return Err(rd
                .invalid("active", ROOT_ACTIVE_AT, "0 or 1", root.active)
                .into());
        }
        if root.state != STATE_IDLE && root.state != STATE_CHECKPOINTING {
            return Err(rd
                .invalid("state", ROOT_STATE_AT, "0 or 1", root.state)
                .into());
        }
        if root.slot > 1 && root.slot != SLOT_NONE {
            return Err(rd
                .invalid("slot", ROOT_SLOT_AT, "0, 1 or none", root.slot)
                .into());
        }
        if (root.slot == SLOT_NONE) != (root.checkpoint == 0) {
            return Err(rd
                .invalid(
                    "checkpoint",
                    ROOT_CHECKPOINT_AT,
                    "0 exactly when no slot holds an image",
                    format!("{} with slot {}", root.checkpoint, root.slot),
                )
                .into());
        }
        if root.shards == 0 || root.shards as usize > SHARDS_MAX {
            return Err(rd
                .invalid(
                    "shards",
                    ROOT_SHARDS_AT,
                    format!("1..={SHARDS_MAX}"),
                    root.shards,
                )
                .into());
        }
        Ok(root)
    }

    /// Read both copies at `base` and return the one in force, with any damage to the other
    /// (reported, not fatal).
    pub fn load<M: Medium>(
        medium: &M,
        base: usize,
        uuid: &Uuid,
    ) -> Result<(Root, Option<DipperError>)> {
        let mut found = [None, None];
        let mut errors = Vec::new();
        for (copy, &off) in ROOT_COPY_OFFSETS.iter().enumerate() {
            let mut b = [0u8; ROOT_BYTES];
            medium.read(base + off, &mut b);
            if b.iter().all(|&x| x == 0) {
                continue; // never written
            }
            match Root::decode(&b, uuid, copy, (base + off) as u64) {
                Ok(r) => found[copy] = Some(r),
                Err(e) => errors.push(e),
            }
        }
        let best = match found {
            [Some(a), Some(b)] => Some(if a.seq >= b.seq { a } else { b }),
            [Some(a), None] | [None, Some(a)] => Some(a),
            [None, None] => None,
        };
        match best {
            Some(r) => Ok((r, errors.pop())),
            None => Err(errors.pop().unwrap_or(DipperError::NotAStore(
                "the root region holds no root copy".into(),
            ))),
        }
    }

    /// Persist `self` with the next sequence number into the copy that is not in force.
    pub fn store<M: Medium>(&mut self, medium: &M, base: usize, uuid: &Uuid) -> Result<()> {
        self.seq += 1;
        let copy = (self.seq % 2) as usize;
        let off = base + ROOT_COPY_OFFSETS[copy];
        medium.write(off, &self.encode(uuid, copy));
        medium.persist(off, ROOT_BYTES)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Root {
        Root {
            seq: 7,
            active: 1,
            state: STATE_CHECKPOINTING,
            slot: 0,
            shards: 16,
            checkpoint: 3,
            machine: 0x5a,
        }
    }

    #[test]
    fn round_trip() {
        let u = Uuid([9; 16]);
        let b = sample().encode(&u, 1);
        assert_eq!(Root::decode(&b, &u, 1, 0).unwrap(), sample());
        assert!(
            Root::decode(&b, &u, 0, 0).is_err(),
            "a copy read as the other"
        );
        assert!(
            Root::decode(&b, &Uuid([8; 16]), 1, 0).is_err(),
            "another pool"
        );
    }

    #[test]
    fn every_field_is_validated() {
        let u = Uuid([1; 16]);
        type Damage = Box<dyn Fn(&mut Root)>;
        let cases: Vec<(&str, Damage)> = vec![
            ("active", Box::new(|r| r.active = 2)),
            ("state", Box::new(|r| r.state = 9)),
            ("slot", Box::new(|r| r.slot = 5)),
            ("checkpoint", Box::new(|r| r.checkpoint = 0)),
            ("checkpoint", Box::new(|r| r.slot = SLOT_NONE)),
            ("shards", Box::new(|r| r.shards = 0)),
            ("shards", Box::new(|r| r.shards = SHARDS_MAX as u32 + 1)),
        ];
        for (field, damage) in cases {
            let mut r = sample();
            damage(&mut r);
            match Root::decode(&r.encode(&u, 0), &u, 0, 64) {
                Err(DipperError::Corrupt { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
        let mut b = sample().encode(&u, 0);
        b[3] ^= 1;
        assert!(matches!(
            Root::decode(&b, &u, 0, 0),
            Err(DipperError::Corrupt { field: "magic", .. })
        ));
        let mut b = sample().encode(&u, 0);
        b[ROOT_SEQ_AT] ^= 1;
        assert!(matches!(
            Root::decode(&b, &u, 0, 0),
            Err(DipperError::Corrupt { field: "crc", .. })
        ));
    }
}
