//! This process's place in a data-parallel run, for the code that decides who writes files:
//! rank 0 writes the run's outputs (logs, plots, saved models, checkpoints); the other ranks
//! train in step with it and write nothing. A single process is rank 0 of 1.

use std::sync::atomic::{AtomicUsize, Ordering};

static RANK: AtomicUsize = AtomicUsize::new(0);
static WORLD: AtomicUsize = AtomicUsize::new(1);

/// Records that this process is `rank` of `world` (once it joined its group).
pub fn set(rank: usize, world: usize) {
    RANK.store(rank, Ordering::Relaxed);
    WORLD.store(world.max(1), Ordering::Relaxed);
}

/// This process's rank (0 when it trains alone).
pub fn rank() -> usize {
    RANK.load(Ordering::Relaxed)
}

/// How many processes train together (1 when alone).
pub fn world() -> usize {
    WORLD.load(Ordering::Relaxed)
}

/// Whether this process writes the run's outputs: rank 0 does, the others do not.
pub fn writes_outputs() -> bool {
    rank() == 0
}
