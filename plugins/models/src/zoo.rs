//! The zoo's registrations and `Model` implementations: each architecture is a plain struct
//! holding its `VarStore`; variables are named exactly as its PyTorch reference's
//! `state_dict`, so weights saved by fe-host load there with `strict=True`, and back.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{
    inventory, CreateContext, Error, Field, FromConfig, Model, NoConfig, Registration, Result,
};

use crate::dcgan::{Discriminator, Generator};
use crate::lstm::{LstmClassifier, LstmConfig};
use crate::resnet::{Depth, ResNet, ResNetConfig, LAYERS as RESNET_LAYERS};
use crate::resnet9::{ResNet9, ResNet9Config};
use crate::transformer::{Transformer, TransformerConfig};
use crate::unet::{UNet, UNetConfig};
use crate::wideresnet::{WideResNet, WideResNetConfig};
use crate::{single_input, var_store, variables};

/// The configuration ResNet-18, -34 and -50 share (`ResNetConfig`).
const RESNET_FIELDS: &[Field] = &[
    Field::optional(
        "in_channels",
        "integer",
        "3",
        "Channels of the input; any height and width work",
    ),
    Field::optional("classes", "integer", "1000", "Number of outputs"),
    Field::optional(
        "width",
        "integer",
        "64",
        "Channels of the stem and first stage; later stages double it",
    ),
];

inventory::submit! {
    Registration::model::<ResNet9>(
        "ResNet9",
        "FastEstimator's ResNet9 for CIFAR-shaped images (softmax output by default)",
    )
    .fields(&[
        Field::optional("input_shape", "[integer; 3]", "[3, 32, 32]", "Channels, height, width of one input (height, width >= 16)"),
        Field::optional("classes", "integer", "10", "Number of classes"),
        Field::optional("width", "integer", "64", "Channels of the first convolution; the stages have 2x, 4x, 8x"),
        Field::optional("softmax", "bool", "true", "End with a softmax; false gives logits"),
    ])
}
inventory::submit! {
    Registration::model::<ResNet18>("ResNet18", "torchvision's ResNet-18 (logits)")
    .fields(RESNET_FIELDS)
}
inventory::submit! {
    Registration::model::<ResNet34>("ResNet34", "torchvision's ResNet-34 (logits)")
    .fields(RESNET_FIELDS)
}
inventory::submit! {
    Registration::model::<ResNet50>("ResNet50", "torchvision's ResNet-50 (logits)")
    .fields(RESNET_FIELDS)
}
inventory::submit! {
    Registration::model::<WideResNet>(
        "WideResNet",
        "FastEstimator's Wide Residual Network WRN-depth-k (logits)",
    )
    .fields(&[
        Field::optional("depth", "integer", "28", "Depth; (depth - 4) must be a multiple of 6"),
        Field::optional("widen_factor", "integer", "10", "The width multiplier k"),
        Field::optional("classes", "integer", "10", "Number of outputs (logits)"),
        Field::optional("dropout", "float", "0.0", "Dropout between a block's two convolutions, in training"),
        Field::optional("in_channels", "integer", "3", "Channels of the input"),
    ])
}
inventory::submit! {
    Registration::model::<UNet>("UNet", "FastEstimator's UNet for segmentation (sigmoid masks)")
    .fields(&[
        Field::optional("input_shape", "[integer; 3]", "[1, 128, 128]", "Channels, height, width of one input; height and width multiples of 16"),
        Field::optional("output_channel", "integer", "1", "Channels of the output mask (sigmoid per channel)"),
        Field::optional("width", "integer", "64", "Channels of the first encoder; each level doubles it"),
    ])
}
inventory::submit! {
    Registration::model::<Transformer>(
        "TransformerClassifier",
        "Transformer encoder classifier for token sequences (logits)",
    )
    .fields(&[
        Field::optional("vocab", "integer", "64", "Number of distinct token ids (ids in 0..vocab)"),
        Field::optional("classes", "integer", "4", "Number of outputs (logits)"),
        Field::optional("d_model", "integer", "64", "Width of the embeddings and of every layer"),
        Field::optional("heads", "integer", "4", "Attention heads; must divide d_model"),
        Field::optional("layers", "integer", "2", "Encoder layers"),
        Field::optional("ff", "integer", "128", "Width of each layer's feed-forward block"),
        Field::optional("max_len", "integer", "64", "Longest sequence (learned position embeddings)"),
        Field::optional("dropout", "float", "0.1", "Dropout in training"),
    ])
}
inventory::submit! {
    Registration::model::<LstmClassifier>(
        "LSTMClassifier",
        "LSTM classifier for token sequences (logits)",
    )
    .fields(&[
        Field::optional("vocab", "integer", "64", "Number of distinct token ids (ids in 0..vocab)"),
        Field::optional("classes", "integer", "4", "Number of outputs (logits)"),
        Field::optional("embed", "integer", "32", "Width of the token embeddings"),
        Field::optional("hidden", "integer", "64", "Width of the LSTM state"),
        Field::optional("layers", "integer", "1", "Stacked LSTM layers"),
        Field::optional("dropout", "float", "0.0", "Dropout between stacked layers, in training"),
    ])
}

