//! `wsp`: Whole-System Persistence for one unmodified process.
//!
//! [`run`] starts a static, non-PIE x86-64 Linux program under a ptrace supervisor (the
//! *runner*) in a new pid namespace with address-space randomisation off. In
//! [`SaveMode::Image`] every writable mapping of the program (data, bss, brk heap, stacks,
//! anonymous mmaps) is a shared mapping of the image file, so the program's memory *is* the
//! image; at a power-failure warning (SIGPWR to the runner, or [`RunConfig::warn_after`]) the
//! runner stops every thread, writes their registers, the segment table and the descriptor
//! table into the image header area, optionally writes back the cache lines, and sets the valid
//! marker last, only if the window has not run out. [`resume`] starts the same program in a new
//! process and puts it back: the segments are mapped from the image at their addresses, threads
//! are recreated with their thread ids, registers, FPU/SIMD state and signal masks, files are
//! reopened at their offsets, and the program continues mid-instruction-stream.
//!
//! [`SaveMode::Hibernate`] is the baseline: memory stays anonymous and the save copies all of
//! it into the image.
//!
//! The image format is `docs/format/wsp-image.md`; the limits are listed there and in
//! [`LIMITS`].

mod elf;
mod error;
mod image;
pub mod layout;
mod signals;
mod sys;
mod tracer;
mod track;

pub use error::{Result, WspError};
pub use image::{FileEntry, ProgramId, Segment, SegmentKind};

use serde::Serialize;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What is not restored, one item a line (also in the format document).
pub const LIMITS: &[&str] = &[
    "sockets, pipes (other than descriptors 0-2), eventfds, timerfds, signalfds, epoll and other anonymous-inode descriptors: reported as not restorable; resume refuses unless told to drop them",
    "files deleted or replaced since the save: resume refuses",
    "shared mappings of files other than the image: reported as not restorable",
    "child processes: fork, vfork and clone without CLONE_THREAD fail with ENOSYS",
    "mremap fails with ENOMEM (glibc's realloc then copies); clone3 fails with ENOSYS (glibc falls back to clone)",
    "interval timers, POSIX timers and alarms are not re-armed; pending signals are lost",
    "a sleep or timed wait interrupted by the save restarts with its full duration",
    "the main thread's stack is a fixed 8 MiB (the usual limit) mapping: it cannot grow further",
    "the program runs as pid 1 of its own pid namespace (signals without a handler from outside the namespace are ignored, except SIGKILL and SIGSTOP)",
    "the same kernel release (the vdso), the same CPU features (the XSAVE layout) and the same program file are required",
    "write_back=tracked needs image mode (in hibernate mode it writes back nothing more than none): it tracks writes with a userfaultfd in asynchronous write-protect mode and PAGEMAP_SCAN (Linux 6.7 or later)",
    "at most about 150 threads: the metadata area is 1 MiB (a save that does not fit fails and leaves the marker invalid)",
];

/// Where the program's memory lives during the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SaveMode {
    /// In the image (WSP): the save writes only registers and tables.
    #[default]
    Image,
    /// Anonymous; the save copies every writable mapping into the image (the baseline).
    Hibernate,
}

/// What the save writes back from the caches before the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum WriteBack {
    /// Nothing but the header, the metadata and the marker.
    #[default]
    None,
    /// Every populated line of every image segment.
    All,
    /// Only pages written since the program (re)started, as a userfaultfd in asynchronous
    /// write-protect mode records them (read with PAGEMAP_SCAN), plus what the runner itself
    /// wrote into the image. Image mode only.
    Tracked,
}

/// What the runner does after a save (completed or missed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AfterSave {
    /// Keep the program stopped until it is killed from outside (the power going away).
    #[default]
    Hold,
    /// Kill the program at once and return (for in-process tests and harnesses).
    Kill,
}

/// How to run a program.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The image file; `run` creates it and refuses an existing one.
    pub image: PathBuf,
    /// Bytes reserved for the image (sparse; grown when the program needs more).
    pub image_size: u64,
    /// A static, non-PIE x86-64 ELF.
    pub program: PathBuf,
    /// argv[1..].
    pub args: Vec<OsString>,
    /// The residual-energy window after a warning.
    pub window: powerfail::Window,
    /// Where memory lives.
    pub save: SaveMode,
    /// What the save writes back.
    pub write_back: WriteBack,
    /// What happens after a save.
    pub after_save: AfterSave,
    /// A warning injected this long after the start (for tests; SIGPWR is the real source).
    pub warn_after: Option<Duration>,
    /// Listen for SIGPWR to this process (installs a handler).
    pub sigpwr: bool,
}

impl RunConfig {
    /// A configuration with the defaults: 1 GiB image, 33 ms window, image mode, no write-back,
    /// hold after a save, SIGPWR on.
    pub fn new(
        image: impl Into<PathBuf>,
        program: impl Into<PathBuf>,
        args: Vec<OsString>,
    ) -> Self {
        RunConfig {
            image: image.into(),
            image_size: 1 << 30,
            program: program.into(),
            args,
            window: powerfail::Window::default(),
            save: SaveMode::Image,
            write_back: WriteBack::None,
            after_save: AfterSave::Hold,
            warn_after: None,
            sigpwr: true,
        }
    }
}

/// Options of a resume (defaults: the window of 33 ms, no write-back, hold after a save,
/// SIGPWR on, like [`RunConfig::new`]).
#[derive(Debug, Clone)]
pub struct ResumeOptions {
    /// The window for later warnings.
    pub window: Option<powerfail::Window>,
    /// Write-back for later saves.
    pub write_back: Option<WriteBack>,
    /// What happens after a later save.
    pub after_save: AfterSave,
    /// A warning injected this long after the resume.
    pub warn_after: Option<Duration>,
    /// Listen for SIGPWR to this process (installs a handler).
    pub sigpwr: bool,
    /// Resume even though the image lists not-restorable objects (their descriptors are left
    /// closed, so the program sees EBADF: the "fail" policy of the paper).
    pub drop_not_restorable: bool,
}

