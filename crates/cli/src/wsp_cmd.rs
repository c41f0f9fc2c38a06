//! `kavach wsp`: whole-process persistence (run a program with its memory in a pool, save it at
//! a power-failure warning, resume it after the outage).
//!
//! A thin layer over the runtime library `wsp`: this module parses and checks the arguments
//! (so a wrong argument, a missing program, a dynamic or position-independent program or an
//! existing pool file is refused before anything is created), prints the runtime's events on
//! stderr and the result on stdout, and turns the end of the run into the exit status:
//!
//! | exit | `run` / `resume` | `info` |
//! | --- | --- | --- |
//! | the program's | it ran to its end (128 + N if a signal N not sent by us killed it) | |
//! | 0 | a warning came and the save completed inside the window (image valid) | valid image or ended run |
//! | 1 | the save missed the window (image not valid) | damaged or not resumable image |
//! | 2 | could not run: bad argument, no such program or pool, not static, file exists, refused | no such file, could not read |

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};

use crate::outcome::Outcome;
use crate::units::{format_size, parse_size};

const RUN_EXAMPLES: &str = "\
Examples:
  # Run a static program with its memory in a pool on /dev/shm, 33 ms window (the default):
  kavach wsp run --pool /dev/shm/sort.wsp -- ./sortsum -n 64 out.txt
  # In another shell: the power-failure warning (the save runs inside the window) ...
  kill -PWR <pid of kavach wsp run>
  # ... then power gone, and back: continue where it stopped
  kavach wsp resume --pool /dev/shm/sort.wsp
  # A window from hold-up energy: 1/2 C V^2 / P = 0.5 * 0.0022 F * 12^2 V^2 / 300 W = 0.53 ms
  kavach wsp run --pool p.wsp --hold-up-farads 0.0022 --volts 12 --watts 300 -- ./prog
  # The hibernate baseline (memory stays anonymous; copied and fsynced at the warning):
  kavach wsp run --pool p.wsp --save hibernate -- ./prog
  # For scripts: a warning injected after 500 ms, return as soon as the save is over:
  kavach wsp run --pool p.wsp --warn-after-ms 500 --after-save kill --json -- ./prog

The program must be a statically linked, non-PIE ELF (gcc -static -no-pie). Its standard input,
output and error are the command's. Events (started, warning, saved, missed, resumed, exited)
go to stderr; with --json they are JSON lines there, and the result is one JSON line, the last
line of stdout.

Exit status: the program's own status when it ran to its end (128+N if a signal N that kavach
did not send killed it); 0 after a save that completed inside the window (the image is valid and
`kavach wsp resume` continues it); 1 if the save missed the window (the image is not valid; run
the program again from scratch); 2 if it could not run (bad argument, no such program, not a
static non-PIE program, the pool file exists, ptrace refused).";

const RESUME_EXAMPLES: &str = "\
Examples:
  kavach wsp resume --pool /dev/shm/sort.wsp
  kavach wsp resume --pool /dev/shm/sort.wsp --window-ms 10 --json

Resume refuses (exit 2, and leaves the pool file as it was) an image whose valid marker is not
set (the save missed its window, or the run was killed with no save), a damaged image, an image
whose program or kernel changed since `run`, and an image that names kernel objects it cannot
recreate (sockets, pipes; see --drop-not-restorable). A resumed program is a run again: a later warning saves
it again. Exit statuses as for `kavach wsp run`.";

const INFO_EXAMPLES: &str = "\
Examples:
  kavach wsp info --pool /dev/shm/sort.wsp
  kavach wsp info --pool /dev/shm/sort.wsp --json

Exit status: 0 the image is valid (saved, resumable) or its run ended; 1 the image is damaged
or not resumable (the marker is not valid: a missed window, or a run killed without a save);
2 no such file or it could not be read.";

/// The `wsp` subcommands.
#[derive(Debug, Subcommand)]
pub enum WspCommand {
    /// Run a static program with its writable memory in a pool file; at a power-failure
    /// warning (SIGPWR to this command) save every thread's registers and set the valid marker
    /// within the window.
    #[command(after_help = RUN_EXAMPLES)]
    Run(RunArgs),
    /// Continue a saved program from its image, mid-instruction-stream.
    #[command(after_help = RESUME_EXAMPLES)]
    Resume(ResumeArgs),
    /// Describe a process image: program, state, save counter, threads, segments, files.
    #[command(after_help = INFO_EXAMPLES)]
    Info(InfoArgs),
}

