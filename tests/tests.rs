//! fe-host's integration tests: one binary, a module per concern. They drive the real
//! `fe-host` binary and load the real plugins through the real loader.

// Helpers here are test code: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod util;

mod bad_inputs;
mod checkpoints;
mod cli_errors;
mod console;
mod devices;
mod dist;
#[cfg(feature = "cuda-tests")]
mod gpu;
mod install;
mod kill;
mod loading;
mod network;
mod out_of_tree;
mod outputs;
mod overrides;
mod pipeline;
mod reference;
mod render;
mod scaffold;
mod scheduling;
mod slicing;
mod stopping;
mod torchscript;
mod traces;
mod training;
mod updates;
mod zoo;
