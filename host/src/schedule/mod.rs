//! What runs in which mode, dataset and epoch: mode/ds_id filters, epoch and repeat schedules,
//! and learning-rate schedules.

pub mod filter;
pub mod lr;
pub mod scheduled;

pub use filter::{validate_ds_id, validate_key, DsFilter, ModeFilter};
pub use lr::{By, LrSchedule};
pub use scheduled::{parse_scheduled, signature_epochs, InForce, Schedule, Scheduled};
