//! Checking that a program is a static, non-PIE x86-64 executable, and its identity.

use crate::error::{Result, WspError};
use crate::image::ProgramId;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

const PT_INTERP: u32 = 3;
const PT_DYNAMIC: u32 = 2;

/// Refuse anything but an ELF64 little-endian x86-64 `ET_EXEC` without an interpreter.
pub(crate) fn check_static(path: &Path, bytes: &[u8]) -> Result<()> {
    let bad = |why: String| WspError::NotStatic {
        path: path.into(),
        why,
    };
    if bytes.len() < 64 || bytes[..4] != *b"\x7fELF" {
        return Err(bad("no ELF magic".into()));
    }
    if bytes[4] != 2 || bytes[5] != 1 {
        return Err(bad(format!(
            "class {} data {} (expected ELF64 little-endian)",
            bytes[4], bytes[5]
        )));
    }
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]);
    let e_type = u16_at(16);
    let machine = u16_at(18);
    if machine != 62 {
        return Err(bad(format!("e_machine {machine} (expected 62, x86-64)")));
    }
    if e_type != 2 {
        return Err(bad(format!(
            "e_type {e_type} (expected 2, ET_EXEC; 3 is a PIE or a shared object)"
        )));
    }
    let phoff = u64::from_le_bytes(bytes[32..40].try_into().unwrap_or([0; 8])) as usize;
    let phentsize = u16_at(54) as usize;
    let phnum = u16_at(56) as usize;
    if phentsize < 56 {
        return Err(bad(format!("e_phentsize {phentsize} (expected >= 56)")));
    }
    for i in 0..phnum {
        let o = phoff.saturating_add(i.saturating_mul(phentsize));
        if o.saturating_add(4) > bytes.len() {
            return Err(bad(format!("program header {i} past the end of the file")));
        }
        let t = u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap_or([0; 4]));
        if t == PT_INTERP {
            return Err(bad("has PT_INTERP: dynamically linked".into()));
        }
        if t == PT_DYNAMIC {
            return Err(bad("has PT_DYNAMIC: dynamically linked".into()));
        }
    }
    Ok(())
}

/// The program's identity: canonical path, size, mtime and CRC-32C of its bytes; also checks
/// that it is static. Returns the identity and the canonical path.
pub(crate) fn identify(path: &Path) -> Result<ProgramId> {
    let canon = std::fs::canonicalize(path).map_err(|e| WspError::io("find program", path, e))?;
    let bytes = std::fs::read(&canon).map_err(|e| WspError::io("read program", &canon, e))?;
    check_static(&canon, &bytes)?;
    let md = std::fs::metadata(&canon).map_err(|e| WspError::io("stat program", &canon, e))?;
    let path = canon.to_str().ok_or_else(|| WspError::Config {
        what: "program path",
        expected: "valid UTF-8".into(),
        found: canon.display().to_string(),
    })?;
    Ok(ProgramId {
        path: path.into(),
        size: md.len(),
        mtime_ns: md.mtime() * 1_000_000_000 + md.mtime_nsec(),
        crc32c: crc32c::crc32c(&bytes),
    })
}

/// Compare a saved identity with the program as it is now.
pub(crate) fn same_program(saved: &ProgramId) -> Result<()> {
    let p = Path::new(&saved.path);
    let md = std::fs::metadata(p).map_err(|e| WspError::io("stat program", p, e))?;
    if md.len() != saved.size {
        return Err(WspError::ProgramChanged {
            what: "size",
            expected: saved.size.to_string(),
            found: md.len().to_string(),
        });
    }
    let mtime = md.mtime() * 1_000_000_000 + md.mtime_nsec();
    if mtime != saved.mtime_ns {
        return Err(WspError::ProgramChanged {
            what: "mtime_ns",
            expected: saved.mtime_ns.to_string(),
            found: mtime.to_string(),
        });
    }
    let bytes = std::fs::read(p).map_err(|e| WspError::io("read program", p, e))?;
    let crc = crc32c::crc32c(&bytes);
    if crc != saved.crc32c {
        return Err(WspError::ProgramChanged {
            what: "crc32c",
            expected: format!("{:#010x}", saved.crc32c),
            found: format!("{crc:#010x}"),
        });
    }
    Ok(())
}

/// `uname -r`.
pub(crate) fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_non_elf_and_pie() {
        let p = Path::new("/x");
        assert!(matches!(
            check_static(p, b"#!/bin/sh\n"),
            Err(WspError::NotStatic { .. })
        ));
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        h[16] = 3;
        h[18] = 62;
        h[54] = 56;
        let e = check_static(p, &h).unwrap_err().to_string();
        assert!(e.contains("ET_EXEC"), "{e}");
        h[16] = 2;
        assert!(check_static(p, &h).is_ok());
        // One program header claimed, past the end.
        h[56] = 1;
        h[32] = 200;
        assert!(check_static(p, &h).is_err());
    }

    #[test]
    fn the_shell_is_refused_as_dynamic() {
        if let Ok(e) = identify(Path::new("/bin/sh")) {
            panic!("accepted {e:?}");
        }
    }
}
