//! A multi-layer perceptron over flattened inputs.

use fe_plugin_api::tch::{nn, Tensor};
use fe_plugin_api::{Error, Result};
use serde::Deserialize;

/// MLP configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct MlpConfig {
    /// Number of input features (inputs are flattened from dimension 1).
    pub inputs: i64,
    /// Width of each hidden layer.
    #[serde(default = "default_hidden")]
    pub hidden: Vec<i64>,
    /// Number of outputs.
    #[serde(default = "default_classes")]
    pub classes: i64,
    /// Apply a softmax to the output.
    #[serde(default)]
    pub softmax: bool,
}

fn default_hidden() -> Vec<i64> {
    vec![64, 64]
}

fn default_classes() -> i64 {
    10
}

/// Linear layers with ReLU in between.
pub struct Mlp {
    pub(crate) vs: nn::VarStore,
    layers: Vec<nn::Linear>,
    softmax: bool,
    inputs: i64,
}

impl Mlp {
    pub(crate) fn new(vs: nn::VarStore, config: MlpConfig) -> Result<Self> {
        if config.inputs < 1 {
            return Err(Error::config("inputs", "must be at least 1"));
        }
        if let Some(bad) = config.hidden.iter().position(|&w| w < 1) {
            return Err(Error::config(
                format!("hidden[{bad}]"),
                "must be at least 1",
            ));
        }
        let mut widths = vec![config.inputs];
        widths.extend(&config.hidden);
        widths.push(config.classes);
        let root = vs.root();
        let layers = widths
            .windows(2)
            .enumerate()
            .map(|(i, w)| {
                nn::linear(
                    &root / format!("fc{}", i + 1),
                    w[0],
                    w[1],
                    Default::default(),
                )
            })
            .collect();
        Ok(Self {
            vs,
            layers,
            softmax: config.softmax,
            inputs: config.inputs,
        })
    }

    pub(crate) fn run(&self, x: &Tensor) -> Result<Tensor> {
        crate::input::features("MLP", x, self.inputs)?;
        let mut x = x.f_flatten(1, -1)?;
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            x = super::apply_linear(layer, &x);
            if i < last {
                x = x.f_relu()?;
            }
        }
        Ok(if self.softmax {
            x.f_softmax(-1, x.kind())?
        } else {
            x
        })
    }
}
