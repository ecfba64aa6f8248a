//! The model and dataset templates (see `templates.rs`): components that produce the data
//! and the parameters the others work on.

/// `model`: an architecture whose parameters fe-host owns.
pub const MODEL: &str = r#"use fe_plugin_api::serde::Deserialize;
use fe_plugin_api::tch::nn::{self, Module};
use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{inventory, var_store_variables, CreateContext, Error, Field, FromConfig, Model, Registration, Result};

/// The `[[models]]` table of `architecture = "COMPONENT"` (less `name`, `optimizer`, ...).
#[derive(Deserialize)]
#[serde(crate = "fe_plugin_api::serde", deny_unknown_fields)]
pub struct Config {
    /// Input features (inputs are flattened from dimension 1).
    inputs: i64,
    /// Hidden width.
    #[serde(default = "hidden")]
    hidden: i64,
    /// Outputs (classes).
    #[serde(default = "classes")]
    classes: i64,
}

fn hidden() -> i64 {
    32
}

fn classes() -> i64 {
    10
}

/// Two linear layers with a ReLU between; outputs logits. Parameter names (`fc1.weight`, ...)
/// match a PyTorch module with attributes `fc1` and `fc2`, so weights move both ways.
pub struct COMPONENT {
    vs: nn::VarStore,
    fc1: nn::Linear,
    fc2: nn::Linear,
}

impl FromConfig for COMPONENT {
    type Config = Config;
    fn from_config(config: Config, ctx: &CreateContext<'_>) -> Result<Self> {
        for (field, value) in [("inputs", config.inputs), ("hidden", config.hidden), ("classes", config.classes)] {
            if value < 1 {
                return Err(Error::config(field, "must be at least 1"));
            }
        }
        let vs = nn::VarStore::new(ctx.device.into());
        let root = vs.root();
        let fc1 = nn::linear(&root / "fc1", config.inputs, config.hidden, Default::default());
        let fc2 = nn::linear(&root / "fc2", config.hidden, config.classes, Default::default());
        Ok(Self { vs, fc1, fc2 })
    }
}

impl Model for COMPONENT {
    fn forward(&mut self, inputs: &[&Tensor], _train: bool) -> Result<Vec<Tensor>> {
        let [x] = inputs else {
            return Err(Error::msg(format!("expected 1 input, got {}", inputs.len())));
        };
        let hidden = self.fc1.forward(&x.f_flatten(1, -1)?).f_relu()?;
        Ok(vec![self.fc2.forward(&hidden)])
    }

    fn variables(&self) -> Vec<(String, Tensor)> {
        var_store_variables(&self.vs)
    }
}

inventory::submit! {
    Registration::model::<COMPONENT>("COMPONENT", "Two-layer perceptron").fields(&[
        Field::required("inputs", "integer", "Input features (inputs are flattened from dimension 1)"),
        Field::optional("hidden", "integer", "32", "Hidden width"),
        Field::optional("classes", "integer", "10", "Outputs (classes)"),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe_plugin_api::{tch, testing};

    #[test]
    fn maps_flattened_inputs_to_classes() {
        let mut model = testing::model("COMPONENT", "inputs = 12\nclasses = 3").unwrap();
        let x = Tensor::ones([4, 3, 4], (tch::Kind::Float, tch::Device::Cpu));
        assert_eq!(model.forward(&[&x], false).unwrap()[0].size(), [4, 3]);
        let names: Vec<String> = model.variables().unwrap().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]);
        // Training mode builds a graph the host's optimizer backpropagates through.
        let y = model.forward(&[&x], true).unwrap();
        assert!(y[0].requires_grad());
        assert!(testing::model("COMPONENT", "inputs = 0").is_err());
    }
}
"#;

/// `dataset`: random-access samples for `[pipeline.data.*] type = "COMPONENT"`.
pub const DATASET: &str = r#"use fe_plugin_api::serde::Deserialize;
use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{inventory, CreateContext, Dataset, Error, Field, FromConfig, Registration, Result};

/// The dataset table (less `type`).
#[derive(Deserialize)]
#[serde(crate = "fe_plugin_api::serde", deny_unknown_fields)]
pub struct Config {
    /// Number of samples.
    samples: u64,
}

/// `x` in [0, 1) and `y` = 1 when `x` > 0.5: a learnable toy task. Deterministic: sample
/// `i` is the same in every run, worker and epoch.
pub struct COMPONENT {
    samples: u64,
}

impl FromConfig for COMPONENT {
    type Config = Config;
    fn from_config(config: Config, _ctx: &CreateContext<'_>) -> Result<Self> {
        if config.samples == 0 {
            return Err(Error::config("samples", "must be at least 1"));
        }
        Ok(Self { samples: config.samples })
    }
}

impl Dataset for COMPONENT {
    fn len(&self) -> u64 {
        self.samples
    }

    fn keys(&self) -> Vec<String> {
        vec!["x".into(), "y".into()]
    }

    fn get(&self, index: u64) -> Result<Vec<Tensor>> {
        // A fixed permutation of 0..samples, spread over [0, 1).
        let x = ((index * 7919) % self.samples) as f32 / self.samples as f32;
        Ok(vec![Tensor::from_slice(&[x]), Tensor::from(i64::from(x > 0.5))])
    }
}

inventory::submit! {
    Registration::dataset::<COMPONENT>("COMPONENT", "x in [0, 1), y = x > 0.5")
        .fields(&[Field::required("samples", "integer", "Number of samples, at least 1")])
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::testing;

    #[test]
    fn samples_are_deterministic() {
        let data = testing::dataset("COMPONENT", "samples = 10").unwrap();
        assert_eq!((data.len(), data.keys()), (10, vec!["x".to_owned(), "y".to_owned()]));
        let a = data.get(3).unwrap();
        assert!(a[0].equal(&data.get(3).unwrap()[0]));
        assert_eq!(data.get(3).unwrap()[1].int64_value(&[]), i64::from(a[0].double_value(&[0]) > 0.5));
        assert!(testing::dataset("COMPONENT", "samples = 0").is_err());
    }
}
"#;