inventory::submit! {
    Registration::model::<Generator>(
        "DCGANGenerator",
        "FastEstimator's DCGAN generator: noise [B, 100] to 28x28 images in [-1, 1]",
    )
    .fields(&[])
}
inventory::submit! {
    Registration::model::<Discriminator>(
        "DCGANDiscriminator",
        "FastEstimator's DCGAN discriminator: 28x28 images to one logit",
    )
    .fields(&[])
}

/// Implements `FromConfig` and `Model` for an architecture whose `run(x, train)` gives its
/// one output.
macro_rules! single_output_model {
    ($ty:ty, $config:ty, |$vs:ident, $cfg:ident| $make:expr, |$model:ident, $x:ident, $train:ident| $run:expr) => {
        impl FromConfig for $ty {
            type Config = $config;
            fn from_config($cfg: $config, ctx: &CreateContext<'_>) -> Result<Self> {
                let $vs = var_store(ctx);
                $make
            }
        }

        impl Model for $ty {
            fn forward(&mut self, inputs: &[&Tensor], $train: bool) -> Result<Vec<Tensor>> {
                let $x = single_input(inputs)?;
                let $model = self;
                Ok(vec![$run?])
            }

            fn variables(&self) -> Vec<(String, Tensor)> {
                variables(&self.vs)
            }
        }
    };
}

single_output_model!(
    ResNet9,
    ResNet9Config,
    |vs, config| ResNet9::new(vs, config),
    |model, x, train| model.run(x, train)
);
single_output_model!(
    WideResNet,
    WideResNetConfig,
    |vs, config| WideResNet::new(vs, config),
    |model, x, train| model.run(x, train)
);
single_output_model!(
    UNet,
    UNetConfig,
    |vs, config| UNet::new(vs, config),
    |model, x, _train| model.run(x)
);
single_output_model!(
    Generator,
    NoConfig,
    |vs, _config| Ok(Generator::new(vs)),
    |model, x, train| model.run(x, train)
);
single_output_model!(
    Discriminator,
    NoConfig,
    |vs, _config| Ok(Discriminator::new(vs)),
    |model, x, train| model.run(x, train)
);
single_output_model!(
    LstmClassifier,
    LstmConfig,
    |vs, config| LstmClassifier::new(vs, config),
    |model, x, train| model.run(x, train)
);

impl FromConfig for Transformer {
    type Config = TransformerConfig;
    fn from_config(config: TransformerConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        Transformer::new(var_store(ctx), config)
    }
}

/// Token ids, and optionally their attention mask.
impl Model for Transformer {
    fn forward(&mut self, inputs: &[&Tensor], train: bool) -> Result<Vec<Tensor>> {
        let output = match inputs {
            [tokens] => self.run(tokens, None, train)?,
            [tokens, mask] => self.run(tokens, Some(mask), train)?,
            _ => {
                return Err(Error::msg(format!(
                    "TransformerClassifier takes token ids and optionally their attention mask \
                     (1 or 2 inputs), got {}",
                    inputs.len()
                )))
            }
        };
        Ok(vec![output])
    }

    fn variables(&self) -> Vec<(String, Tensor)> {
        variables(&self.vs)
    }
}

