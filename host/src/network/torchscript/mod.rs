//! `architecture = "TorchScript"`: a model written in PyTorch and saved with
//! `torch.jit.script(model).save(...)` (or `torch.jit.trace`), trained natively through tch's
//! `CModule`. The module is loaded straight onto the run's device; its parameters and buffers
//! are handed to the host as tensors sharing storage with the module, so the host's optimizers,
//! checkpoints, weight files and exports see and change the module itself. It sits behind the
//! same `FfiModel` object a plugin model does, so the rest of the network cannot tell them apart.

mod archive;
mod ffi;
pub mod signature;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use fe_plugin_api::abi_stable::std_types::{RResult, RSlice, RStr, RString, RVec};
use fe_plugin_api::ffi::FfiModel;
use fe_plugin_api::{ComponentState, NamedTensor, PluginError, RTensor, State, TensorRef};
use serde::Deserialize;
use tch::{CModule, Device, IValue, Tensor};

pub use signature::{Returns, Signature};

/// The architecture name manifests use.
pub const ARCHITECTURE: &str = "TorchScript";

/// The model table's settings for a TorchScript architecture.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct TorchScriptConfig {
    /// The TorchScript file, relative to the manifest's directory.
    pub file: PathBuf,
    /// For a `forward` returning `Dict[str, Tensor]` or a NamedTuple: the entries (fields) to
    /// take, in output-key order.
    #[serde(default)]
    pub outputs: Option<Vec<String>>,
}

/// libtorch's reader appends to a file that is no zip archive (a text file, a `torch.save`
/// pickle, a truncated download) advice about corrupted "checkpoints" that does not fit a
/// model file; the reason before it is what the user needs.
fn without_miniz_advice(message: &str) -> String {
    match message.find(" This is an internal miniz error") {
        Some(at) => message[..at].trim_end_matches('.').to_owned(),
        None => message.to_owned(),
    }
}

/// Why a TorchScript file did not load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// Its bytes fail the archive's checksums: a damaged file, reported as bad data.
    Corrupt(String),
    /// It is missing or not a usable TorchScript module.
    Unusable(String),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Corrupt(why) | LoadError::Unusable(why) => f.write_str(why),
        }
    }
}

/// A loaded TorchScript module and what the host needs to know about it.
pub struct TorchScriptModel {
    module: CModule,
    /// The file it came from, for messages.
    label: String,
    /// Whether the module is in training mode now (`None` before the first forward), so the
    /// mode is switched only when it changes.
    training: Option<bool>,
    outputs: Option<Vec<String>>,
    signature: Signature,
}

impl TorchScriptModel {
    /// Loads `file` onto `device`, once its archive's checksums hold. The error says why the
    /// file is not a usable TorchScript module (the caller adds the file's name).
    pub fn load(
        file: &Path,
        device: Device,
        outputs: Option<Vec<String>>,
    ) -> Result<Self, LoadError> {
        if !file.is_file() {
            return Err(LoadError::Unusable(if file.exists() {
                "is not a file".to_owned()
            } else {
                "no such file".to_owned()
            }));
        }
        archive::verify(file).map_err(|e| LoadError::Corrupt(e.to_string()))?;
        Self::load_checked(file, device, outputs).map_err(LoadError::Unusable)
    }

