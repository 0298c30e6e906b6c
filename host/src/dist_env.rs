//! Rank, world size and store address from the launcher environment (in progress).
