//! A seeded cooperative scheduler over a [`SimMedium`](crate::SimMedium)'s operations, so a
//! concurrent crash test replays from its seed.
//!
//! Every operation a thread issues on a simulated medium built with
//! [`SimMedium::with_hook`](crate::SimMedium::with_hook) first calls [`OpHook::before`]: that is
//! a *yield point*. A [`Scheduler`] runs a set of registered threads ([`Scheduler::run`],
//! [`Spawner::spawn`]) so that only one of them at a time proceeds past a yield point. Whenever
//! every registered thread is settled (waiting at a yield point, finished, or blocked), the
//! scheduler draws the next thread to run from its seeded generator among the ones waiting at a
//! yield point, records the choice ([`Schedule`]), and lets that one go on to its next yield
//! point. Every medium operation is thus issued by one chosen thread at a time, in the order
//! the seed dictates.
//!
//! Threads also block on the code's own mutexes and condition variables (the log's forcer and
//! appenders do), which the scheduler cannot see. It asks the kernel instead: a registered
//! thread that is neither at a yield point nor finished counts as *blocked* when
//! `/proc/self/task/<tid>/stat` says it sleeps (`S` or `D`) twice in a row without having run in
//! between (the run count in `schedstat`). A thread that busy-waits (the log's sequencer spins
//! with `yield_now` for an earlier record to complete) stays runnable; it counts as *spinning*,
//! and so blocked, once it has burnt [`Scheduler::with_spin_cpu`] of CPU time (default 1 ms)
//! while no other registered thread changed state. CPU time, not wall time, so a thread merely
//! preempted by another process on a loaded machine is not taken for a spinner.
//!
//! *Serialization.* A blocked thread that the chosen one wakes (by unlocking a mutex, notifying
//! a condition variable, or completing what a spinner waits for) runs until its own next yield
//! point, and on two CPUs it would run *alongside* the chosen one: if both then reach for the
//! same lock before their next yield points (the log's forcer releases the force lock and takes
//! it again for its next force while an appender it woke reaches for it), the kernel decides
//! who wins, and the run stops being a function of the seed. So the registered threads, and the
//! controller that makes the choices, are started from a launcher thread made `SCHED_FIFO`
//! (priority 1) and pinned to one CPU, which they inherit: a woken thread then waits until the
//! thread running on that CPU blocks or yields, as on a uniprocessor with no preemption among
//! them. That takes `CAP_SYS_NICE` (root), and is done with the `taskset` and `chrt` commands;
//! where either fails the run is not serialized ([`RunReport::serialized`]) and only likely to
//! replay. `KAVACH_SCHED_SERIALIZE=0` turns it off.
//!
//! What is and is not reproducible:
//! - Serialized, the same seed gives the same schedule, and so the same sequence of medium
//!   operations and the same crash image, when the code under test waits only on locks,
//!   condition variables notified by other registered threads, and spins for them.
//! - A wait that ends by *timeout* (a `wait_timeout`, a `sleep`) ends when the clock says, not
//!   when the schedule says: the thread then runs at a moment no seed chose, and the run may
//!   differ from the seed's other runs. Keep such waits out of scheduled tests (e.g. give the
//!   log a ring that never fills).
//! - Serialized, a spin loop must yield (`yield_now`, `sched_yield`), as every one in this
//!   workspace does after a few rounds: a busy-wait that never yields keeps the CPU the
//!   registered threads share, and the thread it waits for never runs, as on a uniprocessor.
//! - A thread the code under test spawns itself is not registered: it passes through every
//!   yield point freely, concurrently with the scheduled ones (it does inherit the priority and
//!   the CPU).
//! - A sleep the kernel reports for a reason that is not a wait on another registered thread (a
//!   page fault, an allocator lock held by an unregistered thread) may, if it outlasts two polls,
//!   let the next thread start early. Linux only (`/proc`); elsewhere every thread is treated as
//!   running, so a blocked thread stalls the run until the stall timeout, which then lets every
//!   thread run freely ([`RunReport::stalled`]).
//!
//! [`seeds`] picks the seeds of a test (`KAVACH_SCHED_SEED` replays one, `KAVACH_SCHED_SEEDS`
//! sets how many); [`explore`] runs a case per seed and reports the first failing seed with its
//! schedule. `KAVACH_SCHED_TRACE` prints every decision with the threads' states.

