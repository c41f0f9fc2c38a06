//! PMPI wrappers of `MPI_Init`, `MPI_Init_thread` and `MPI_Finalize`: the runtime's life cycle
//! under an MPI job.
//!
//! The library exports the three MPI symbols; loaded with `LD_PRELOAD` it comes before the MPI
//! library, so the program's calls land here. Each calls the MPI library's `PMPI_*` entry (the
//! standard profiling interface), found at run time with `dlsym`: the library has no link-time
//! dependency on MPI and loads into programs without it (whose calls never come here).
//!
//! **Open MPI only.** Handles are taken from Open MPI's ABI: `MPI_COMM_WORLD` is the address of
//! the symbol `ompi_mpi_comm_world`, `MPI_BYTE` that of `ompi_mpi_byte`. Under another MPI
//! (MPICH, whose handles are integers) `MPI_Init` finds no `ompi_mpi_comm_world`, prints why and
//! aborts the job when `KAVACH_CR_DIR` is set. Fortran's `mpi_init_` is not wrapped.
//!
//! After `PMPI_Init`, when `KAVACH_CR_DIR` is set (otherwise nothing happens):
//!
//! 1. every rank learns the node of every rank (its host name, or `KAVACH_CR_NODE`;
//!    `MPI_Allgather`);
//! 2. every rank runs the balancer ([`microfs::balance`]): with `KAVACH_CR_TOPOLOGY` over that
//!    topology file, otherwise over the devices of `KAVACH_CR_DEVICES` (comma-separated specs),
//!    else the single `KAVACH_CR_DEVICE` or the default device of the checkpoint directory; the
//!    ranks compare a digest of their plans, so ranks with different settings stop the job;
//! 3. `MPI_Comm_split` by device index (colour) and world rank (key) gives the communicator of
//!    the ranks sharing a device (NVMe-CR's `MPI_COMM_CR`);
//! 4. its rank 0 opens the device and writes the device label (`microfs::label`) if there is
//!    none, then everyone waits at a barrier;
//! 5. each rank starts its instance on partition = its rank in that communicator, parts = its
//!    size, provenance rank = world rank, epoch = `KAVACH_CR_EPOCH`, else Open MPI's job id,
//!    else the time in seconds (world rank 0's value, broadcast). `KAVACH_CR_COALESCE=0` turns
//!    the log's write coalescing off (for measurements; default on).
//!
//! `MPI_Finalize` checkpoints and closes the instance, frees the communicator, then calls
//! `PMPI_Finalize`.
//!
//! **Errors abort the job.** A rank that cannot set up its instance (or close it) prints
//! `kavach-cr: rank R on HOST: what went wrong` to standard error and calls
//! `MPI_Abort(MPI_COMM_WORLD, 2)`. Going on without the runtime is not an option: the program
//! would then write its checkpoints into a namespace made lazily from the environment, which
//! the ranks would share without partitions.

use std::sync::Mutex;

use microfs::balance::{self, Plan, Topology};

// Exporting C symbols and calling the MPI library through pointers found with `dlsym` cannot be
// done in safe Rust; this module holds all of it, behind safe wrappers.
#[allow(unsafe_code)]
mod pmpi {
    use std::ffi::{CStr, c_char, c_int, c_void};

    const MPI_SUCCESS: c_int = 0;

    type Handle = *mut c_void;
    type InitFn = unsafe extern "C" fn(*mut c_int, *mut *mut *mut c_char) -> c_int;
    type InitThreadFn =
        unsafe extern "C" fn(*mut c_int, *mut *mut *mut c_char, c_int, *mut c_int) -> c_int;
    type FinalizeFn = unsafe extern "C" fn() -> c_int;
    type CommIntFn = unsafe extern "C" fn(Handle, *mut c_int) -> c_int;
    type AllgatherFn = unsafe extern "C" fn(
        *const c_void,
        c_int,
        Handle,
        *mut c_void,
        c_int,
        Handle,
        Handle,
    ) -> c_int;
    type SplitFn = unsafe extern "C" fn(Handle, c_int, c_int, *mut Handle) -> c_int;
    type BarrierFn = unsafe extern "C" fn(Handle) -> c_int;
    type BcastFn = unsafe extern "C" fn(*mut c_void, c_int, Handle, c_int, Handle) -> c_int;
    type AbortFn = unsafe extern "C" fn(Handle, c_int) -> c_int;
    type FreeFn = unsafe extern "C" fn(*mut Handle) -> c_int;

