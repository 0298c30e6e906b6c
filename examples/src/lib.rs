//! What the numbered examples share, kept apart so that the CPU tests
//! cover it: [`mlp`], the small model of `01_data_parallel`, with its
//! synthetic data, forward and backward passes on the host.

pub mod mlp;