    fn load_checked(
        file: &Path,
        device: Device,
        outputs: Option<Vec<String>>,
    ) -> Result<Self, String> {
        let module = catch_unwind(|| CModule::load_on_device(file, device))
            .map_err(|p| fe_plugin_api::panic_message(p.as_ref()))?
            .map_err(|e| {
                format!(
                    "is not a TorchScript module (write one with torch.jit.script(model).save(path)): {}",
                    without_miniz_advice(&crate::tch_message(e))
                )
            })?;
        let signature = ffi::forward_signature(&module).and_then(|t| Signature::parse(&t))?;
        let label = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| file.display().to_string());
        Ok(Self {
            module,
            label,
            training: None,
            outputs,
            signature,
        })
    }

    /// The signature of its `forward`.
    pub fn signature(&self) -> &Signature {
        &self.signature
    }

    /// The dict entries `outputs` names, if set.
    pub fn output_names(&self) -> Option<&[String]> {
        self.outputs.as_deref()
    }

    /// Parameters then buffers, by dotted name, sharing storage with the module.
    pub fn named_variables(&self) -> Result<Vec<(String, Tensor)>, String> {
        let mut all = self.module.named_parameters().map_err(crate::tch_message)?;
        all.extend(ffi::named_buffers(&self.module)?);
        Ok(all)
    }

    /// Writes the module (with whatever its variables hold now) in evaluation mode to `path`,
    /// loadable by `torch.jit.load`.
    pub fn save(&mut self, path: &Path) -> Result<(), String> {
        self.module.f_set_eval().map_err(crate::tch_message)?;
        self.training = Some(false);
        self.module.save(path).map_err(crate::tch_message)
    }

    fn set_mode(&mut self, train: bool) -> Result<(), String> {
        if self.training != Some(train) {
            if train {
                self.module.f_set_train()
            } else {
                self.module.f_set_eval()
            }
            .map_err(crate::tch_message)?;
            self.training = Some(train);
        }
        Ok(())
    }

    /// Runs `forward` on `inputs` in training or evaluation mode.
    pub fn run(&mut self, inputs: &[&Tensor], train: bool) -> Result<Vec<Tensor>, String> {
        self.set_mode(train)?;
        // The graph executor's optimised plan wraps the graph in autodiff subgraphs whose
        // backward uses TorchScript's own formulas instead of each op's native backward (ReLU's
        // becomes `gt`, a dtype copy and `mul` where eager runs one `threshold_backward`): a
        // small conv net trained 15% slower than PyTorch eager, and it profiles its first runs.
        // Unoptimised, each op records its own backward, as in eager. The switch is per thread
        // in libtorch, and this thread may not be the one that loaded the module, so it is set
        // on every call (a thread-local store).
        tch::jit::f_set_graph_executor_optimize(false).map_err(crate::tch_message)?;
        let args: Vec<IValue> = inputs
            .iter()
            .map(|t| IValue::Tensor(t.shallow_clone()))
            .collect();
        let out = self.module.forward_is(&args).map_err(crate::tch_message)?;
        self.outputs_of(out)
    }

    fn outputs_of(&self, value: IValue) -> Result<Vec<Tensor>, String> {
        let not_tensor = |what: &IValue| {
            format!(
                "forward returned {}, where fe-host takes tensors",
                describe(what)
            )
        };
        match value {
            IValue::Tensor(t) => Ok(vec![t]),
            IValue::TensorList(ts) => Ok(ts),
            IValue::Tuple(items) => {
                if let (Some(names), Returns::NamedTuple(fields)) =
                    (&self.outputs, &self.signature.returns)
                {
                    return named_fields(items, fields, names);
                }
                items
                    .into_iter()
                    .map(|item| match item {
                        IValue::Tensor(t) => Ok(t),
                        // An `Optional[Tensor]` left None (GoogLeNet's auxiliary outputs in
                        // eval mode): an undefined tensor keeps the positions, and the ModelOp
                        // refuses it only where one of its keys would take it.
                        IValue::None => Ok(Tensor::new()),
                        other => Err(not_tensor(&other)),
                    })
                    .collect()
            }
            IValue::GenericList(items) => items
                .into_iter()
                .map(|item| match item {
                    IValue::Tensor(t) => Ok(t),
                    other => Err(not_tensor(&other)),
                })
                .collect(),
            IValue::GenericDict(mut entries) => {
                let Some(names) = &self.outputs else {
                    return Err("forward returned a dict; name the entries to take with `outputs = [...]` in the model's table".into());
                };
                names
                    .iter()
                    .map(|name| {
                        let at = entries
                            .iter()
                            .position(|(k, _)| matches!(k, IValue::String(s) if s == name))
                            .ok_or_else(|| format!("forward's dict has no entry `{name}`"))?;
                        match entries.swap_remove(at).1 {
                            IValue::Tensor(t) => Ok(t),
                            other => Err(not_tensor(&other)),
                        }
                    })
                    .collect()
            }
            other => Err(not_tensor(&other)),
        }
    }

    fn error(&self, method: &str, message: String) -> PluginError {
        fe_plugin_api::Error::msg(message).into_plugin_error(
            "fe-host",
            &format!("{ARCHITECTURE}({})", self.label),
            method,
        )
    }

    fn guarded<T>(
        &mut self,
        method: &str,
        f: impl FnOnce(&mut Self) -> Result<T, String>,
    ) -> RResult<T, PluginError> {
        // libtorch exceptions surface as panics from tch's non-`f_` paths; keep them errors.
        let outcome = catch_unwind(AssertUnwindSafe(|| f(self)));
        let result = match outcome {
            Ok(result) => result,
            Err(payload) => Err(fe_plugin_api::panic_message(payload.as_ref())),
        };
        result.map_err(|m| self.error(method, m)).into()
    }
}