    fn sym(name: &CStr) -> Result<*mut c_void, String> {
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks the name up.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
        if p.is_null() {
            Err(format!(
                "symbol {} not found (the wrappers support Open MPI only)",
                name.to_string_lossy()
            ))
        } else {
            Ok(p)
        }
    }

    macro_rules! func {
        ($name:literal, $ty:ty) => {{
            let p = sym($name)?;
            // SAFETY: `p` is the address of the named function of the MPI library, whose C
            // prototype (from Open MPI's mpi.h) is the one `$ty` spells.
            unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
        }};
    }

    /// Open MPI, found at run time. A communicator is kept as a `usize` (its handle's address).
    #[derive(Debug, Clone, Copy)]
    pub(super) struct Mpi {
        world: usize,
        byte: usize,
        comm_rank: CommIntFn,
        comm_size: CommIntFn,
        allgather: AllgatherFn,
        split: SplitFn,
        barrier: BarrierFn,
        bcast: BcastFn,
        abort: AbortFn,
        free: FreeFn,
    }

    fn check(what: &str, rc: c_int) -> Result<(), String> {
        if rc == MPI_SUCCESS {
            Ok(())
        } else {
            Err(format!("{what} returned MPI error {rc}"))
        }
    }

    impl Mpi {
        pub(super) fn load() -> Result<Mpi, String> {
            Ok(Mpi {
                world: sym(c"ompi_mpi_comm_world")? as usize,
                byte: sym(c"ompi_mpi_byte")? as usize,
                comm_rank: func!(c"PMPI_Comm_rank", CommIntFn),
                comm_size: func!(c"PMPI_Comm_size", CommIntFn),
                allgather: func!(c"PMPI_Allgather", AllgatherFn),
                split: func!(c"PMPI_Comm_split", SplitFn),
                barrier: func!(c"PMPI_Barrier", BarrierFn),
                bcast: func!(c"PMPI_Bcast", BcastFn),
                abort: func!(c"PMPI_Abort", AbortFn),
                free: func!(c"PMPI_Comm_free", FreeFn),
            })
        }

        pub(super) fn world(&self) -> usize {
            self.world
        }

        pub(super) fn rank(&self, comm: usize) -> Result<i32, String> {
            let mut v: c_int = -1;
            // SAFETY: `comm` is a live communicator handle; the out pointer is a local.
            check("MPI_Comm_rank", unsafe {
                (self.comm_rank)(comm as Handle, &mut v)
            })?;
            Ok(v)
        }

        pub(super) fn size(&self, comm: usize) -> Result<i32, String> {
            let mut v: c_int = -1;
            // SAFETY: as in `rank`.
            check("MPI_Comm_size", unsafe {
                (self.comm_size)(comm as Handle, &mut v)
            })?;
            Ok(v)
        }

        /// Every rank's `send` (all the same length), in rank order.
        pub(super) fn allgather(&self, send: &[u8], comm: usize) -> Result<Vec<u8>, String> {
            let n = self.size(comm)? as usize;
            let count = c_int::try_from(send.len()).map_err(|_| "allgather too large")?;
            let mut recv = vec![0u8; send.len() * n];
            // SAFETY: `send` holds `count` bytes and `recv` `count * size` bytes, the sizes
            // MPI_Allgather reads and writes with MPI_BYTE; the handles are live.
            check("MPI_Allgather", unsafe {
                (self.allgather)(
                    send.as_ptr().cast(),
                    count,
                    self.byte as Handle,
                    recv.as_mut_ptr().cast(),
                    count,
                    self.byte as Handle,
                    comm as Handle,
                )
            })?;
            Ok(recv)
        }

        pub(super) fn split(&self, comm: usize, color: i32, key: i32) -> Result<usize, String> {
            let mut out: Handle = std::ptr::null_mut();
            // SAFETY: `comm` is live; the out pointer is a local.
            check("MPI_Comm_split", unsafe {
                (self.split)(comm as Handle, color, key, &mut out)
            })?;
            Ok(out as usize)
        }

