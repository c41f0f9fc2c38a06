//! `powerfail`: power-failure warnings, the window of residual energy they leave, and a bounded
//! save of every registered target inside that window (being built; see issue 20).
