//! An in-process transport: backups are hosts in the same process, answered synchronously.
//! For tests and examples; a backup can be switched off to play a failed node.

use std::sync::{Arc, Mutex};

use crate::copy::{Host, serve};
use crate::peers::Peers;
use crate::proto::{Request, Response, split_frame};

/// In-process backups.
#[derive(Debug)]
pub struct MemPeers<H: Host> {
    hosts: Vec<Arc<Mutex<H>>>,
    up: Vec<bool>,
    answers: Vec<(usize, Option<Response>)>,
}

impl<H: Host + std::fmt::Debug> MemPeers<H> {
    /// Backups served by `hosts`, all up.
    pub fn new(hosts: Vec<Arc<Mutex<H>>>) -> MemPeers<H> {
        let up = vec![true; hosts.len()];
        MemPeers {
            hosts,
            up,
            answers: Vec::new(),
        }
    }

    /// Take backup `i` down (it answers nothing) or up.
    pub fn set_up(&mut self, i: usize, up: bool) {
        self.up[i] = up;
    }

    /// The host of backup `i`.
    pub fn host(&self, i: usize) -> &Arc<Mutex<H>> {
        &self.hosts[i]
    }
}

impl<H: Host + std::fmt::Debug> Peers for MemPeers<H> {
    fn count(&self) -> usize {
        self.hosts.len()
    }

    fn name(&self, i: usize) -> String {
        format!("mem:{i}")
    }

    fn send(&mut self, i: usize, req: &Request) -> bool {
        if !self.up[i] {
            self.answers.push((i, None));
            return false;
        }
        // Through the wire encoding, so the codec is exercised too.
        let frame = req.encode();
        let answer = split_frame(&frame)
            .ok()
            .and_then(|(tag, body)| Request::decode(tag, body).ok())
            .map(|req| {
                let mut h = self.hosts[i].lock().unwrap_or_else(|p| p.into_inner());
                serve(&mut *h, &req)
            });
        self.answers.push((i, answer));
        true
    }

    fn finish(&mut self) -> Vec<(usize, Option<Response>)> {
        std::mem::take(&mut self.answers)
    }

    fn disconnect(&mut self, _i: usize) {}
}

/// A host whose copy lives on any medium, made by a factory on `init`.
pub struct MediumHost<M: pmem::Medium> {
    copy: Option<crate::Copy<M>>,
    make: Box<dyn FnMut(usize) -> M + Send>,
}

impl<M: pmem::Medium> std::fmt::Debug for MediumHost<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MediumHost")
            .field("copy", &self.copy)
            .finish()
    }
}

impl<M: pmem::Medium> MediumHost<M> {
    /// A host with no copy; `make(len)` gives a zeroed medium of `len` bytes on `init`.
    pub fn new(make: impl FnMut(usize) -> M + Send + 'static) -> Self {
        MediumHost {
            copy: None,
            make: Box::new(make),
        }
    }

    /// A host holding `copy`.
    pub fn with_copy(copy: crate::Copy<M>, make: impl FnMut(usize) -> M + Send + 'static) -> Self {
        MediumHost {
            copy: Some(copy),
            make: Box::new(make),
        }
    }

    /// Take the copy out (to crash or inspect it).
    pub fn take(&mut self) -> Option<crate::Copy<M>> {
        self.copy.take()
    }

    /// Put a copy in.
    pub fn put(&mut self, copy: crate::Copy<M>) {
        self.copy = Some(copy);
    }
}

impl<M: pmem::Medium> Host for MediumHost<M> {
    type M = M;

    fn copy(&mut self) -> Option<&mut crate::Copy<M>> {
        self.copy.as_mut()
    }

    fn init(&mut self, uuid: pmem::Uuid, region_len: u64) -> Result<(), String> {
        let m = (self.make)(region_len as usize);
        let c = crate::Copy::create(m, 0, region_len as usize, uuid).map_err(|e| e.to_string())?;
        self.copy = Some(c);
        Ok(())
    }
}
