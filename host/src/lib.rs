//! # fe-host
//!
//! Trains and evaluates models described by a TOML manifest, FastEstimator-style: a
//! [pipeline](pipeline) feeds batches to a [network](network) of ops, [traces](estimator) watch
//! every batch and epoch, and every op, model, metric and transform is loaded from a
//! [plugin](plugins) built against `fe-plugin-api`.
//!
//! The binary (`src/main.rs`) only parses the command line and maps [`Error`]s to exit codes;
//! everything else lives here.

pub mod batch;
pub mod checkpoint;
pub mod cli;
pub mod components;
pub mod datagen;
pub mod device;
pub mod dist;
pub mod error;
pub mod estimator;
pub mod key_path;
pub mod manifest;
pub mod network;
pub mod optim;
pub mod pipeline;
pub mod plugins;
pub mod predict;
pub mod render;
pub mod report;
pub mod rng;
pub mod run_dir;
pub mod runtime;
pub mod schedule;
pub mod shim;
pub mod stop;
pub mod system;

pub use error::{Error, Result};

/// A libtorch error as one line (libtorch appends a C++ backtrace to its messages).
pub fn tch_message(error: tch::TchError) -> String {
    fe_plugin_api::Error::from(error).message().to_owned()
}
