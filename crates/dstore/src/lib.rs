//! DStore.
#![forbid(unsafe_code)]
