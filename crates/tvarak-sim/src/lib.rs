//! `tvarak_sim`: TVARAK's redundancy controller (Kateja et al.), simulated beside a last-level
//! cache and fed with traces of real Kavach runs; the paper's baselines and ablation steps; a
//! functional redundancy engine whose checksums and parity match the `integrity` crate's eager
//! mode byte for byte; fault injection at the DIMMs.

#![forbid(unsafe_code)]

pub mod cache;
pub mod design;
pub mod engine;
pub mod error;
pub mod fault;
pub mod nvm;
pub mod record;
pub mod sim;
pub mod trace;
pub mod workload;