/// How the save persists the program's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SaveArg {
    /// The program's writable memory lives in the image all along (WSP); the save writes only
    /// the registers and the marker.
    Image,
    /// The baseline: memory stays anonymous; at the warning copy all of it into the image and
    /// fsync.
    Hibernate,
}

/// What the save writes back with clwb before the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WriteBackArg {
    /// Nothing (the persistence domain includes the caches, as with eADR).
    None,
    /// Every line of the image's segments.
    All,
    /// Only the pages written since the last save.
    Tracked,
}

/// What the runner does once a save is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AfterSaveArg {
    /// Keep the program stopped until the power goes (a SIGKILL to the process group).
    Hold,
    /// Kill the program at once and return, printing the save's result (for scripts).
    Kill,
}

/// What the runner does after a save and the injected warning, shared by `run` and `resume`.
#[derive(Debug, Args)]
pub struct RunnerArgs {
    /// After a save: hold the program stopped until the group is killed, or kill it and return.
    #[arg(long, value_enum, default_value_t = AfterSaveArg::Hold)]
    after_save: AfterSaveArg,
    /// Inject a power-failure warning this many milliseconds after the start (for tests and
    /// measurements; the real source is SIGPWR to this command).
    #[arg(long, value_name = "MS")]
    warn_after_ms: Option<u64>,
}

impl RunnerArgs {
    fn after_save(&self) -> wsp::AfterSave {
        match self.after_save {
            AfterSaveArg::Hold => wsp::AfterSave::Hold,
            AfterSaveArg::Kill => wsp::AfterSave::Kill,
        }
    }

    fn warn_after(&self) -> Option<std::time::Duration> {
        self.warn_after_ms.map(std::time::Duration::from_millis)
    }
}

/// The window after a warning: a deadline, or hold-up energy.
#[derive(Debug, Args)]
pub struct WindowArgs {
    /// Residual-energy window after a warning, in milliseconds [default: 33].
    #[arg(long, value_name = "MS", conflicts_with_all = ["hold_up_farads", "volts", "watts", "volts_min"])]
    window_ms: Option<f64>,
    /// Hold-up capacitance in farads; the window is 1/2 C (V^2 - Vmin^2) / P.
    #[arg(long, value_name = "F", requires_all = ["volts", "watts"])]
    hold_up_farads: Option<f64>,
    /// Voltage of the hold-up capacitance when the warning comes.
    #[arg(long, value_name = "V", requires = "hold_up_farads")]
    volts: Option<f64>,
    /// Lowest voltage at which the machine still runs [default: 0].
    #[arg(long, value_name = "V", requires = "hold_up_farads")]
    volts_min: Option<f64>,
    /// Power drawn while saving, in watts.
    #[arg(long, value_name = "W", requires = "hold_up_farads")]
    watts: Option<f64>,
}

impl WindowArgs {
    /// The window these arguments give, `None` if none was given.
    fn window(&self) -> Result<Option<powerfail::Window>> {
        if let Some(ms) = self.window_ms {
            let w = powerfail::Window::deadline_ms(ms).context("--window-ms")?;
            return Ok(Some(w));
        }
        if let (Some(farads), Some(volts), Some(watts)) =
            (self.hold_up_farads, self.volts, self.watts)
        {
            let h = powerfail::HoldUp {
                capacitance_uf: farads * 1e6,
                volts_start: volts,
                volts_min: self.volts_min.unwrap_or(0.0),
                watts,
            };
            let w = powerfail::Window::holdup(h)
                .context("--hold-up-farads, --volts, --volts-min, --watts")?;
            return Ok(Some(w));
        }
        Ok(None)
    }
}

