//! Reliable words: an 8-byte check word beside every 8-byte data word (being built; issue 20).