        pub(super) fn barrier(&self, comm: usize) -> Result<(), String> {
            // SAFETY: `comm` is live.
            check("MPI_Barrier", unsafe { (self.barrier)(comm as Handle) })
        }

        pub(super) fn bcast_u64(&self, v: u64, root: i32, comm: usize) -> Result<u64, String> {
            let mut buf = v.to_le_bytes();
            // SAFETY: `buf` holds the 8 bytes broadcast as MPI_BYTE; the handles are live.
            check("MPI_Bcast", unsafe {
                (self.bcast)(
                    buf.as_mut_ptr().cast(),
                    8,
                    self.byte as Handle,
                    root,
                    comm as Handle,
                )
            })?;
            Ok(u64::from_le_bytes(buf))
        }

        pub(super) fn free(&self, comm: usize) -> Result<(), String> {
            let mut h = comm as Handle;
            // SAFETY: `comm` is a communicator this module made with MPI_Comm_split and has
            // not freed; MPI_Comm_free writes MPI_COMM_NULL to the local.
            check("MPI_Comm_free", unsafe { (self.free)(&mut h) })
        }

        pub(super) fn abort(&self, code: c_int) -> ! {
            // SAFETY: MPI_COMM_WORLD is live after MPI_Init; MPI_Abort does not return.
            unsafe { (self.abort)(self.world as Handle, code) };
            std::process::exit(code)
        }
    }

    /// Aborts when even the MPI library cannot be found.
    fn fail_without_mpi(msg: &str) -> ! {
        eprintln!("kavach-cr: {msg}");
        std::process::exit(2)
    }

    /// # Safety
    ///
    /// As `MPI_Init`: `argc` and `argv` are null or the program's `&argc` and `&argv`.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn MPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int {
        let init = match (|| Ok::<_, String>(func!(c"PMPI_Init", InitFn)))() {
            Ok(f) => f,
            Err(e) => fail_without_mpi(&e),
        };
        // SAFETY: the caller's pointers go to PMPI_Init unchanged, under the same contract.
        let rc = unsafe { init(argc, argv) };
        if rc == MPI_SUCCESS {
            super::after_init();
        }
        rc
    }

    /// # Safety
    ///
    /// As `MPI_Init_thread`: `argc`/`argv` null or the program's, `provided` a valid pointer.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn MPI_Init_thread(
        argc: *mut c_int,
        argv: *mut *mut *mut c_char,
        required: c_int,
        provided: *mut c_int,
    ) -> c_int {
        let init = match (|| Ok::<_, String>(func!(c"PMPI_Init_thread", InitThreadFn)))() {
            Ok(f) => f,
            Err(e) => fail_without_mpi(&e),
        };
        // SAFETY: the caller's pointers go to PMPI_Init_thread unchanged.
        let rc = unsafe { init(argc, argv, required, provided) };
        if rc == MPI_SUCCESS {
            super::after_init();
        }
        rc
    }

    #[unsafe(no_mangle)]
    pub extern "C" fn MPI_Finalize() -> c_int {
        let fin = match (|| Ok::<_, String>(func!(c"PMPI_Finalize", FinalizeFn)))() {
            Ok(f) => f,
            Err(e) => fail_without_mpi(&e),
        };
        super::before_finalize();
        // SAFETY: no arguments; called once, as the program called MPI_Finalize.
        unsafe { fin() }
    }
}

/// What `MPI_Init` set up, for `MPI_Finalize`.
#[derive(Debug)]
struct Running {
    mpi: pmpi::Mpi,
    comm_cr: usize,
    rank: i32,
    host: String,
}

static RUNNING: Mutex<Option<Running>> = Mutex::new(None);

/// The longest node name exchanged.
const HOST_MAX: usize = 255;

fn node_name() -> Result<String, String> {
    let name = match std::env::var("KAVACH_CR_NODE") {
        Ok(n) => n,
        Err(std::env::VarError::NotPresent) => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map_err(|e| format!("cannot read /proc/sys/kernel/hostname: {e}"))?
            .trim()
            .to_string(),
        Err(e) => return Err(format!("KAVACH_CR_NODE: {e}")),
    };
    if name.is_empty() || name.len() > HOST_MAX || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "node name {name:?}: expected 1 to {HOST_MAX} bytes of printable ASCII"
        ));
    }
    Ok(name)
}