use crate::rng::SplitMix64;
use crate::sim::{Op, OpHook};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The scheduler (by id) and slot of the calling thread, if it is a registered one.
    static ME: Cell<Option<(u64, usize)>> = const { Cell::new(None) };
}

/// How often the controller looks at threads it cannot hear from (blocked or spinning ones).
const POLL: Duration = Duration::from_micros(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Spawned, not yet at its first yield point.
    Starting,
    /// At a yield point, waiting to be chosen.
    Waiting,
    /// Chosen (or woken): between yield points, or blocked inside the code under test.
    Running,
    /// Returned (or panicked).
    Done,
}

#[derive(Debug)]
struct Slot {
    name: String,
    status: Status,
    tid: Option<u32>,
    /// The operation it waits before (`None`: its start).
    op: Option<Op>,
}

#[derive(Debug, Default)]
struct Inner {
    slots: Vec<Slot>,
    schedule: Vec<Step>,
    panics: Vec<(String, String)>,
    /// Bumped whenever a thread reaches a yield point or finishes.
    changes: u64,
    /// Yield points no longer hold anyone (stalled, or the controller is gone).
    free: bool,
    stalled: bool,
    serialized: bool,
    started: bool,
}

/// One scheduling decision: which thread went on, and before what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Index of the thread (in spawn order).
    pub thread: usize,
    /// The operation it was about to issue (`None`: its start).
    pub op: Option<Op>,
}

/// The decisions of one run, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Schedule {
    /// Thread names, by index.
    pub names: Vec<String>,
    /// The decisions.
    pub steps: Vec<Step>,
}

impl Schedule {
    /// The chosen thread indices.
    pub fn threads(&self) -> Vec<usize> {
        self.steps.iter().map(|s| s.thread).collect()
    }
}

fn op_letter(op: Option<Op>) -> char {
    #[allow(unreachable_patterns)]
    match op {
        None => 's',
        Some(Op::Load) => 'L',
        Some(Op::Store) => 'S',
        Some(Op::Flush) => 'F',
        Some(Op::Fence) => 'B',
        Some(_) => '?',
    }
}

impl std::fmt::Display for Schedule {
    /// `0=name 1=name: 0s 1s 0L 1S ...`: thread index and the operation it went on to (s start,
    /// L load, S store, F flush, B fence/barrier).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, n) in self.names.iter().enumerate() {
            write!(f, "{i}={n} ")?;
        }
        write!(f, "({} steps):", self.steps.len())?;
        for s in &self.steps {
            write!(f, " {}{}", s.thread, op_letter(s.op))?;
        }
        Ok(())
    }
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The scheduler's seed.
    pub seed: u64,
    /// Its decisions.
    pub schedule: Schedule,
    /// Threads that panicked: name and message.
    pub panics: Vec<(String, String)>,
    /// No registered thread could go on for the stall timeout (a deadlock, or waits the
    /// scheduler could not classify): the yield points were opened and the rest of the run was
    /// not scheduled.
    pub stalled: bool,
    /// The registered threads ran real-time (`SCHED_FIFO`) on one CPU, so a thread woken by
    /// the chosen one waits until the chosen one blocks (see the module documentation).
    pub serialized: bool,
}

impl RunReport {
    /// `Err` with the panics (or the stall), for a test's verdict.
    pub fn verdict(&self) -> Result<(), String> {
        if let Some((name, msg)) = self.panics.first() {
            return Err(format!("thread {name} panicked: {msg}"));
        }
        if self.stalled {
            return Err("the run stalled: every registered thread blocked or spinning".into());
        }
        Ok(())
    }
}

/// A seeded cooperative scheduler; see the module documentation. One run per scheduler.
#[derive(Debug)]
pub struct Scheduler {
    id: u64,
    seed: u64,
    spin_cpu: Duration,
    stall: Duration,
    serialize: bool,
    inner: Mutex<Inner>,
    /// Wakes threads waiting at yield points.
    to_threads: Condvar,
    /// Wakes the controller.
    to_control: Condvar,
}

/// What the kernel says about a thread.
#[derive(Debug, Clone, Copy)]
struct Task {
    sleeping: bool,
    cpu_ns: u64,
    runs: u64,
}

fn read_task(tid: u32) -> Option<Task> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // The state follows the command name, which is in parentheses and may hold anything.
    let state = stat[stat.rfind(')')? + 1..].trim_start().chars().next()?;
    let sched = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let mut f = sched.split_whitespace().map(|v| v.parse::<u64>().ok());
    let cpu_ns = f.next()??;
    let _wait = f.next();
    let runs = f.next()??;
    Some(Task {
        sleeping: matches!(state, 'S' | 'D'),
        cpu_ns,
        runs,
    })
}