/// `kavach wsp run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The pool (image) file to create; it must not exist.
    #[arg(long, value_name = "FILE")]
    pool: PathBuf,
    /// Bytes reserved for the image (65536, 64MiB, 1GiB, ...).
    #[arg(long, value_parser = parse_size, default_value = "1GiB")]
    size: u64,
    #[command(flatten)]
    window: WindowArgs,
    /// How the save persists memory.
    #[arg(long, value_enum, default_value_t = SaveArg::Image)]
    save: SaveArg,
    /// What the save writes back before the marker.
    #[arg(long, value_enum, default_value_t = WriteBackArg::None)]
    write_back: WriteBackArg,
    #[command(flatten)]
    runner: RunnerArgs,
    /// Events as JSON lines on stderr, the result as one JSON line (the last line) on stdout.
    #[arg(long)]
    json: bool,
    /// The program (a path, or a name looked up in PATH) and its arguments, after `--`.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM [ARGS]..."
    )]
    command: Vec<OsString>,
}

/// `kavach wsp resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The pool (image) file of a saved run.
    #[arg(long, value_name = "FILE")]
    pool: PathBuf,
    #[command(flatten)]
    window: WindowArgs,
    /// What later saves write back before the marker [default: none].
    #[arg(long, value_enum)]
    write_back: Option<WriteBackArg>,
    /// Resume even though the image names kernel objects it cannot recreate (sockets,
    /// pipes, ...): their descriptors stay closed and the program gets EBADF on them.
    #[arg(long)]
    drop_not_restorable: bool,
    #[command(flatten)]
    runner: RunnerArgs,
    /// Events as JSON lines on stderr, the result as one JSON line (the last line) on stdout.
    #[arg(long)]
    json: bool,
}

/// `kavach wsp info`.
#[derive(Debug, Args)]
pub struct InfoArgs {
    /// The pool (image) file.
    #[arg(long, value_name = "FILE")]
    pool: PathBuf,
    /// Print the description as JSON.
    #[arg(long)]
    json: bool,
}

/// Run one `wsp` subcommand.
pub fn run(cmd: WspCommand) -> Result<Outcome> {
    match cmd {
        WspCommand::Run(a) => cmd_run(&a),
        WspCommand::Resume(a) => cmd_resume(&a),
        WspCommand::Info(a) => cmd_info(&a),
    }
}

fn save_mode(s: SaveArg) -> wsp::SaveMode {
    match s {
        SaveArg::Image => wsp::SaveMode::Image,
        SaveArg::Hibernate => wsp::SaveMode::Hibernate,
    }
}

fn write_back(w: WriteBackArg) -> wsp::WriteBack {
    match w {
        WriteBackArg::None => wsp::WriteBack::None,
        WriteBackArg::All => wsp::WriteBack::All,
        WriteBackArg::Tracked => wsp::WriteBack::Tracked,
    }
}

fn cmd_run(a: &RunArgs) -> Result<Outcome> {
    let window = a
        .window
        .window()?
        .unwrap_or_else(powerfail::Window::intel_forecast);
    let (name, args) = a
        .command
        .split_first()
        .context("no PROGRAM given (kavach wsp run --pool FILE -- PROGRAM ARGS...)")?;
    let program = find_program(name)?;
    check_static(&program)?;
    if a.size == 0 {
        bail!("--size: expected a positive number of bytes, found 0");
    }
    match std::fs::symlink_metadata(&a.pool) {
        Ok(_) => bail!(
            "pool {}: the file exists; `kavach wsp run` creates its image and never overwrites \
             one (resume it with `kavach wsp resume --pool {}`, or remove it)",
            a.pool.display(),
            a.pool.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("pool {}", a.pool.display())),
    }
    let mut cfg = wsp::RunConfig::new(a.pool.clone(), program, args.to_vec());
    cfg.image_size = a.size;
    cfg.window = window;
    cfg.save = save_mode(a.save);
    cfg.write_back = write_back(a.write_back);
    cfg.after_save = a.runner.after_save();
    cfg.warn_after = a.runner.warn_after();
    cfg.sigpwr = true;
    let mut printer = EventPrinter {
        json: a.json,
        held: (cfg.after_save == wsp::AfterSave::Hold).then(|| a.pool.clone()),
    };
    let end = wsp::run(&cfg, &mut |e| printer.event(e))
        .with_context(|| format!("kavach wsp run --pool {}", a.pool.display()))?;
    finish("run", &a.pool, &end, a.json)
}

