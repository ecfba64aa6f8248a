//! # fe-plugin-api
//!
//! The ABI between `fe-host` and its plugins. A plugin is a `cdylib` crate that implements one
//! or more of the component traits in plain Rust, registers each with `inventory::submit!`
//! and calls [`export_plugin!`] once:
//!
//! ```
//! use fe_plugin_api::{inventory, CreateContext, Field, FromConfig, Registration, Result,
//!                     StepContext, TensorOp};
//! use fe_plugin_api::tch::Tensor;
//!
//! #[derive(fe_plugin_api::serde::Deserialize)]
//! #[serde(crate = "fe_plugin_api::serde", deny_unknown_fields)]
//! struct ScaleConfig { factor: f64 }
//!
//! struct Scale { factor: f64 }
//!
//! impl TensorOp for Scale {
//!     fn forward(&mut self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
//!         Ok(vec![inputs[0].f_mul_scalar(self.factor)?])
//!     }
//! }
//!
//! impl FromConfig for Scale {
//!     type Config = ScaleConfig;
//!     fn from_config(config: ScaleConfig, ctx: &CreateContext<'_>) -> Result<Self> {
//!         ctx.expect_arity(Some(1), Some(1))?;
//!         Ok(Scale { factor: config.factor })
//!     }
//! }
//!
//! inventory::submit! {
//!     Registration::tensor_op::<Scale>("Scale", "Multiplies by a constant.")
//!         // What `fe-host plugins show Scale` prints; optional.
//!         .fields(&[Field::required("factor", "float", "What to multiply by")])
//! }
//!
//! fe_plugin_api::export_plugin!();
//! ```
//!
//! A manifest then uses it as `[[network.ops]] op = "Scale", inputs = "x", outputs = "y",
//! factor = 2.0`.
//!
//! ## What the crate guarantees
//!
//! * **One libtorch.** Tensors cross as handles ([`RTensor`] owned, [`TensorRef`] borrowed) to
//!   tensors of the one shared libtorch; autograd works across plugins.
//! * **No panic crosses the boundary.** Every call is wrapped; panics and libtorch exceptions
//!   become [`PluginError`]s naming plugin, component and method.
//! * **Checked before use.** [`BuildInfo`] is read from the file before any plugin code runs;
//!   abi_stable then checks the layout of everything in [`ffi`].
//! * **Config is yours.** Your `Config` type is deserialized from the component's TOML table;
//!   unknown fields are errors naming the field ([`parse_config`]). Resolve paths in it with
//!   [`CreateContext::resolve_path`] (relative to the manifest) and write files at
//!   [`CreateContext::output_path`] (inside the run's output directory, which `--smoke` and
//!   versioned runs redirect); traces see their data-parallel rank in
//!   [`TraceContext::rank`] ([`RunInfo`]).
//!
//! Test your components without the host with [`testing`].
#![deny(missing_docs)]

mod adapter;
pub mod build_info;
mod config;
mod context;
mod error;
mod export;
pub mod ffi;
mod fields;
pub mod host_link;
mod kinds;
mod metric_state;
mod registry;
pub mod run;
mod state;
mod tensor;
pub mod testing;
mod text;
mod trace_data;

pub use adapter::{declared_fields, guard, install_quiet_panic_hook, plugin_name};
pub use build_info::{BuildInfo, BUILD_INFO_SYMBOL};
pub use config::parse_config;
pub use context::{CreateContext, DeviceSpec, Mode, StepContext};
pub use error::{first_line, panic_message, Error, ErrorKind, PluginError, Result};
pub use export::__private;
pub use ffi::{ComponentInfo, PluginDescription};
pub use fields::{ComponentFields, Field, FieldInfo};
pub use host_link::Graph;
pub use kinds::{
    per_sample, var_store_variables, Dataset, FromConfig, Metric, Model, NoConfig, NumpyOp, Slicer,
    TensorOp, Trace,
};
pub use registry::{
    find_registration, registrations, ComponentKind, Factory, Registration, TraceImpl,
};
pub use run::RunInfo;
pub use state::{ComponentState, State};
pub use tensor::{NamedTensor, RTensor, TensorRef, TensorView};
pub use text::{tensor_text, text_tensor};
pub use trace_data::{TraceContext, TraceData, TraceOutput, TraceWrite, Value, ValueRef};

/// Re-exported for plugins that need abi_stable types.
pub use abi_stable;
/// Re-exported so plugins register components without depending on `inventory` directly.
pub use inventory;
/// Re-exported for configs: `#[derive(fe_plugin_api::serde::Deserialize)]` with
/// `#[serde(crate = "fe_plugin_api::serde")]` needs no direct serde dependency.
pub use serde;
/// Re-exported so plugins use the exact tch version the ABI is keyed on.
pub use tch;
