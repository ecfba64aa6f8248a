//! Datasets fe-host can generate itself, so examples and tests need no download.

pub mod digits;