fn cmd_resume(a: &ResumeArgs) -> Result<Outcome> {
    require_file(&a.pool)?;
    let opts = wsp::ResumeOptions {
        window: a.window.window()?,
        write_back: a.write_back.map(write_back),
        after_save: a.runner.after_save(),
        warn_after: a.runner.warn_after(),
        sigpwr: true,
        drop_not_restorable: a.drop_not_restorable,
    };
    let mut printer = EventPrinter {
        json: a.json,
        held: (opts.after_save == wsp::AfterSave::Hold).then(|| a.pool.clone()),
    };
    let end = match wsp::resume(&a.pool, &opts, &mut |e| printer.event(e)) {
        Ok(end) => end,
        Err(e @ wsp::WspError::NotSaved { .. }) => bail!(
            "kavach wsp resume --pool {}: the image's valid marker is not set, so there is no \
             saved state to continue ({e}); the pool file is left as it was; run the program \
             again from scratch",
            a.pool.display()
        ),
        Err(e @ wsp::WspError::NotRestorable { .. }) => bail!(
            "kavach wsp resume --pool {}: {e}; the pool file is left as it was (with \
             --drop-not-restorable the program continues and finds those descriptors closed)",
            a.pool.display()
        ),
        Err(e) => {
            return Err(anyhow::Error::new(e)
                .context(format!("kavach wsp resume --pool {}", a.pool.display())));
        }
    };
    finish("resume", &a.pool, &end, a.json)
}

fn cmd_info(a: &InfoArgs) -> Result<Outcome> {
    require_file(&a.pool)?;
    let info = match wsp::info(&a.pool) {
        Ok(info) => info,
        Err(e) => return info_error(&a.pool, e, a.json),
    };
    let state = info.state.clone();
    let resumable = info.marker_valid || state == "ended";
    if a.json {
        let mut v = serde_json::to_value(&info)?;
        if let Value::Object(m) = &mut v {
            m.insert("pool".into(), json!(a.pool));
            m.insert("damaged".into(), json!(false));
            m.insert("resumable".into(), json!(info.marker_valid));
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_info(&a.pool, &info)?;
    }
    if !resumable {
        eprintln!(
            "kavach: pool {}: the image's valid marker is not set (state {state}): it cannot be \
             resumed; run the program again from scratch",
            a.pool.display()
        );
        return Ok(Outcome::Damage);
    }
    Ok(Outcome::Ok)
}

fn print_info(pool: &Path, info: &wsp::ImageInfo) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let seg_bytes: u64 = info.segments.iter().map(|s| s.len).sum();
    writeln!(
        out,
        "pool:       {} ({})",
        pool.display(),
        format_size(info.file_bytes)
    )?;
    writeln!(
        out,
        "program:    {} ({} bytes, crc32c {:08x})",
        info.program, info.program_id.size, info.program_id.crc32c
    )?;
    writeln!(out, "args:       {:?}", info.args)?;
    writeln!(
        out,
        "state:      {} (marker {})",
        info.state,
        if info.marker_valid {
            "valid"
        } else {
            "not valid"
        }
    )?;
    if let Some(s) = info.exit_status {
        writeln!(out, "exit:       {s}")?;
    }
    writeln!(out, "mode:       {}", info.mode)?;
    writeln!(out, "saves:      {}", info.counter)?;
    writeln!(out, "threads:    {} {:?}", info.threads, info.tids)?;
    writeln!(out, "kernel:     {}", info.kernel)?;
    writeln!(
        out,
        "segments:   {} ({})",
        info.segments.len(),
        format_size(seg_bytes)
    )?;
    for s in &info.segments {
        writeln!(
            out,
            "  {:#014x} {:>10} {} {:?} {}",
            s.addr,
            format_size(s.len),
            s.prot,
            s.kind,
            s.name
        )?;
    }
    writeln!(out, "files:      {}", info.files.len())?;
    for f in &info.files {
        writeln!(
            out,
            "  fd {:<3} {} {} at offset {}",
            f.fd, f.kind, f.path, f.offset
        )?;
    }
    if !info.not_restorable.is_empty() {
        writeln!(out, "not restorable:")?;
        for o in &info.not_restorable {
            writeln!(out, "  {o}")?;
        }
    }
    Ok(())
}