/// A torchvision ResNet of one depth, registered under its own name.
macro_rules! resnet_depth {
    ($name:ident, $depth:expr) => {
        #[doc = concat!("torchvision's `", stringify!($name), "`.")]
        pub struct $name(ResNet);

        impl FromConfig for $name {
            type Config = ResNetConfig;
            fn from_config(config: ResNetConfig, ctx: &CreateContext<'_>) -> Result<Self> {
                Ok(Self(ResNet::new(var_store(ctx), $depth, config)?))
            }
        }

        impl Model for $name {
            fn forward(&mut self, inputs: &[&Tensor], train: bool) -> Result<Vec<Tensor>> {
                Ok(vec![self.0.run(
                    single_input(inputs)?,
                    train,
                    &mut |_, _| {},
                )?])
            }

            fn forward_with_layers(
                &mut self,
                inputs: &[&Tensor],
                train: bool,
                layers: &[&str],
            ) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
                resnet_with_layers(&mut self.0, inputs, train, layers)
            }

            fn layers(&self) -> Vec<String> {
                RESNET_LAYERS.iter().map(|s| s.to_string()).collect()
            }

            fn variables(&self) -> Vec<(String, Tensor)> {
                variables(&self.0.vs)
            }
        }
    };
}

resnet_depth!(ResNet18, Depth::D18);
resnet_depth!(ResNet34, Depth::D34);
resnet_depth!(ResNet50, Depth::D50);

