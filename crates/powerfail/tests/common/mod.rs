//! A fake save target for the tests: counts its calls in a log shared between targets, sleeps a
//! configurable time in `save`, and can be made to fail, panic or block.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use powerfail::{SaveError, SaveEstimate, SaveReport, SaveTarget};

pub type Log = Arc<Mutex<Vec<String>>>;

pub fn log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

pub fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

pub fn count(log: &Log, what: &str) -> usize {
    log.lock().unwrap().iter().filter(|e| *e == what).count()
}

pub enum Behaviour {
    Ok,
    Fail(String),
    Panic,
}

pub struct Fake {
    pub name: String,
    pub log: Log,
    pub sleep: Duration,
    pub estimate: Mutex<SaveEstimate>,
    pub behaviour: Mutex<Behaviour>,
    /// Whether the writers are stopped now; `save` records whether they were.
    pub stopped: AtomicBool,
    pub deadlines: Mutex<Vec<Instant>>,
    /// If set, `save` says it entered and then waits for a message before returning.
    pub gate: Mutex<Option<(Sender<()>, Receiver<()>)>>,
}

impl Fake {
    pub fn new(name: &str, log: &Log) -> Arc<Fake> {
        Fake::with(name, log, Duration::ZERO, SaveEstimate::default())
    }

    pub fn with(name: &str, log: &Log, sleep: Duration, estimate: SaveEstimate) -> Arc<Fake> {
        Arc::new(Fake {
            name: name.into(),
            log: log.clone(),
            sleep,
            estimate: Mutex::new(estimate),
            behaviour: Mutex::new(Behaviour::Ok),
            stopped: AtomicBool::new(false),
            deadlines: Mutex::new(Vec::new()),
            gate: Mutex::new(None),
        })
    }

    fn note(&self, what: &str) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{what} {}", self.name));
    }
}

impl SaveTarget for Fake {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn estimate(&self) -> SaveEstimate {
        *self.estimate.lock().unwrap()
    }

    fn stop_writers(&self) {
        assert!(
            !self.stopped.swap(true, Ordering::SeqCst),
            "{}: stopped twice",
            self.name
        );
        self.note("stop");
    }

    fn save(&self, deadline: Instant) -> Result<SaveReport, SaveError> {
        if !self.stopped.load(Ordering::SeqCst) {
            self.note("save-while-running");
        }
        self.note("save");
        self.deadlines.lock().unwrap().push(deadline);
        if let Some((entered, release)) = &*self.gate.lock().unwrap() {
            entered.send(()).unwrap();
            release.recv().unwrap();
        }
        std::thread::sleep(self.sleep);
        match &*self.behaviour.lock().unwrap() {
            Behaviour::Ok => {
                let e = self.estimate();
                Ok(SaveReport {
                    bytes_copied: e.bytes_to_copy,
                    lines_written_back: e.lines_to_write_back,
                })
            }
            Behaviour::Fail(why) => Err(SaveError::Failed {
                reason: why.clone(),
            }),
            Behaviour::Panic => panic!("fake {} told to panic", self.name),
        }
    }

    fn resume_writers(&self) {
        assert!(
            self.stopped.swap(false, Ordering::SeqCst),
            "{}: resumed while running",
            self.name
        );
        self.note("resume");
    }
}