/// The NamedTuple `items`' fields that `names` picks, in that order (`fields` are its field
/// names, from the signature: tch's `IValue` carries none).
fn named_fields(
    items: Vec<IValue>,
    fields: &[String],
    names: &[String],
) -> Result<Vec<Tensor>, String> {
    let mut items: Vec<Option<IValue>> = items.into_iter().map(Some).collect();
    names
        .iter()
        .map(|name| {
            let at = fields
                .iter()
                .position(|f| f == name)
                .ok_or_else(|| format!("forward's NamedTuple has no field `{name}`"))?;
            match items.get_mut(at).and_then(Option::take) {
                Some(IValue::Tensor(t)) => Ok(t),
                Some(IValue::None) => Err(format!(
                    "forward's field `{name}` is None (an Optional output the module sets only in some modes, such as training?)"
                )),
                Some(other) => Err(format!(
                    "forward's field `{name}` is {}, where fe-host takes tensors",
                    describe(&other)
                )),
                None => Err(format!(
                    "field `{name}` is named twice in `outputs`, or forward returned fewer fields than its signature"
                )),
            }
        })
        .collect()
}

fn describe(value: &IValue) -> &'static str {
    match value {
        IValue::None => "None",
        IValue::Double(_) | IValue::Int(_) | IValue::Bool(_) => "a number",
        IValue::String(_) | IValue::StringList(_) => "text",
        IValue::Tuple(_) | IValue::GenericList(_) => "a nested tuple or list",
        IValue::GenericDict(_) => "a dict",
        _ => "a value that is not a tensor",
    }
}

impl FfiModel for TorchScriptModel {
    fn forward(
        &mut self,
        inputs: RSlice<'_, TensorRef<'_>>,
        train: bool,
        layers: RSlice<'_, RStr<'_>>,
    ) -> RResult<RVec<RTensor>, PluginError> {
        self.guarded("forward", |model| {
            if let Some(layer) = layers.first() {
                return Err(format!(
                    "a TorchScript model exposes no intermediate layers (asked for `{layer}`)"
                ));
            }
            let views: Vec<_> = inputs.iter().map(|t| t.view()).collect();
            let refs: Vec<&Tensor> = views.iter().map(|v| &**v).collect();
            let outputs = model.run(&refs, train)?;
            Ok(outputs.into_iter().map(RTensor::new).collect())
        })
    }

    fn layers(&self) -> RResult<RVec<RString>, PluginError> {
        RResult::ROk(RVec::new())
    }

    fn variables(&self) -> RResult<RVec<NamedTensor>, PluginError> {
        self.named_variables()
            .map(|all| {
                all.into_iter()
                    .map(|(name, tensor)| NamedTensor::new(name, tensor))
                    .collect()
            })
            .map_err(|m| self.error("variables", m))
            .into()
    }

    fn state(&self) -> RResult<ComponentState, PluginError> {
        // Everything a TorchScript module holds is a parameter or buffer, saved by the host.
        RResult::ROk(State::empty().into_ffi())
    }

    fn load_state(&mut self, _state: ComponentState) -> RResult<(), PluginError> {
        RResult::ROk(())
    }
}

#[cfg(test)]
mod tests;