/// `info` on an image the runtime refused: damage is exit 1 (after saying what and where),
/// anything else exit 2.
fn info_error(pool: &Path, e: wsp::WspError, json: bool) -> Result<Outcome> {
    if matches!(e, wsp::WspError::Damaged { .. }) {
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &json!({"pool": pool, "damaged": true, "error": e.to_string()})
                )?
            );
        }
        eprintln!("kavach: pool {}: {e}", pool.display());
        return Ok(Outcome::Damage);
    }
    if let wsp::WspError::NotSaved { state, .. } = &e {
        // A save cut short while it wrote the tables: nothing to describe, nothing to resume.
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({
                    "pool": pool, "damaged": false, "resumable": false,
                    "marker_valid": false, "state": state,
                }))?
            );
        }
        eprintln!(
            "kavach: pool {}: the image's valid marker is not set (state {state}; its tables were \
             being written when the power went): it cannot be resumed; run the program again \
             from scratch",
            pool.display()
        );
        return Ok(Outcome::Damage);
    }
    Err(anyhow::Error::new(e).context(format!("kavach wsp info --pool {}", pool.display())))
}

/// The pool file must exist and be a regular file (exit 2 otherwise, naming it).
fn require_file(pool: &Path) -> Result<()> {
    match std::fs::metadata(pool) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => bail!("pool {}: not a regular file", pool.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("pool {}: no such file", pool.display())
        }
        Err(e) => Err(e).with_context(|| format!("pool {}", pool.display())),
    }
}

/// Print the result and leave with the exit status the end of the run calls for.
fn finish(command: &str, pool: &Path, end: &wsp::RunEnd, json: bool) -> Result<Outcome> {
    let (kind, code) = match end {
        wsp::RunEnd::Exited(status) => ("exited", (*status).clamp(0, 255)),
        wsp::RunEnd::Killed(sig) => ("killed", (128 + *sig).clamp(0, 255)),
        wsp::RunEnd::Saved(_) => ("saved", 0),
        wsp::RunEnd::Missed(_) => ("missed", 1),
    };
    if json {
        let mut v = json!({"command": command, "pool": pool, "end": kind, "exit": code});
        match end {
            wsp::RunEnd::Exited(s) => v["status"] = json!(s),
            wsp::RunEnd::Killed(s) => v["signal"] = json!(s),
            wsp::RunEnd::Saved(r) | wsp::RunEnd::Missed(r) => {
                v["report"] = serde_json::to_value(r)?;
            }
        }
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", serde_json::to_string(&v)?)?;
        out.flush()?;
    } else {
        match end {
            // The runtime's `exited` event has said it.
            wsp::RunEnd::Exited(_) => {}
            wsp::RunEnd::Killed(s) => {
                eprintln!("kavach wsp: the program was killed by signal {s}")
            }
            wsp::RunEnd::Saved(_) => eprintln!(
                "kavach wsp: saved; continue with `kavach wsp resume --pool {}`",
                pool.display()
            ),
            wsp::RunEnd::Missed(_) => eprintln!(
                "kavach wsp: the save missed its window: the image's marker is not valid and \
                 the pool cannot be resumed; run the program again from scratch"
            ),
        }
    }
    match code {
        0 => Ok(Outcome::Ok),
        1 => Ok(Outcome::Damage),
        c => {
            // The program's own status: no Outcome carries it, so leave here (stdout and
            // stderr are flushed; nothing else is held open).
            let _ = std::io::stdout().flush();
            let _ = std::io::stderr().flush();
            std::process::exit(c)
        }
    }
}

/// Prints the runtime's events on stderr, as text or JSON lines.
struct EventPrinter {
    json: bool,
    /// The pool, when a completed save holds the program stopped (`--after-save hold`).
    held: Option<PathBuf>,
}

impl EventPrinter {
    fn event(&mut self, e: &wsp::Event) {
        let line = if self.json {
            event_json(e).to_string()
        } else {
            event_text(e)
        };
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{line}");
        if let (false, Some(pool), wsp::Event::Saved(_)) = (self.json, &self.held, e) {
            let _ = writeln!(
                err,
                "kavach wsp: the program is held stopped until the power goes (SIGKILL to this \
                 command's process group, or Ctrl-C); then `kavach wsp resume --pool {}`",
                pool.display()
            );
        }
    }
}

