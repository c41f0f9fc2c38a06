//! Word-based software transactional memory for isolation without user locks (being built; issue 20).