fn own_tid() -> Option<u32> {
    // `/proc/thread-self` links to `<pid>/task/<tid>`.
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// The last CPU this thread may run on, from `/proc/thread-self/status`.
fn last_allowed_cpu() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
        .trim();
    let last = list.rsplit([',', '-']).next()?;
    last.parse().ok()
}

/// Make the calling thread `SCHED_FIFO` (priority 1) and pin it to one CPU, with the
/// util-linux `taskset` and `chrt` commands (this crate keeps unsafe code out of its test
/// machinery, and the standard library has no call for either). Threads it then starts inherit
/// both. Needs `CAP_SYS_NICE` (root); returns whether both took effect.
fn serialize_this_thread() -> bool {
    let (Some(tid), Some(cpu)) = (own_tid(), last_allowed_cpu()) else {
        return false;
    };
    let tid = tid.to_string();
    let ok = |cmd: &str, args: &[&str]| {
        std::process::Command::new(cmd)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    ok("taskset", &["-p", "-c", &cpu.to_string(), &tid]) && ok("chrt", &["-f", "-p", "1", &tid])
}

/// What the controller knows of a running thread between polls.
#[derive(Debug, Clone, Copy, Default)]
struct Probe {
    /// CPU time when the rest of the system last changed (for spin detection).
    base_cpu: u64,
    /// Run count when it was last seen asleep.
    asleep_at: Option<u64>,
}

type Job<'scope> = Box<dyn FnOnce() + Send + 'scope>;

/// Spawns the registered threads of a run ([`Scheduler::run`]).
#[derive(Debug)]
pub struct Spawner<'scope, 'env: 'scope> {
    launcher: std::sync::mpsc::Sender<Job<'scope>>,
    sched: &'env Scheduler,
    _scope: std::marker::PhantomData<&'scope std::thread::Scope<'scope, 'env>>,
}

impl<'scope, 'env> Spawner<'scope, 'env> {
    /// Start a registered thread running `f`; threads are numbered in the order of these calls.
    /// It waits at its start (a yield point) until the scheduler first chooses it.
    pub fn spawn<F: FnOnce() + Send + 'scope>(&self, name: &str, f: F) {
        let sched = self.sched;
        let index = {
            let mut g = sched.lock();
            g.slots.push(Slot {
                name: name.to_string(),
                status: Status::Starting,
                tid: None,
                op: None,
            });
            g.slots.len() - 1
        };
        let job: Job<'scope> = Box::new(move || {
            ME.with(|m| m.set(Some((sched.id, index))));
            sched.lock().slots[index].tid = own_tid();
            sched.gate(index, None);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            ME.with(|m| m.set(None));
            let mut g = sched.lock();
            if let Err(p) = r {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "(not a string)".into());
                let name = g.slots[index].name.clone();
                g.panics.push((name, msg));
            }
            g.slots[index].status = Status::Done;
            g.changes += 1;
            sched.to_control.notify_all();
        });
        // The launcher outlives every send: it reads until the spawner is dropped.
        let _ = self.launcher.send(job);
    }
}

/// Opens every yield point if the controller unwinds, so no thread waits forever.
struct Release<'a>(&'a Scheduler);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        let mut g = self.0.lock();
        g.free = true;
        self.0.to_threads.notify_all();
    }
}

impl Scheduler {
    /// A scheduler whose choices follow `seed`.
    pub fn new(seed: u64) -> Arc<Scheduler> {
        Arc::new(Scheduler {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            seed,
            spin_cpu: Duration::from_millis(1),
            stall: Duration::from_secs(5),
            serialize: std::env::var("KAVACH_SCHED_SERIALIZE").map_or(true, |v| v != "0"),
            inner: Mutex::new(Inner::default()),
            to_threads: Condvar::new(),
            to_control: Condvar::new(),
        })
    }

