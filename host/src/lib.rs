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
pub mod builtin_fields;
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
pub mod overwrite;
pub mod pipeline;
pub mod plugins;
pub mod predict;
pub mod record;
pub mod render;
pub mod replace;
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
    if let tch::TchError::Torch(message) = &error {
        if let Some(cause) = torchscript_cause(message) {
            return cause;
        }
    }
    fe_plugin_api::Error::from(error).message().to_owned()
}

/// What a TorchScript module's code raised, from the interpreter's message. That message says
/// only that an operation failed on its first line, then gives the module's traceback, and
/// names the error (`RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x784 and
/// 1352x10)`) on its last unindented `...Error: ` line: the one line worth keeping. `None` for
/// any other message.
fn torchscript_cause(message: &str) -> Option<String> {
    let first = message.lines().next()?;
    if !first.starts_with("The following operation failed in the TorchScript interpreter") {
        return None;
    }
    let is_error_line = |line: &&str| {
        line.split_once(": ").is_some_and(|(name, _)| {
            (name.ends_with("Error") || name.ends_with("Exception"))
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        })
    };
    let cause = message.lines().rev().find(is_error_line)?;
    Some(format!(
        "the TorchScript interpreter raised {}",
        cause.trim_end()
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_torchscript_error_keeps_the_cause_its_interpreter_names_last() {
        let message = "The following operation failed in the TorchScript interpreter.\n\
            Traceback of TorchScript, serialized code (most recent call last):\n\
            \x20 File \"code/__torch__.py\", line 10, in forward\n\
            \x20   return torch.linear(x, weight, bias)\n\
            \x20          ~~~~~~~~~~~~ <--- HERE\n\
            RuntimeError: mat1 and mat2 shapes cannot be multiplied (3x5 and 4x2)\n";
        assert_eq!(
            super::tch_message(tch::TchError::Torch(message.into())),
            "the TorchScript interpreter raised RuntimeError: mat1 and mat2 shapes cannot be \
             multiplied (3x5 and 4x2)"
        );
        // Any other libtorch message keeps its first line, without the C++ backtrace.
        let other = "shape '[2]' is invalid\nException raised from infer_size at x.cpp:1";
        assert_eq!(
            super::tch_message(tch::TchError::Torch(other.into())),
            "shape '[2]' is invalid"
        );
        // An interpreter message naming no error keeps its first line too.
        let bare = "The following operation failed in the TorchScript interpreter.\nfoo";
        assert_eq!(
            super::tch_message(tch::TchError::Torch(bare.into())),
            "The following operation failed in the TorchScript interpreter."
        );
    }
}