fn resnet_with_layers(
    net: &mut ResNet,
    inputs: &[&Tensor],
    train: bool,
    layers: &[&str],
) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
    if let Some(unknown) = layers.iter().find(|l| !RESNET_LAYERS.contains(l)) {
        return Err(Error::msg(format!(
            "ResNet has no layer `{unknown}` (layers: {})",
            RESNET_LAYERS.join(", ")
        )));
    }
    let mut taps: Vec<Option<Tensor>> = layers.iter().map(|_| None).collect();
    let output = net.run(single_input(inputs)?, train, &mut |name, value| {
        for (slot, wanted) in taps.iter_mut().zip(layers) {
            if *wanted == name {
                *slot = Some(value.shallow_clone());
            }
        }
    })?;
    Ok((vec![output], taps.into_iter().flatten().collect()))
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Device, Kind, Tensor};
    use fe_plugin_api::testing::{self, TestModel};

    fn parameter_count(model: &TestModel) -> i64 {
        model
            .variables()
            .unwrap()
            .iter()
            .filter(|(_, t)| t.requires_grad())
            .map(|(_, t)| t.numel() as i64)
            .sum()
    }

    fn names(model: &TestModel) -> Vec<String> {
        model
            .variables()
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    }

    #[test]
    fn parameter_counts_match_the_pytorch_references() {
        // torch: sum(p.numel() for p in model.parameters()) of torchvision's resnet18/34/50,
        // FastEstimator's ResNet9, WideResidualNetwork(28, 10) and UNet((1, 128, 128)).
        for (architecture, config, expected) in [
            ("ResNet9", "", 7_756_554),
            ("ResNet18", "", 11_689_512),
            ("ResNet34", "", 21_797_672),
            ("ResNet50", "", 25_557_032),
            ("WideResNet", "", 36_479_194),
            ("UNet", "", 34_512_193),
            ("TransformerClassifier", "", 75_396),
            ("LSTMClassifier", "", 27_396),
        ] {
            let model = testing::model(architecture, config).unwrap();
            assert_eq!(parameter_count(&model), expected, "{architecture}");
        }
    }

    #[test]
    fn names_are_pytorch_state_dict_keys() {
        let resnet = names(&testing::model("ResNet50", "width = 4\nclasses = 3").unwrap());
        assert_eq!(
            resnet.len(),
            320,
            "torchvision resnet50's state_dict has 320 entries"
        );
        for key in [
            "conv1.weight",
            "bn1.num_batches_tracked",
            "layer1.0.downsample.0.weight",
            "layer1.0.downsample.1.running_var",
            "layer4.2.conv3.weight",
            "layer4.2.bn3.bias",
            "fc.weight",
        ] {
            assert!(resnet.iter().any(|n| n == key), "missing {key}");
        }
        let wrn = names(&testing::model("WideResNet", "depth = 16\nwiden_factor = 1").unwrap());
        assert!(wrn
            .iter()
            .any(|n| n == "block2.layer.0.convShortcut.weight"));
        assert!(!wrn
            .iter()
            .any(|n| n == "block1.layer.0.convShortcut.weight"));
        let unet = names(&testing::model("UNet", "width = 2").unwrap());
        for key in [
            "enc1.layers.2.bias",
            "bottle_neck.layers.5.weight",
            "dec1.4.weight",
        ] {
            assert!(unet.iter().any(|n| n == key), "missing {key}");
        }
        let transformer = names(&testing::model("TransformerClassifier", "layers = 1").unwrap());
        for key in [
            "encoder.layers.0.self_attn.in_proj_weight",
            "encoder.layers.0.self_attn.out_proj.bias",
            "encoder.layers.0.norm2.weight",
            "position.weight",
        ] {
            assert!(transformer.iter().any(|n| n == key), "missing {key}");
        }
        let lstm = names(&testing::model("LSTMClassifier", "layers = 2").unwrap());
        assert!(lstm.iter().any(|n| n == "lstm.bias_hh_l1"));
    }

    #[test]
    fn batch_norm_statistics_move_in_training_only() {
        let mut model = testing::model("ResNet9", "width = 4").unwrap();
        let x = Tensor::randn([4, 3, 32, 32], (Kind::Float, Device::Cpu));
        let stat = |m: &TestModel, name: &str| {
            m.variables()
                .unwrap()
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t.copy())
                .unwrap()
        };
        let before = stat(&model, "conv0_bn.running_mean");
        let eval_a = model.forward(&[&x], false).unwrap().remove(0);
        let eval_b = model.forward(&[&x], false).unwrap().remove(0);
        assert!(eval_a.equal(&eval_b), "eval mode is deterministic");
        assert!(stat(&model, "conv0_bn.running_mean").equal(&before));
        let train = model.forward(&[&x], true).unwrap().remove(0);
        assert!(!stat(&model, "conv0_bn.running_mean").equal(&before));
        assert_eq!(
            stat(&model, "conv0_bn.num_batches_tracked").int64_value(&[]),
            1
        );
        assert!(
            !train.allclose(&eval_a, 1e-6, 1e-6, false),
            "train uses batch statistics"
        );
    }

    #[test]
    fn outputs_have_the_documented_shapes() {
        let image = Tensor::rand([2, 3, 32, 32], (Kind::Float, Device::Cpu));
        for (architecture, config, shape) in [
            ("ResNet9", "width = 4", vec![2, 10]),
            ("ResNet18", "width = 4\nclasses = 7", vec![2, 7]),
            ("WideResNet", "depth = 10\nwiden_factor = 1", vec![2, 10]),
            (
                "UNet",
                "width = 2\ninput_shape = [3, 32, 32]",
                vec![2, 1, 32, 32],
            ),
        ] {
            let mut model = testing::model(architecture, config).unwrap();
            let out = model.forward(&[&image], false).unwrap().remove(0);
            assert_eq!(out.size(), shape, "{architecture}");
        }
        // Any input size: global pooling at the end.
        let mut resnet = testing::model("ResNet34", "width = 2\nin_channels = 1").unwrap();
        let odd = Tensor::rand([1, 1, 45, 61], (Kind::Float, Device::Cpu));
        assert_eq!(resnet.forward(&[&odd], false).unwrap()[0].size(), [1, 1000]);
        let tokens = Tensor::randint(64, [3, 20], (Kind::Uint8, Device::Cpu));
        for architecture in ["TransformerClassifier", "LSTMClassifier"] {
            let mut model = testing::model(architecture, "").unwrap();
            let out = model.forward(&[&tokens], true).unwrap().remove(0);
            assert_eq!(out.size(), [3, 4], "{architecture}");
        }
    }

    #[test]
    fn bad_configs_name_the_field() {
        for (architecture, config, field) in [
            ("ResNet9", "input_shape = [3, 8, 8]", "input_shape"),
            ("UNet", "input_shape = [1, 40, 40]", "input_shape"),
            ("WideResNet", "depth = 27", "depth"),
            ("ResNet50", "classes = 0", "classes"),
            ("TransformerClassifier", "d_model = 30\nheads = 4", "heads"),
            ("LSTMClassifier", "dropout = 1.5", "dropout"),
            ("ResNet18", "widht = 3", "widht"),
        ] {
            let err = testing::model(architecture, config).err().unwrap();
            assert_eq!(err.field.as_str(), field, "{architecture}: {err}");
        }
        let mut transformer = testing::model("TransformerClassifier", "max_len = 8").unwrap();
        let long = Tensor::zeros([1, 9], (Kind::Int64, Device::Cpu));
        let err = transformer.forward(&[&long], false).err().unwrap();
        assert!(err.message.contains("max_len"), "{err}");
    }
}
