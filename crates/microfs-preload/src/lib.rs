//! `libkavach_cr.so`: the checkpoint/restart runtime loaded with `LD_PRELOAD`.

#![deny(unsafe_code)]

mod mpi;