fn report_json(kind: &str, r: &wsp::SaveReport) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("event".into(), json!(kind));
        v
    } else {
        json!({"event": kind})
    }
}

fn event_json(e: &wsp::Event) -> Value {
    match e {
        wsp::Event::Started { pid } => json!({"event": "started", "pid": pid}),
        wsp::Event::Warning { source } => {
            json!({"event": "warning", "source": source.to_string()})
        }
        wsp::Event::Saved(r) => report_json("saved", r),
        wsp::Event::Missed(r) => report_json("missed", r),
        wsp::Event::Resumed {
            counter,
            threads,
            ns,
        } => json!({"event": "resumed", "counter": counter, "threads": threads, "ns": ns}),
        wsp::Event::Exited(s) => json!({"event": "exited", "status": s}),
    }
}

fn us(ns: u64) -> String {
    format!("{:.1} us", ns as f64 / 1000.0)
}

fn report_text(r: &wsp::SaveReport) -> String {
    let mut s = format!(
        "save {}: {} thread(s), stopped {}, contexts {}, marker {} (window {}, {}), image {}, \
         written back {}",
        r.counter,
        r.threads,
        us(r.stop_ns),
        us(r.context_ns),
        us(r.marker_ns),
        us(r.window_ns),
        if r.in_window { "inside" } else { "MISSED" },
        format_size(r.image_bytes),
        format_size(r.written_back_bytes),
    );
    if !r.not_restorable.is_empty() {
        s.push_str(&format!(
            "; not restorable: {}",
            r.not_restorable.join(", ")
        ));
    }
    s
}

fn event_text(e: &wsp::Event) -> String {
    match e {
        wsp::Event::Started { pid } => format!("kavach wsp: started, pid {pid}"),
        wsp::Event::Warning { source } => format!("kavach wsp: power-failure warning ({source})"),
        wsp::Event::Saved(r) => format!("kavach wsp: {}", report_text(r)),
        wsp::Event::Missed(r) => format!("kavach wsp: MISSED the window: {}", report_text(r)),
        wsp::Event::Resumed {
            counter,
            threads,
            ns,
        } => format!(
            "kavach wsp: resumed save {counter}, {threads} thread(s), in {}",
            us(*ns)
        ),
        wsp::Event::Exited(s) => format!("kavach wsp: the program exited with status {s}"),
    }
}

/// The program to run: a path (with a `/`) as given, or a name looked up in PATH as env(1)
/// does. It must be a regular, executable file.
fn find_program(name: &OsStr) -> Result<PathBuf> {
    let as_path = Path::new(name);
    if name.is_empty() {
        bail!("PROGRAM: expected a path or a name, found an empty string");
    }
    if name.as_encoded_bytes().starts_with(b"-") && !as_path.exists() {
        bail!(
            "unknown option `{}` (options go before `--`, the program and its arguments after it; \
             see `kavach wsp run --help`)",
            as_path.display()
        );
    }
    let candidate = if name.as_encoded_bytes().contains(&b'/') {
        as_path.to_path_buf()
    } else {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|dir| dir.join(as_path))
            .find(|p| p.is_file())
            .with_context(|| {
                format!(
                    "program `{}`: not found in PATH (give a path, e.g. ./{})",
                    as_path.display(),
                    as_path.display()
                )
            })?
    };
    let meta = match std::fs::metadata(&candidate) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("program {}: no such file", candidate.display())
        }
        Err(e) => return Err(e).with_context(|| format!("program {}", candidate.display())),
    };
    if !meta.is_file() {
        bail!("program {}: not a regular file", candidate.display());
    }
    if meta.permissions().mode() & 0o111 == 0 {
        bail!("program {}: not executable (no x bit)", candidate.display());
    }
    Ok(candidate)
}

/// What an ELF header says about a program's linking.
#[derive(Debug, PartialEq, Eq)]
enum ElfKind {
    /// ET_EXEC without an interpreter: what WSP can run.
    StaticExec,
    /// Has a PT_INTERP: dynamically linked.
    Dynamic(String),
    /// ET_DYN without an interpreter: static-pie or a shared object.
    PositionIndependent,
}

