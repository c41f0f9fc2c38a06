//! `kavach`: the command line of the Kavach storage stack.
//!
//! Every command is a thin layer over library calls (`kavach-pmem`, `kavach-log`,
//! `kavach-integrity`, ...); see `--help`.

#![forbid(unsafe_code)]

mod cr_cmd;
mod demo;
mod elect_cmd;
mod fault_cmd;
mod haq_cmd;
mod heap_cmd;
mod integrity_cmd;
mod log_cmd;
mod outcome;
mod pool_cmd;
mod progress;
mod replica_cmd;
mod serve_cmd;
mod target_cmd;
mod tvarak_cmd;
mod tvarak_files;
mod tvarak_server;
mod units;
mod wsp_cmd;

use clap::{Parser, Subcommand};
use outcome::Outcome;
use std::io::Write;
use std::process::ExitCode;

/// Kavach: a dependable storage stack for persistent memory.
///
/// Pools are files (on a DAX file system, on /dev/shm standing in for PM, or on an ordinary disk)
/// holding named regions that Kavach's layers own. Start with `kavach demo`.
#[derive(Debug, Parser)]
#[command(
    name = "kavach",
    version,
    propagate_version = true,
    arg_required_else_help = true,
    after_help = "Exit status, for every command: 0 success; 1 the command ran and found damage \
        (or could not repair all of it); 2 the command could not run (bad argument, no such \
        file, not a pool, pool in use, refused). A command that could not run leaves every \
        file as it found it."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create, inspect, check and repair pool files.
    #[command(subcommand)]
    Pool(pool_cmd::PoolCommand),
    /// Create, list and remove named regions in a pool.
    #[command(subcommand)]
    Region(pool_cmd::RegionCommand),
    /// Create, append to, dump and verify a persistent log in a pool file.
    ///
    /// The log is Arcadia's concurrent persistent log: every record gets a log sequence number
    /// (LSN), lives in a ring of cache-line-aligned (64-byte) records inside a pool region, and
    /// is forced (made durable) in LSN order, so the durable records are always a prefix of the
    /// log. A force policy says when records are forced: sync (each one before its append
    /// returns), frequency:F (only at LSNs that are multiples of F) or group:G (once G records
    /// have gathered). Recovery walks the ring from the head and ends at the first record that
    /// is missing or fails its checks.
    #[command(subcommand)]
    Log(log_cmd::LogCommand),
    /// Create a pool holding a persistent heap, check a heap, show its statistics.
    ///
    /// The heap is Kavach's libpmemobj: a size-class allocator with undo-logged transactions
    /// and a root object, in a pool region of kind `heap`. `check` and `stats` open the pool
    /// read-only and change nothing, not even by recovering an interrupted transaction.
    #[command(subcommand)]
    Heap(heap_cmd::HeapCommand),
    /// Inject media faults into a pool file (for testing detection and repair).
    #[command(subcommand)]
    Fault(fault_cmd::FaultCommand),
    /// Whole-process persistence: run an unmodified static program with its writable memory in
    /// a pool file, save its threads at a power-failure warning, resume it after the outage.
    #[command(subcommand)]
    Wsp(wsp_cmd::WspCommand),
    /// Checkpoint/restart storage (microfs): list, read, copy out and check what a job wrote
    /// to a device through the LD_PRELOAD runtime (libkavach_cr.so).
    #[command(subcommand)]
    Cr(cr_cmd::CrCommand),
    /// A block target over TCP: serves a namespace per job to checkpoint/restart runtimes on
    /// other machines (NVMe-oF's role).
    #[command(subcommand)]
    Target(target_cmd::TargetCommand),
    /// Quality of service between tenants sharing a device (HAQ): the arbitration model, its
    /// scenarios and the simulator.
    #[command(subcommand)]
    Haq(haq_cmd::HaqCommand),
    /// TVARAK's redundancy controller beside the last-level cache, simulated on traces of
    /// Kavach's own workloads: designs, baselines, ablations, faults.
    #[command(
        subcommand,
        name = "tvarak-sim",
        after_help = "`kavach tvarak-sim TRACE [OPTIONS]` is short for \
            `kavach tvarak-sim run TRACE [OPTIONS]`.\n\nExamples:\n  \
            kavach tvarak-sim gen fio --pattern rand-write -o fio-rw.trace\n  \
            kavach tvarak-sim fio-rw.trace --design all --png fio-rw.png\n  \
            kavach tvarak-sim record heap --threads 12 --ops 20000 -o heap.trace\n  \
            kavach tvarak-sim faults"
    )]
    TvarakSim(tvarak_cmd::TvarakCommand),
    /// Damage a page of a protected region as faulty media do: bit flips, lost and misdirected
    /// writes.
    ///
    /// For testing detection and repair: inject, then `kavach scrub` finds the damage and
    /// `kavach repair` rebuilds it from parity.
    ///
    /// A protected region is one with redundancy (`kavach pool create --redundancy`): a
    /// checksum per 4 KiB page and XOR parity per stripe of pages. Pages are numbered from the
    /// start of the region (`--region`, default `data`).
    #[command(subcommand)]
    Inject(integrity_cmd::InjectCommand),
    /// Verify a protected region's data, parity and checksums, and list the damage.
    ///
    /// Every data page, parity page and checksum block is checked against its checksum (and,
    /// in eager mode, every cache line against its line checksum). Nothing is written and
    /// nothing is repaired (see `kavach repair`): the pool is opened read-only. If the region
    /// was not closed cleanly (a crash), a mismatch may be a write the redundancy never
    /// covered or damage, so mismatches are listed as unverifiable. If an earlier version
    /// marked the region unverified, it is reported so until `kavach repair` proves every
    /// stripe. Each finding names what is damaged (data page, parity page of a stripe,
    /// checksum block, line), its pool byte offset, and the checksum expected and found.
    ///
    /// Exit status: 0 clean; 1 damage found, pages unverifiable or region unverified (see
    /// `kavach repair`); 2 the scrub could not run
    /// (no such file, not a pool, pool in use, no such region, region not protected, redundancy
    /// mode off).
    #[command(after_help = "Examples:\n  \
        kavach scrub /dev/shm/p.pool\n  \
        kavach scrub /dev/shm/p.pool --region data --json")]
    Scrub(integrity_cmd::CheckArgs),
    /// Scrub a protected region, then repair from parity what parity can prove.
    ///
    /// Damaged data and parity pages are rebuilt and damaged checksums recomputed.
    /// A data page is rebuilt only when the other pages of its stripe and the stripe's parity
    /// pass their checksums and the rebuilt page passes its own; anything else is reported as
    /// not repaired, with the reason, and left as it is (never guessed). A region not closed
    /// cleanly is resynced at open, and each page whose checksum changed is named. An
    /// unverified region (marked by an earlier version) is never resynced: repair proves every stripe
    /// before marking it verified, and names any it cannot prove (exit 1).
    ///
    /// Exit status: 0 everything repaired (or nothing to repair); 1 some damage could not be
    /// repaired (each such finding is named with the reason); 2 the repair could not run (no
    /// such file, not a pool, pool in use, no such region, region not protected, redundancy
    /// mode off).
    #[command(after_help = "Examples:\n  \
        kavach repair /dev/shm/p.pool\n  \
        kavach repair /dev/shm/p.pool --json")]
    Repair(integrity_cmd::CheckArgs),
    /// Tools for testing: fill a protected region with seeded content, print a region's digest.
    #[command(subcommand)]
    Debug(integrity_cmd::DebugCommand),
    /// Serve a durable key-value store over the Redis protocol (RESP2 and RESP3), alone or replicated
    /// (--replicas on the primary, --role backup on each backup).
    Serve(Box<serve_cmd::ServeArgs>),
    /// Make a running replication backup the primary (manual failover).
    Promote(replica_cmd::PromoteArgs),
    /// Automatic failover: run beside each backup; through an etcd lease, one elector
    /// promotes its node and the others take over when it dies.
    Elect(elect_cmd::ElectArgs),
    /// Show what Kavach does today: creates a pool under ./kavach-data if missing, uses it,
    /// crashes a region update on the persistence simulator, and damages and repairs a header.
    Demo(demo::DemoArgs),
}

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        // A reader that went away (`kavach pool info | head`) is not a bug: end quietly, with
        // the status a shell gives a process killed by SIGPIPE.
        if msg.starts_with("failed printing to stdout") {
            std::process::exit(141);
        }
        let _ = writeln!(
            std::io::stderr(),
            "kavach: internal error{at}: {msg} (this is a bug in Kavach; please report it)"
        );
    }));
    let cli = Cli::parse();
    // A panic is a bug, but the command still could not run: exit 2 like any other failure
    // (after the hook above has said where), never Rust's 101.
    let result = match std::panic::catch_unwind(move || dispatch(cli)) {
        Ok(result) => result,
        Err(_) => return ExitCode::from(2),
    };
    match result {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Damage) => ExitCode::from(1),
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            // A reader that went away (`kavach cr ls DEVICE | head`), as in the panic hook.
            ExitCode::from(141)
        }
        Err(e) => {
            // A closed or full stderr must not turn "could not run" into a panic.
            let _ = writeln!(std::io::stderr(), "kavach: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Run the command `cli` names.
fn dispatch(cli: Cli) -> anyhow::Result<Outcome> {
    match cli.command {
        Command::Pool(c) => pool_cmd::run_pool(c),
        Command::Region(c) => pool_cmd::run_region(c),
        Command::Fault(c) => fault_cmd::run(c),
        Command::Inject(c) => integrity_cmd::run_inject(c),
        Command::Scrub(a) => integrity_cmd::run_scrub(&a),
        Command::Repair(a) => integrity_cmd::run_repair(&a),
        Command::Debug(c) => integrity_cmd::run_debug(c),
        Command::Log(c) => log_cmd::run(c),
        Command::Heap(c) => heap_cmd::run(c),
        Command::Wsp(c) => wsp_cmd::run(c),
        Command::Cr(c) => cr_cmd::run(c),
        Command::Target(c) => target_cmd::run(c),
        Command::Haq(c) => haq_cmd::run(c),
        Command::TvarakSim(c) => tvarak_cmd::run(c),
        Command::Demo(a) => demo::run(&a),
        Command::Serve(a) => serve_cmd::run(&a),
        Command::Promote(a) => replica_cmd::run_promote(&a),
        Command::Elect(a) => elect_cmd::run(&a),
    }
}
