//! Datasets fe-host can generate itself, so examples and tests need no download.

pub mod cifar;
pub mod digits;
pub mod masks;
pub mod splits;
pub mod tokens;
