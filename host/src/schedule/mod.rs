//! What runs in which mode, dataset and epoch.

pub mod filter;

pub use filter::{validate_ds_id, validate_key, DsFilter, ModeFilter};