/// The epoch of this run, before world rank 0's value is broadcast.
fn epoch_here() -> Result<u64, String> {
    match std::env::var("KAVACH_CR_EPOCH") {
        Ok(s) => s
            .trim()
            .parse::<u64>()
            .map_err(|_| format!("KAVACH_CR_EPOCH {s:?}: expected an unsigned 64-bit number")),
        Err(std::env::VarError::NotPresent) => {
            if let Some(id) = std::env::var("OMPI_MCA_ess_base_jobid")
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
            {
                return Ok(id);
            }
            Ok(std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0))
        }
        Err(e) => Err(format!("KAVACH_CR_EPOCH: {e}")),
    }
}

fn env_opt(name: &str) -> Result<Option<String>, String> {
    match std::env::var(name) {
        Ok(v) if v.trim().is_empty() => Err(format!("{name} is set but empty")),
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e) => Err(format!("{name}: {e}")),
    }
}

/// The balancer's plan for these hosts, from the environment.
fn make_plan(hosts: &[String], default_device: &str) -> Result<Plan, String> {
    if let Some(path) = env_opt("KAVACH_CR_TOPOLOGY")? {
        let topo = Topology::load(std::path::Path::new(&path)).map_err(|e| e.to_string())?;
        return balance::plan(&topo, hosts).map_err(|e| format!("{path}: {e}"));
    }
    let devices = match env_opt("KAVACH_CR_DEVICES")? {
        Some(list) => balance::parse_device_list(&list).map_err(|e| e.to_string())?,
        None => vec![default_device.to_string()],
    };
    balance::plan_local(hosts, &devices).map_err(|e| e.to_string())
}

