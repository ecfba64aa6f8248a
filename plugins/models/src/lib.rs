//! Model architectures for fe-host: FastEstimator's `LeNet` and a configurable `MLP`, and the
//! zoo (ResNet9, ResNet-18/34/50, WideResNet, UNet, Transformer and LSTM classifiers, DCGAN's
//! generator and discriminator) whose
//! variables are named as their PyTorch references' `state_dict`.

use fe_plugin_api::tch::{nn, nn::Module, Tensor};
use fe_plugin_api::{
    inventory, var_store_variables, CreateContext, Error, Field, FromConfig, Model, Registration,
    Result,
};

mod dcgan;
mod input;
mod layers;
mod lenet;
mod lstm;
mod mlp;
mod resnet;
mod resnet9;
mod transformer;
mod unet;
mod wideresnet;
mod zoo;

pub use dcgan::{Discriminator, Generator};
pub use lenet::{LeNet, LeNetConfig};
pub use lstm::{LstmClassifier, LstmConfig};
pub use mlp::{Mlp, MlpConfig};
pub use resnet::{Depth, ResNetConfig};
pub use resnet9::{ResNet9, ResNet9Config};
pub use transformer::{Transformer, TransformerConfig};
pub use unet::{UNet, UNetConfig};
pub use wideresnet::{WideResNet, WideResNetConfig};
pub use zoo::{ResNet18, ResNet34, ResNet50};

inventory::submit! {
    Registration::model::<LeNet>(
        "LeNet",
        "FastEstimator's LeNet: 3 conv (32, 64, 64) + 2 dense layers, softmax output by default",
    )
    .fields(&[
        Field::optional("input_shape", "[integer; 3]", "[1, 28, 28]", "Channels, height, width of one input"),
        Field::optional("classes", "integer", "10", "Number of classes"),
        Field::optional("softmax", "bool", "true", "End with a softmax; false gives logits"),
    ])
}

inventory::submit! {
    Registration::model::<Mlp>("MLP", "Multi-layer perceptron over flattened inputs")
    .fields(&[
        Field::required("inputs", "integer", "Number of input features (inputs are flattened from dimension 1)"),
        Field::optional("hidden", "[integer]", "[64, 64]", "Width of each hidden layer"),
        Field::optional("classes", "integer", "10", "Number of outputs"),
        Field::optional("softmax", "bool", "false", "Apply a softmax to the output"),
    ])
}

fe_plugin_api::export_plugin!();

/// Reads the single input every model here takes.
fn single_input<'a>(inputs: &[&'a Tensor]) -> Result<&'a Tensor> {
    match inputs {
        [x] => Ok(x),
        _ => Err(Error::msg(format!(
            "expected 1 input, got {}",
            inputs.len()
        ))),
    }
}

fn var_store(ctx: &CreateContext<'_>) -> nn::VarStore {
    nn::VarStore::new(ctx.device.into())
}

fn variables(vs: &nn::VarStore) -> Vec<(String, Tensor)> {
    var_store_variables(vs)
}

fn apply_linear(layer: &nn::Linear, x: &Tensor) -> Tensor {
    layer.forward(x)
}

impl FromConfig for LeNet {
    type Config = LeNetConfig;
    fn from_config(config: LeNetConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        LeNet::new(var_store(ctx), config)
    }
}

impl Model for LeNet {
    fn forward(&mut self, inputs: &[&Tensor], _train: bool) -> Result<Vec<Tensor>> {
        Ok(vec![self.run(single_input(inputs)?, &mut |_, _| {})?])
    }

    fn forward_with_layers(
        &mut self,
        inputs: &[&Tensor],
        _train: bool,
        layers: &[&str],
    ) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
        let known = self.layers();
        if let Some(unknown) = layers.iter().find(|l| !known.iter().any(|k| k == *l)) {
            return Err(Error::msg(format!(
                "LeNet has no layer `{unknown}` (layers: {})",
                known.join(", ")
            )));
        }
        let mut taps: Vec<Option<Tensor>> = layers.iter().map(|_| None).collect();
        let output = self.run(single_input(inputs)?, &mut |name, value| {
            for (slot, wanted) in taps.iter_mut().zip(layers) {
                if *wanted == name {
                    *slot = Some(value.shallow_clone());
                }
            }
        })?;
        let taps = taps.into_iter().flatten().collect();
        Ok((vec![output], taps))
    }

    fn layers(&self) -> Vec<String> {
        lenet::LAYERS.iter().map(|s| s.to_string()).collect()
    }

    fn variables(&self) -> Vec<(String, Tensor)> {
        variables(&self.vs)
    }
}

impl FromConfig for Mlp {
    type Config = MlpConfig;
    fn from_config(config: MlpConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        Mlp::new(var_store(ctx), config)
    }
}

impl Model for Mlp {
    fn forward(&mut self, inputs: &[&Tensor], _train: bool) -> Result<Vec<Tensor>> {
        Ok(vec![self.run(single_input(inputs)?)?])
    }

    fn variables(&self) -> Vec<(String, Tensor)> {
        variables(&self.vs)
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Device, Kind, Tensor};
    use fe_plugin_api::testing;

    #[test]
    fn lenet_gives_probabilities_for_mnist_shapes() {
        let mut model = testing::model("LeNet", "").unwrap();
        let x = Tensor::rand([4, 1, 28, 28], (Kind::Float, Device::Cpu));
        let y = model.forward(&[&x], true).unwrap();
        assert_eq!(y[0].size(), [4, 10]);
        let sums = y[0].sum_dim_intlist(-1, false, Kind::Float);
        assert!(sums.allclose(
            &Tensor::ones([4], (Kind::Float, Device::Cpu)),
            1e-5,
            1e-5,
            false
        ));
    }

    #[test]
    fn lenet_matches_fastestimator_parameter_count() {
        // FastEstimator's LeNet for (1, 28, 28) and 10 classes has 93,322 parameters.
        let model = testing::model("LeNet", "").unwrap();
        let count: i64 = model
            .variables()
            .unwrap()
            .iter()
            .map(|(_, t)| t.numel() as i64)
            .sum();
        assert_eq!(count, 93_322);
    }

    #[test]
    fn lenet_handles_other_input_shapes() {
        let mut model =
            testing::model("LeNet", "input_shape = [3, 32, 32]\nclasses = 100").unwrap();
        let x = Tensor::rand([2, 3, 32, 32], (Kind::Float, Device::Cpu));
        assert_eq!(model.forward(&[&x], false).unwrap()[0].size(), [2, 100]);
    }

    #[test]
    fn lenet_rejects_inputs_too_small() {
        let err = testing::model("LeNet", "input_shape = [1, 8, 8]")
            .err()
            .unwrap();
        assert!(err.message.contains("too small"), "{err}");
    }

    #[test]
    fn mlp_shapes_and_unknown_field() {
        let mut model = testing::model("MLP", "inputs = 6\nhidden = [5, 4]\nclasses = 3").unwrap();
        let x = Tensor::rand([7, 2, 3], (Kind::Float, Device::Cpu));
        assert_eq!(model.forward(&[&x], true).unwrap()[0].size(), [7, 3]);
        let err = testing::model("MLP", "inputs = 6\nhiden = [5]")
            .err()
            .unwrap();
        assert_eq!(err.field.as_str(), "hiden");
    }
}