    /// A thread that stays runnable without reaching a yield point counts as spinning (blocked)
    /// once it has used this much CPU time while nothing else changed.
    pub fn with_spin_cpu(seed: u64, spin_cpu: Duration) -> Arc<Scheduler> {
        let mut s = Self::new(seed);
        Arc::get_mut(&mut s).expect("just made").spin_cpu = spin_cpu;
        s
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether its run was serialized ([`RunReport::serialized`]).
    pub fn serialized(&self) -> bool {
        self.lock().serialized
    }

    /// The decisions so far.
    pub fn schedule(&self) -> Schedule {
        let g = self.lock();
        Schedule {
            names: g.slots.iter().map(|s| s.name.clone()).collect(),
            steps: g.schedule.clone(),
        }
    }

    /// Run the threads `body` spawns under the schedule, until all have finished. Code in
    /// `body` itself runs before any of them starts. One run per scheduler.
    pub fn run<'env, F>(&'env self, body: F) -> RunReport
    where
        F: for<'scope> FnOnce(&Spawner<'scope, 'env>),
    {
        {
            let mut g = self.lock();
            assert!(!g.started, "a scheduler runs once; make a new one per run");
            g.started = true;
        }
        let serialized = std::thread::scope(|scope| {
            let release = Release(self);
            // Registered threads are started by a launcher thread made real-time and pinned
            // to one CPU first: they inherit both (see `serialize_this_thread`).
            let (tx, rx) = std::sync::mpsc::channel::<Job<'_>>();
            // The launcher then is the controller: on the same CPU at the same priority, it
            // runs only when every registered thread there has blocked or yielded.
            let launcher = scope.spawn(move || {
                let release = Release(self);
                let serialized = self.serialize && serialize_this_thread();
                self.lock().serialized = serialized;
                for job in rx {
                    scope.spawn(job);
                }
                self.control();
                drop(release);
                serialized
            });
            body(&Spawner {
                launcher: tx,
                sched: self,
                _scope: std::marker::PhantomData,
            });
            let serialized = match launcher.join() {
                Ok(s) => s,
                Err(p) => std::panic::resume_unwind(p),
            };
            drop(release);
            serialized
        });
        let g = self.lock();
        RunReport {
            serialized,
            seed: self.seed,
            schedule: Schedule {
                names: g.slots.iter().map(|s| s.name.clone()).collect(),
                steps: g.schedule.clone(),
            },
            panics: g.panics.clone(),
            stalled: g.stalled,
        }
    }

    /// A registered thread at a yield point: wait until chosen.
    fn gate(&self, index: usize, op: Option<Op>) {
        let mut g = self.lock();
        if g.free {
            return;
        }
        g.slots[index].status = Status::Waiting;
        g.slots[index].op = op;
        g.changes += 1;
        self.to_control.notify_all();
        while g.slots[index].status == Status::Waiting && !g.free {
            g = self.to_threads.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        g.slots[index].status = Status::Running;
    }

    /// The controller: choose a waiting thread whenever every registered thread is settled.
    fn control(&self) {
        let mut rng = SplitMix64::new(self.seed);
        let trace = std::env::var_os("KAVACH_SCHED_TRACE").is_some();
        let mut g = self.lock();
        let mut probes: Vec<Probe> = vec![Probe::default(); g.slots.len()];
        let mut seen_changes = u64::MAX;
        let mut quiet_since = Instant::now();
        loop {
            if g.slots.iter().all(|s| s.status == Status::Done) {
                return;
            }
            if g.free {
                g = self.wait_control(g);
                continue;
            }
            let mut busy = false;
            let mut changed = g.changes != seen_changes;
            // Runnable threads with their CPU time: busy unless spinning.
            let mut runnable: Vec<(usize, u64)> = Vec::new();
            for (i, slot) in g.slots.iter().enumerate() {
                match slot.status {
                    Status::Starting => busy = true,
                    Status::Waiting | Status::Done => {}
                    Status::Running => {
                        let Some(task) = slot.tid.and_then(read_task) else {
                            // Unknown to the kernel (or no /proc): assume it is running.
                            busy = true;
                            continue;
                        };
                        let p = &mut probes[i];
                        if task.sleeping {
                            if p.asleep_at != Some(task.runs) {
                                // Asleep, but ran since last seen so: confirm at the next poll.
                                p.asleep_at = Some(task.runs);
                                busy = true;
                            }
                        } else {
                            if p.asleep_at.take().is_some() {
                                changed = true;
                            }
                            runnable.push((i, task.cpu_ns));
                        }
                    }
                }
            }
            if changed {
                seen_changes = g.changes;
                quiet_since = Instant::now();
                for &(i, cpu) in &runnable {
                    probes[i].base_cpu = cpu;
                }
            }
            let spin_ns = self.spin_cpu.as_nanos() as u64;
            if runnable
                .iter()
                .any(|&(i, cpu)| cpu.saturating_sub(probes[i].base_cpu) < spin_ns)
            {
                busy = true;
            }
            let waiting: Vec<usize> = (0..g.slots.len())
                .filter(|&i| g.slots[i].status == Status::Waiting)
                .collect();
            if busy || waiting.is_empty() {
                // Nothing to choose yet. If nothing has changed for the stall time (a deadlock,
                // or threads it cannot classify, as without /proc), stop scheduling.
                if quiet_since.elapsed() >= self.stall {
                    g.free = true;
                    g.stalled = true;
                    self.to_threads.notify_all();
                }
                g = self.wait_control(g);
                continue;
            }
            let pick = waiting[rng.below(waiting.len() as u64) as usize];
            if trace {
                // W waiting, b blocked, p spinning, d done.
                let states: String = (0..g.slots.len())
                    .map(|i| match g.slots[i].status {
                        Status::Waiting => 'W',
                        Status::Done => 'd',
                        Status::Starting => '?',
                        Status::Running if runnable.iter().any(|&(j, _)| j == i) => 'p',
                        Status::Running => 'b',
                    })
                    .collect();
                eprintln!(
                    "sched seed {} step {}: {states} -> {pick}",
                    self.seed,
                    g.schedule.len()
                );
            }
            let step = Step {
                thread: pick,
                op: g.slots[pick].op,
            };
            g.schedule.push(step);
            g.slots[pick].status = Status::Running;
            probes[pick] = Probe::default();
            // A choice is a change: every runnable thread's spin budget starts again.
            g.changes += 1;
            self.to_threads.notify_all();
        }
    }

    fn wait_control<'a>(&self, g: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
        self.to_control
            .wait_timeout(g, POLL)
            .unwrap_or_else(|p| p.into_inner())
            .0
    }
}

