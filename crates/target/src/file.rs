//! [`FileDevice`]: a file or block device opened with `O_DSYNC`, and `O_DIRECT` where the file
//! system allows it.

use crate::device::Device;
use crate::error::{DeviceError, Result, check_range};
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

/// The alignment of offsets, lengths and memory for `O_DIRECT` IO (a multiple of every
/// logical block size in use, and the page size).
pub const DIRECT_ALIGN: u32 = 4096;
/// The block size reported without `O_DIRECT`.
pub const BUFFERED_BLOCK: u32 = 512;
/// The largest bounce buffer an unaligned request uses at a time.
const BOUNCE: usize = 1 << 20;

/// Whether to open with `O_DIRECT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direct {
    /// `O_DIRECT` if the file system takes it and the size is a multiple of
    /// [`DIRECT_ALIGN`], otherwise without (still `O_DSYNC`).
    #[default]
    Auto,
    /// `O_DIRECT` or refuse to open.
    On,
    /// Never `O_DIRECT` (the page cache, written through with `O_DSYNC`).
    Off,
}

/// How to open a [`FileDevice`].
#[derive(Debug, Clone, Default)]
pub struct FileOptions {
    /// Create the file with this many bytes (sparse) if it does not exist, and extend a shorter
    /// regular file to it; a longer one keeps its size. `None`: the file must exist.
    pub create_len: Option<u64>,
    /// `O_DIRECT` or not.
    pub direct: Direct,
}

/// A file (or block device) as a device. Every write is durable when it returns: the file is
/// opened with `O_DSYNC`, and with `O_DIRECT` where the file system allows it (then unaligned
/// requests go through aligned bounce buffers, partial blocks read, modified and written).
/// Threads may share a handle: aligned writes and all reads run in parallel, a write that has
/// to read-modify-write partial blocks runs alone.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    path: PathBuf,
    capacity: u64,
    direct: bool,
    /// Aligned direct writes take it shared, read-modify-writes exclusive: a partial block
    /// rewritten from a stale copy would undo a concurrent aligned write to that block.
    rmw: RwLock<()>,
}

/// A zeroed buffer of `len` bytes whose start is aligned to `align`, made by over-allocating.
struct Aligned {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize, align: usize) -> Aligned {
        let raw = vec![0u8; len + align];
        let start = raw.as_ptr().align_offset(align);
        // align_offset on a byte pointer is always below `align` at run time.
        let start = if start < align { start } else { 0 };
        Aligned { raw, start, len }
    }
    fn buf(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
    fn slice(&mut self, len: usize) -> &mut [u8] {
        &mut self.raw[self.start..self.start + len]
    }
}

fn aligned(v: u64) -> bool {
    v % DIRECT_ALIGN as u64 == 0
}

fn ptr_aligned(p: *const u8) -> bool {
    (p as usize) % DIRECT_ALIGN as usize == 0
}

