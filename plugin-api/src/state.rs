//! Component state that goes into checkpoints: JSON for everything small, tensors by name.

use abi_stable::std_types::{RString, RVec};
use abi_stable::StableAbi;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tch::Tensor;

use crate::tensor::NamedTensor;
use crate::{Error, Result};

/// A component's checkpointable state as it crosses the boundary.
#[repr(C)]
#[derive(StableAbi, Debug, Default)]
pub struct ComponentState {
    /// JSON text (`""` for none).
    pub json: RString,
    /// Named tensors.
    pub tensors: RVec<NamedTensor>,
}

/// A component's checkpointable state, as plugin authors build and read it.
///
/// ```
/// use fe_plugin_api::State;
/// #[derive(fe_plugin_api::serde::Serialize, fe_plugin_api::serde::Deserialize, PartialEq, Debug)]
/// #[serde(crate = "fe_plugin_api::serde")]
/// struct Counter { calls: u64 }
/// let state = State::from_json(&Counter { calls: 3 })?
///     .with_tensor("running_mean", fe_plugin_api::tch::Tensor::zeros([4], (fe_plugin_api::tch::Kind::Float, fe_plugin_api::tch::Device::Cpu)));
/// let back: Counter = state.json()?;
/// assert_eq!(back, Counter { calls: 3 });
/// assert!(state.tensor("running_mean").is_some());
/// # Ok::<(), fe_plugin_api::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct State {
    json: String,
    tensors: Vec<(String, Tensor)>,
}

impl State {
    /// No state.
    pub fn empty() -> Self {
        Self::default()
    }

    /// State holding `value` as JSON.
    pub fn from_json<T: Serialize>(value: &T) -> Result<Self> {
        Ok(Self {
            json: serde_json::to_string(value)
                .map_err(|e| Error::msg(format!("cannot serialize state: {e}")))?,
            tensors: Vec::new(),
        })
    }

    /// State from JSON text (empty for none) and named tensors, as a checkpoint stores it.
    ///
    /// ```
    /// let state = fe_plugin_api::State::from_parts(r#"{"calls":2}"#.to_owned(), Vec::new());
    /// assert_eq!(state.json_text(), r#"{"calls":2}"#);
    /// ```
    pub fn from_parts(json: String, tensors: Vec<(String, Tensor)>) -> Self {
        Self { json, tensors }
    }

    /// Splits into JSON text and named tensors.
    pub fn into_parts(self) -> (String, Vec<(String, Tensor)>) {
        (self.json, self.tensors)
    }

    /// Adds a named tensor.
    pub fn with_tensor(mut self, name: impl Into<String>, tensor: Tensor) -> Self {
        self.tensors.push((name.into(), tensor));
        self
    }

    /// `true` when there is neither JSON nor tensors.
    pub fn is_empty(&self) -> bool {
        self.json.is_empty() && self.tensors.is_empty()
    }

    /// The JSON part, deserialized.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(&self.json).map_err(|e| Error::msg(format!("invalid state JSON: {e}")))
    }

    /// The JSON text.
    pub fn json_text(&self) -> &str {
        &self.json
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// All named tensors.
    pub fn tensors(&self) -> &[(String, Tensor)] {
        &self.tensors
    }

    /// Converts for the trip across the boundary.
    pub fn into_ffi(self) -> ComponentState {
        ComponentState {
            json: self.json.into(),
            tensors: self
                .tensors
                .into_iter()
                .map(|(name, tensor)| NamedTensor::new(name, tensor))
                .collect(),
        }
    }

    /// Converts back after the trip across the boundary.
    pub fn from_ffi(state: ComponentState) -> Self {
        Self {
            json: state.json.into_string(),
            tensors: state
                .tensors
                .into_iter()
                .map(|named| (named.name.into_string(), named.tensor.into_tensor()))
                .collect(),
        }
    }
}