/// Read enough of `path` to tell a static non-PIE x86-64 executable from anything else.
fn classify_elf(path: &Path) -> Result<ElfKind> {
    let what = || format!("program {}", path.display());
    let mut f = File::open(path).with_context(what)?;
    let mut h = [0u8; 64];
    let n = read_up_to(&mut f, &mut h).with_context(what)?;
    if n < 4 || &h[..4] != b"\x7fELF" {
        bail!(
            "program {}: not an ELF executable (a script or another format; WSP runs static, \
             non-PIE x86-64 ELF programs)",
            path.display()
        );
    }
    if n < 64 || h[4] != 2 || h[5] != 1 {
        bail!(
            "program {}: not a 64-bit little-endian ELF (class {}, data {})",
            path.display(),
            h[4],
            h[5]
        );
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u64_at = |b: &[u8], o: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[o..o + 8]);
        u64::from_le_bytes(a)
    };
    let e_type = u16_at(&h, 16);
    let machine = u16_at(&h, 18);
    if machine != 62 {
        bail!(
            "program {}: ELF machine {machine}, expected 62 (x86-64)",
            path.display()
        );
    }
    let phoff = u64_at(&h, 32);
    let phentsize = u64::from(u16_at(&h, 54));
    let phnum = u64::from(u16_at(&h, 56));
    if phentsize < 56 || phnum > 4096 {
        bail!(
            "program {}: damaged ELF header (program header entry size {phentsize}, count \
             {phnum})",
            path.display()
        );
    }
    let mut data = Vec::new();
    f.read_to_end(&mut data).with_context(what)?;
    // `data` starts at file offset 64.
    let at = |off: u64, len: u64| -> Option<&[u8]> {
        let start = usize::try_from(off.checked_sub(64)?).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        data.get(start..end)
    };
    let mut interp = None;
    for i in 0..phnum {
        let off = phoff.saturating_add(i.saturating_mul(phentsize));
        let ph = at(off, 56).with_context(|| {
            format!(
                "program {}: program header {i} at offset {off:#x} lies outside the file",
                path.display()
            )
        })?;
        let p_type = u32::from_le_bytes([ph[0], ph[1], ph[2], ph[3]]);
        if p_type == 3 {
            let p_offset = u64_at(ph, 8);
            let p_filesz = u64_at(ph, 32);
            let name = at(p_offset, p_filesz.min(4096))
                .map(|b| {
                    String::from_utf8_lossy(b)
                        .trim_end_matches('\0')
                        .to_string()
                })
                .unwrap_or_else(|| "?".into());
            interp = Some(name);
        }
    }
    Ok(match (interp, e_type) {
        (Some(i), _) => ElfKind::Dynamic(i),
        (None, 2) => ElfKind::StaticExec,
        (None, 3) => ElfKind::PositionIndependent,
        (None, t) => bail!(
            "program {}: ELF type {t}, expected 2 (an executable)",
            path.display()
        ),
    })
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Refuse, naming why, anything but a static non-PIE executable.
fn check_static(path: &Path) -> Result<()> {
    match classify_elf(path)? {
        ElfKind::StaticExec => Ok(()),
        ElfKind::Dynamic(interp) => bail!(
            "program {}: dynamically linked (interpreter {interp}); WSP runs only static, \
             non-PIE programs: build it with `gcc -static -no-pie`",
            path.display()
        ),
        ElfKind::PositionIndependent => bail!(
            "program {}: position-independent (ELF type DYN: a static-pie or a shared object); \
             WSP needs fixed addresses: build it with `gcc -static -no-pie`",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_test_binary_is_not_a_static_exec() {
        // Cargo builds test binaries as PIE and dynamically linked on this platform.
        let me = std::env::current_exe().unwrap();
        let kind = classify_elf(&me).unwrap();
        assert_ne!(kind, ElfKind::StaticExec, "{kind:?}");
    }

    #[test]
    fn a_script_is_not_an_elf() {
        let dir = std::env::temp_dir().join(format!("kavach-wsp-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("script.sh");
        std::fs::write(&p, "#!/bin/sh\necho hi\n").unwrap();
        let e = classify_elf(&p).unwrap_err().to_string();
        assert!(e.contains("not an ELF"), "{e}");
        let short = dir.join("short");
        std::fs::write(&short, b"\x7fELF\x02\x01").unwrap();
        let e = classify_elf(&short).unwrap_err().to_string();
        assert!(e.contains("64-bit"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