/// A digest of a plan, which every rank must agree on.
fn plan_digest(plan: &Plan, epoch: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ epoch;
    let text = format!("{plan}{:?}", plan.ranks);
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn setup(mpi: &pmpi::Mpi, rank: i32, host: &str) -> Result<Option<Running>, String> {
    let Some(mut cfg) = microfs::instance::Config::from_env().map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let world = mpi.world();
    let size = mpi.size(world)?;

    // 1. Every rank's node.
    let mut buf = [0u8; HOST_MAX + 1];
    buf[..host.len()].copy_from_slice(host.as_bytes());
    let all = mpi.allgather(&buf, world)?;
    let hosts: Vec<String> = all
        .chunks(HOST_MAX + 1)
        .map(|c| {
            let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
            String::from_utf8_lossy(&c[..end]).into_owned()
        })
        .collect();
    if hosts.len() != size as usize {
        return Err(format!(
            "MPI_Allgather gave {} names for {size} ranks",
            hosts.len()
        ));
    }

    // 2. The plan, the same on every rank.
    let plan = make_plan(&hosts, &cfg.device)?;
    let epoch = mpi.bcast_u64(epoch_here()?, 0, world)?;
    let digest = plan_digest(&plan, epoch);
    let digests = mpi.allgather(&digest.to_le_bytes(), world)?;
    if let Some(other) = digests
        .chunks(8)
        .position(|c| c != digest.to_le_bytes().as_slice())
    {
        return Err(format!(
            "rank {other} made a different device plan (are KAVACH_CR_TOPOLOGY, \
             KAVACH_CR_DEVICES and KAVACH_CR_DEVICE the same on every rank?)"
        ));
    }
    let mine = plan
        .ranks
        .get(rank as usize)
        .cloned()
        .ok_or_else(|| format!("the plan has {} ranks, not rank {rank}", plan.ranks.len()))?;
    let device = &plan.devices[mine.device];
    if rank == 0 && std::env::var_os("KAVACH_CR_VERBOSE").is_some() {
        eprint!("kavach-cr: device plan for {size} ranks:\n{plan}");
        for (spec, n) in plan.ratio_outside_guidance() {
            eprintln!(
                "kavach-cr: {spec} serves {n} ranks (the dissertation found 56 to 112 per SSD used it fully)"
            );
        }
    }
    if mine.same_domain {
        // Said once per device, by its first rank.
        if mine.partition == 0 {
            eprintln!(
                "kavach-cr: rank {rank} on {host}: {} lies in the rank's own failure domain \
                 (the topology has no other domain with devices)",
                device.spec
            );
        }
    }

    // 3. MPI_COMM_CR: the ranks of one device.
    let color = i32::try_from(mine.device).map_err(|_| "too many devices".to_string())?;
    let comm_cr = mpi.split(world, color, rank)?;
    let crank = mpi.rank(comm_cr)?;
    let csize = mpi.size(comm_cr)?;
    if crank as u32 != mine.partition || csize as u32 != mine.parts {
        return Err(format!(
            "MPI_Comm_split gave rank {crank} of {csize} on {}; the plan says {} of {}",
            device.spec, mine.partition, mine.parts
        ));
    }
    cfg.device = device.spec.clone();
    if let Some(c) = device.capacity {
        cfg.size = c;
    }
    cfg.partition = Some(mine.partition);
    cfg.parts = Some(mine.parts);
    if let Some(c) = env_opt("KAVACH_CR_COALESCE")? {
        cfg.fs.coalesce = match c.trim() {
            "1" => true,
            "0" => false,
            other => {
                return Err(format!("KAVACH_CR_COALESCE {other:?}: expected 0 or 1"));
            }
        };
    }
    cfg.fs.provenance = microfs::Provenance {
        rank: rank as u32,
        epoch,
    };

    // 4. The device label, by the device's first rank.
    let label_result = if crank == 0 {
        write_label(&cfg)
    } else {
        Ok(())
    };
    label_result?;
    mpi.barrier(comm_cr)?;

    // 5. The instance.
    crate::instance_start(cfg)?;
    Ok(Some(Running {
        mpi: *mpi,
        comm_cr,
        rank,
        host: host.to_string(),
    }))
}

/// Opens the device and writes its label unless it has one for this job and part count.
fn write_label(cfg: &microfs::instance::Config) -> Result<(), String> {
    let parts = cfg.parts.unwrap_or(1);
    let dev = target::open_spec(&cfg.device, Some(cfg.size))
        .map_err(|e| format!("open device {}: {e}", cfg.device))?;
    match microfs::label::read(dev.as_ref()).map_err(|e| format!("{}: {e}", cfg.device))? {
        None => {
            microfs::label::write(dev.as_ref(), &cfg.job, parts)
                .map_err(|e| format!("label {}: {e}", cfg.device))?;
            Ok(())
        }
        Some(l) if l.job == cfg.job && l.parts == parts => Ok(()),
        Some(l) => Err(format!(
            "{} is labelled for job {:?} in {} partitions; this run puts job {:?} in {} \
             (use the same rank count and KAVACH_CR_JOB as the run that wrote it, or another device)",
            cfg.device, l.job, l.parts, cfg.job, parts
        )),
    }
}

fn after_init() {
    if std::env::var_os("KAVACH_CR_DIR").is_none() {
        return;
    }
    let mpi = match pmpi::Mpi::load() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("kavach-cr: {e}; aborting");
            std::process::exit(2);
        }
    };
    let host = node_name().unwrap_or_else(|e| {
        eprintln!("kavach-cr: {e}; aborting the job");
        mpi.abort(2)
    });
    let rank = match mpi.rank(mpi.world()) {
        Ok(r) if r >= 0 => r,
        other => {
            eprintln!(
                "kavach-cr: on {host}: no rank in MPI_COMM_WORLD ({other:?}); aborting the job"
            );
            mpi.abort(2)
        }
    };
    match setup(&mpi, rank, &host) {
        Ok(running) => {
            *RUNNING.lock().unwrap_or_else(|p| p.into_inner()) = running;
        }
        Err(e) => {
            eprintln!("kavach-cr: rank {rank} on {host}: {e}; aborting the job (MPI_Abort)");
            mpi.abort(2)
        }
    }
}

fn before_finalize() {
    let running = RUNNING.lock().unwrap_or_else(|p| p.into_inner()).take();
    let Some(r) = running else { return };
    let result = crate::instance_finish().and_then(|()| r.mpi.free(r.comm_cr));
    if let Err(e) = result {
        eprintln!(
            "kavach-cr: rank {} on {}: closing the checkpoint namespace: {e}; aborting the job (MPI_Abort)",
            r.rank, r.host
        );
        r.mpi.abort(2)
    }
}
