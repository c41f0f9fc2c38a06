//! `microfs`: NVMe-CR's micro file system for checkpoint/restart.

#![deny(unsafe_code)]

pub mod balance;