impl OpHook for Scheduler {
    fn before(&self, op: Op) {
        let Some((id, index)) = ME.with(|m| m.get()) else {
            return;
        };
        if id == self.id {
            self.gate(index, Some(op));
        }
    }
}

/// The seeds a scheduled test runs: `KAVACH_SCHED_SEED=n` replays seed `n` alone;
/// `KAVACH_SCHED_SEEDS=c` runs `c` seeds from `first`; else `count` seeds from `first`.
pub fn seeds(first: u64, count: u64) -> Vec<u64> {
    let env = |name: &str| -> Option<u64> {
        let v = std::env::var(name).ok()?;
        match v.trim().parse() {
            Ok(n) => Some(n),
            Err(_) => {
                eprintln!("{name}={v:?} is not a number; ignored");
                None
            }
        }
    };
    if let Some(seed) = env("KAVACH_SCHED_SEED") {
        return vec![seed];
    }
    let count = env("KAVACH_SCHED_SEEDS").unwrap_or(count);
    (first..first.saturating_add(count)).collect()
}

/// A seed whose run broke the case's check.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The seed: `KAVACH_SCHED_SEED=<seed>` replays it.
    pub seed: u64,
    /// The run's decisions.
    pub schedule: Schedule,
    /// What the check said.
    pub message: String,
    /// The run was serialized ([`RunReport::serialized`]), so the seed replays it.
    pub serialized: bool,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} failed: {}\n  schedule {}\n  replay with KAVACH_SCHED_SEED={}",
            self.seed, self.message, self.schedule, self.seed
        )
    }
}

/// What [`explore`] found.
#[derive(Debug, Clone)]
pub struct Exploration {
    /// Seeds run (the failing one included).
    pub tried: u64,
    /// The first failing seed, if any.
    pub failure: Option<Failure>,
}

/// Run `case` once per seed, each with a fresh [`Scheduler`] of that seed (the case builds its
/// medium with the scheduler as hook and calls [`Scheduler::run`]), and stop at the first seed
/// whose case returns `Err`.
pub fn explore(
    seeds: impl IntoIterator<Item = u64>,
    mut case: impl FnMut(&Arc<Scheduler>) -> Result<(), String>,
) -> Exploration {
    let mut tried = 0;
    for seed in seeds {
        tried += 1;
        let sched = Scheduler::new(seed);
        if let Err(message) = case(&sched) {
            return Exploration {
                tried,
                failure: Some(Failure {
                    seed,
                    schedule: sched.schedule(),
                    message,
                    serialized: sched.serialized(),
                }),
            };
        }
    }
    Exploration {
        tried,
        failure: None,
    }
}
