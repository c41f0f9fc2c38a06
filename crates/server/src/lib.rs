//! `kavach serve`: a RESP2 server over a Kavach store.
#![forbid(unsafe_code)]

pub mod backend;
