//! fe-host's integration tests: one binary, a module per concern. They drive the real
//! `fe-host` binary and load the real plugins through the real loader.

// Helpers here are test code: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod util;

mod bad_inputs;
mod bleu;
mod boxes_pipeline;
mod cards;
mod checkpoints;
mod cli_errors;
mod clipping;
mod cluster_envs;
mod console;
mod detection;
mod devices;
mod dist;
mod dist_checks;
mod dist_faults;
mod dist_refusals;
mod dist_resume;
mod dist_uneven;
mod evaluate;
mod evolution;
mod exports;
#[cfg(feature = "cuda-tests")]
mod gpu;
mod image_saver;
mod install;
mod install_standalone;
mod kill;
mod label_tracker;
mod launch;
mod loading;
mod metrics;
mod mixing;
mod network;
mod out_of_tree;
mod outputs;
mod overrides;
mod overwrites;
mod parquet;
mod pipeline;
mod pipeline_cache;
mod plugin_kit;
mod plugin_run_info;
mod recipes;
mod records;
mod reference;
mod regularization;
mod render;
mod resume_checks;
mod run_dirs;
mod scaffold;
mod scheduling;
mod shards;
mod slicing;
mod stopping;
mod super_loss;
mod third_party;
mod tokenize;
mod torchscript;
mod torchscript_checks;
mod torchvision;
mod traces;
mod training;
mod updates;
mod webdataset;
mod zoo;
