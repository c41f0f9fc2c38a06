//! `wsp`: Whole-System Persistence for one unmodified process.
//!
//! (Skeleton; filled in by the issue 21 work.)
