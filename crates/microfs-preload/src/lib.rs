//! `libkavach_cr.so`: the checkpoint/restart runtime loaded with `LD_PRELOAD` into unmodified
//! programs. POSIX and stdio calls whose path, descriptor, `DIR*` or `FILE*` lies under
//! `KAVACH_CR_DIR` are served from one `microfs::Fs` per process (opened from
//! `microfs::instance::Config::from_env()` at the first such call, or by the MPI wrapper's
//! `MPI_Init`); every other call goes to libc (`dlsym(RTLD_NEXT)`). See docs/cr.md.

#![deny(unsafe_code)]

mod core;
// The exported C functions: raw pointers from C, calls through function pointers found with
// dlsym, errno; the only way to interpose libc.
#[allow(unsafe_code)]
mod ffi;
mod mpi;
// fopencookie streams over our descriptors: callbacks receive raw buffers from glibc.
#[allow(unsafe_code)]
mod stdio;
// dlsym, errno, the placeholder descriptors, the real getcwd and umask.
#[allow(unsafe_code)]
mod sys;

/// Replaces the lazily opened instance by one opened from `cfg` (the MPI wrapper's MPI_Init).
#[allow(dead_code)] // used by the MPI wrappers
pub(crate) fn instance_start(cfg: microfs::instance::Config) -> Result<(), String> {
    core::instance_start(cfg)
}

/// Checkpoints and closes the instance (MPI_Finalize).
#[allow(dead_code)] // used by the MPI wrappers
pub(crate) fn instance_finish() -> Result<(), String> {
    core::instance_finish()
}

#[allow(unused_imports)] // used by the MPI wrappers
pub(crate) use sys::{next_symbol, real};