impl FileDevice {
    /// Open (or create, see [`FileOptions::create_len`]) the file at `path`. A file this call
    /// created is removed again if the open fails later on.
    pub fn open(path: &Path, opts: &FileOptions) -> Result<FileDevice> {
        let label = path.display().to_string();
        let exists = path.exists();
        if let Ok(m) = std::fs::metadata(path)
            && m.is_dir()
        {
            return Err(DeviceError::Invalid {
                what: format!("device {label}"),
                expected: "a regular file or a block device".into(),
                found: "a directory".into(),
            });
        }
        let created = !exists && opts.create_len.is_some();
        if !exists && opts.create_len.is_none() {
            return Err(DeviceError::io(
                format!("cannot open {label}"),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
        let r = Self::open_inner(path, &label, opts, created);
        if r.is_err() && created {
            let _ = std::fs::remove_file(path);
        }
        r
    }

    fn open_inner(
        path: &Path,
        label: &str,
        opts: &FileOptions,
        created: bool,
    ) -> Result<FileDevice> {
        let plain = OpenOptions::new()
            .read(true)
            .write(true)
            .create(created)
            .mode(0o600)
            .custom_flags(libc::O_DSYNC | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| DeviceError::io(format!("cannot open {label}"), e))?;
        let meta = plain
            .metadata()
            .map_err(|e| DeviceError::io(format!("cannot stat {label}"), e))?;
        let ft = meta.file_type();
        let mut capacity = if ft.is_file() {
            meta.len()
        } else if ft.is_block_device() {
            (&plain)
                .seek(SeekFrom::End(0))
                .map_err(|e| DeviceError::io(format!("cannot find the size of {label}"), e))?
        } else {
            return Err(DeviceError::Invalid {
                what: format!("device {label}"),
                expected: "a regular file or a block device".into(),
                found: format!("{ft:?}"),
            });
        };
        if let Some(want) = opts.create_len
            && ft.is_file()
            && capacity < want
        {
            plain
                .set_len(want)
                .map_err(|e| DeviceError::io(format!("cannot size {label} to {want} bytes"), e))?;
            plain
                .sync_all()
                .map_err(|e| DeviceError::io(format!("cannot sync {label}"), e))?;
            capacity = want;
            if created {
                sync_parent(path, label)?;
            }
        }
        let mut dev = FileDevice {
            file: plain,
            path: path.to_path_buf(),
            capacity,
            direct: false,
            rmw: RwLock::new(()),
        };
        if opts.direct == Direct::Off {
            return Ok(dev);
        }
        let refuse = |why: String| -> Result<FileDevice> {
            Err(DeviceError::Refused {
                what: format!("O_DIRECT on {label}: {why}"),
            })
        };
        if !aligned(capacity) {
            if opts.direct == Direct::On {
                return refuse(format!(
                    "its size {capacity} is not a multiple of {DIRECT_ALIGN}"
                ));
            }
            return Ok(dev);
        }
        match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT | libc::O_DSYNC | libc::O_CLOEXEC)
            .open(path)
        {
            Ok(f) => {
                // Some file systems take the flag and refuse the IO: probe one block.
                let probe = if capacity > 0 {
                    let mut b = Aligned::new(DIRECT_ALIGN as usize, DIRECT_ALIGN as usize);
                    f.read_exact_at(b.buf(), 0)
                } else {
                    Ok(())
                };
                match probe {
                    Ok(()) => {
                        dev.file = f;
                        dev.direct = true;
                        Ok(dev)
                    }
                    Err(e) if opts.direct == Direct::On => {
                        refuse(format!("a direct read of the first block failed: {e}"))
                    }
                    Err(_) => Ok(dev),
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && opts.direct == Direct::Auto => {
                Ok(dev)
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                refuse("the file system does not support it".into())
            }
            Err(e) => Err(DeviceError::io(
                format!("cannot open {label} with O_DIRECT"),
                e,
            )),
        }
    }

    /// Whether the file is open with `O_DIRECT`.
    pub fn direct(&self) -> bool {
        self.direct
    }

    /// The path opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }

    fn err(&self, op: &str, offset: u64, len: usize, e: std::io::Error) -> DeviceError {
        DeviceError::io(
            format!("cannot {op} [{offset}, +{len}) of {}", self.path.display()),
            e,
        )
    }

    /// Read the aligned range `[a0, a0 + buf.len())` into an aligned buffer.
    fn read_direct(&self, a0: u64, buf: &mut [u8]) -> Result<()> {
        self.file
            .read_exact_at(buf, a0)
            .map_err(|e| self.err("read", a0, buf.len(), e))
    }
}

fn sync_parent(path: &Path, label: &str) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)
        .and_then(|d| d.sync_all())
        .map_err(|e| DeviceError::io(format!("cannot sync the directory of {label}"), e))
}

impl Device for FileDevice {
    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn block_size(&self) -> u32 {
        if self.direct {
            DIRECT_ALIGN
        } else {
            BUFFERED_BLOCK
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(offset, buf.len() as u64, self.capacity)?;
        if buf.is_empty() {
            return Ok(());
        }
        if !self.direct
            || (aligned(offset) && aligned(buf.len() as u64) && ptr_aligned(buf.as_ptr()))
        {
            return self
                .file
                .read_exact_at(buf, offset)
                .map_err(|e| self.err("read", offset, buf.len(), e));
        }
        let b = DIRECT_ALIGN as u64;
        let end = offset + buf.len() as u64;
        let (a0, a1) = (offset / b * b, end.div_ceil(b) * b);
        let mut bounce = Aligned::new(BOUNCE.min((a1 - a0) as usize), DIRECT_ALIGN as usize);
        let mut p0 = a0;
        while p0 < a1 {
            let n = (a1 - p0).min(BOUNCE as u64) as usize;
            let piece = bounce.slice(n);
            self.read_direct(p0, piece)?;
            let (lo, hi) = (p0.max(offset), (p0 + n as u64).min(end));
            buf[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&piece[(lo - p0) as usize..(hi - p0) as usize]);
            p0 += n as u64;
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        check_range(offset, data.len() as u64, self.capacity)?;
        if data.is_empty() {
            return Ok(());
        }
        if !self.direct {
            return self
                .file
                .write_all_at(data, offset)
                .map_err(|e| self.err("write", offset, data.len(), e));
        }
        if aligned(offset) && aligned(data.len() as u64) && ptr_aligned(data.as_ptr()) {
            let _shared = self.rmw.read().unwrap_or_else(|p| p.into_inner());
            return self
                .file
                .write_all_at(data, offset)
                .map_err(|e| self.err("write", offset, data.len(), e));
        }
        let partial = !aligned(offset) || !aligned(offset + data.len() as u64);
        let _guard = if partial {
            (
                None,
                Some(self.rmw.write().unwrap_or_else(|p| p.into_inner())),
            )
        } else {
            // Whole blocks from unaligned memory: bounced, nothing read back.
            (
                Some(self.rmw.read().unwrap_or_else(|p| p.into_inner())),
                None,
            )
        };
        let b = DIRECT_ALIGN as u64;
        let end = offset + data.len() as u64;
        let (a0, a1) = (offset / b * b, end.div_ceil(b) * b);
        let mut bounce = Aligned::new(BOUNCE.min((a1 - a0) as usize), DIRECT_ALIGN as usize);
        let mut p0 = a0;
        while p0 < a1 {
            let n = (a1 - p0).min(BOUNCE as u64) as usize;
            let p1 = p0 + n as u64;
            let piece = bounce.slice(n);
            // Partial first and last blocks keep the bytes around the request.
            if p0 < offset {
                self.read_direct(p0, &mut piece[..b as usize])?;
            }
            if p1 > end && (p1 - b > p0 || p0 >= offset) {
                self.read_direct(p1 - b, &mut piece[n - b as usize..])?;
            }
            let (lo, hi) = (p0.max(offset), p1.min(end));
            piece[(lo - p0) as usize..(hi - p0) as usize]
                .copy_from_slice(&data[(lo - offset) as usize..(hi - offset) as usize]);
            self.file
                .write_all_at(piece, p0)
                .map_err(|e| self.err("write", p0, n, e))?;
            p0 = p1;
        }
        Ok(())
    }

    fn label(&self) -> String {
        self.path.display().to_string()
    }

    fn claim(&self, offset: u64, len: u64) -> Result<()> {
        check_range(offset, len, self.capacity)?;
        crate::lock::claim(&self.file, &self.label(), offset, len)
    }

    fn flush(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| DeviceError::io(format!("cannot sync {}", self.path.display()), e))
    }
}
