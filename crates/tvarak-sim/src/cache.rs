//! Set-associative LRU caches: the private L1 and L2 of each core, the shared inclusive LLC with
//! banks and way partitions, and the per-bank controller cache.

/// The geometry and cost of one cache level.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct CacheGeom {
    /// Capacity in bytes (for the LLC: all banks together).
    pub bytes: u64,
    /// Associativity.
    pub ways: u16,
    /// Hit latency in core cycles.
    pub latency_cycles: u32,
    /// Energy per hit, picojoules.
    pub hit_pj: f64,
    /// Energy per miss, picojoules.
    pub miss_pj: f64,
}