impl Default for ResumeOptions {
    fn default() -> Self {
        ResumeOptions {
            window: None,
            write_back: None,
            after_save: AfterSave::Hold,
            warn_after: None,
            sigpwr: true,
            drop_not_restorable: false,
        }
    }
}

/// How a run or a resume ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunEnd {
    /// The program ran to its end with this status.
    Exited(i32),
    /// Killed by this signal (not by the runner).
    Killed(i32),
    /// A warning came and the save completed inside the window; the marker is valid.
    Saved(SaveReport),
    /// The save did not finish inside the window; the marker is left invalid.
    Missed(SaveReport),
}

/// What one save did and how long it took.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SaveReport {
    /// The save counter after this save.
    pub counter: u64,
    /// Threads saved.
    pub threads: usize,
    /// Bytes of program memory the image holds (all segments).
    pub image_bytes: u64,
    /// Bytes written back with cache-line write-back (or copied, in hibernate mode).
    pub written_back_bytes: u64,
    /// Warning -> every thread stopped.
    pub stop_ns: u64,
    /// Warning -> every context and table written.
    pub context_ns: u64,
    /// Warning -> marker persisted (or the decision not to set it).
    pub marker_ns: u64,
    /// The window.
    pub window_ns: u64,
    /// Whether the marker was set.
    pub in_window: bool,
    /// Kernel objects held that a resume cannot recreate, named.
    pub not_restorable: Vec<String>,
    /// Bytes copied into the image by the save (hibernate mode, or stray private mappings).
    pub copied_bytes: u64,
}

/// Progress reported to the caller.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    /// The program started, by a run or a resume (its pid in the runner's namespace).
    Started {
        /// Its pid.
        pid: i32,
    },
    /// A warning arrived.
    Warning {
        /// `sigpwr` or `injected`.
        source: String,
    },
    /// A save completed in the window.
    Saved(SaveReport),
    /// A save missed the window.
    Missed(SaveReport),
    /// A resume put the program back.
    Resumed {
        /// The save counter of the image resumed.
        counter: u64,
        /// Threads recreated (including the main one).
        threads: usize,
        /// Nanoseconds from the start of the resume to the program running again.
        ns: u64,
    },
    /// The program ended with this status.
    Exited(i32),
}

/// What `info` tells about an image.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImageInfo {
    /// The program's path.
    pub program: String,
    /// Its identity.
    pub program_id: ProgramId,
    /// argv[1..].
    pub args: Vec<String>,
    /// `running`, `saved`, `missed` or `ended`.
    pub state: String,
    /// `image` or `hibernate`.
    pub mode: String,
    /// Whether the marker is valid (state `saved` and the marker matches the header).
    pub marker_valid: bool,
    /// Saves so far.
    pub counter: u64,
    /// Threads in the last save.
    pub threads: usize,
    /// Thread ids in the last save (in the program's pid namespace).
    pub tids: Vec<i32>,
    /// Segments of the last save (or of the start, while running).
    pub segments: Vec<Segment>,
    /// Open files of the last save.
    pub files: Vec<FileEntry>,
    /// Objects a resume cannot recreate.
    pub not_restorable: Vec<String>,
    /// The exit status, once ended.
    pub exit_status: Option<i32>,
    /// The kernel release it was saved under.
    pub kernel: String,
    /// Size of the image file.
    pub file_bytes: u64,
}

pub(crate) fn state_name(s: u32) -> &'static str {
    match s {
        layout::STATE_RUNNING => "running",
        layout::STATE_SAVED => "saved",
        layout::STATE_MISSED => "missed",
        layout::STATE_ENDED => "ended",
        _ => "unknown",
    }
}

/// Run `cfg.program` with its memory in a new image.
pub fn run(cfg: &RunConfig, on_event: &mut dyn FnMut(&Event)) -> Result<RunEnd> {
    tracer::run(cfg, on_event)
}

/// Resume the program saved in `image`.
pub fn resume(
    image: &Path,
    opts: &ResumeOptions,
    on_event: &mut dyn FnMut(&Event),
) -> Result<RunEnd> {
    tracer::resume(image, opts, on_event)
}

/// Describe an image (any state); a damaged image is an error naming the damage.
pub fn info(image: &Path) -> Result<ImageInfo> {
    let l = image::load(image)?;
    let file_bytes = std::fs::metadata(image)
        .map_err(|e| WspError::io("stat image", image, e))?
        .len();
    let m = l.meta;
    Ok(ImageInfo {
        program: m.program.path.clone(),
        program_id: m.program,
        args: m.args,
        // A header that says saved without its marker is a save cut short (the power went
        // before the marker): it is reported as missed, like a save that overran its window.
        state: if l.header.state == layout::STATE_SAVED && !l.marker_valid {
            "missed".into()
        } else {
            state_name(l.header.state).into()
        },
        mode: if l.header.mode == layout::MODE_IMAGE {
            "image".into()
        } else {
            "hibernate".into()
        },
        marker_valid: l.marker_valid,
        counter: l.header.counter,
        threads: m.threads.len(),
        tids: m.threads.iter().map(|t| t.tid).collect(),
        segments: m.segments,
        files: m.files,
        not_restorable: m.not_restorable,
        exit_status: m.exit,
        kernel: m.kernel,
        file_bytes,
    })
}
