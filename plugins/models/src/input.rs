//! What each architecture takes, checked before its first layer. A mismatch there is the
//! user's data or pipeline (channels last, no channel dimension, unscaled bytes, another
//! dataset's images), so it is said in the model's terms — what it was built for, what came,
//! and the usual fix — instead of as a libtorch shape error from inside a layer, which named
//! a shape the user never made (`expected input[1, 2, 1, 15] to have 1 channels`).

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{Error, Result};

/// The images an image model was built for: channels, and for a model whose layers depend on
/// it, one height and width; else the multiple height and width must be of.
pub(crate) struct Images {
    /// The architecture's name, as a manifest writes it.
    pub model: &'static str,
    /// The configuration field that set the shape, with its value as written.
    pub field: String,
    /// Channels of one image.
    pub channels: i64,
    /// Side lengths of one image.
    pub sides: Sides,
}

/// What an image model allows of height and width.
pub(crate) enum Sides {
    /// Any size its pooling copes with.
    Any,
    /// Exactly these (its dense layers were sized for them).
    Exactly(i64, i64),
    /// Multiples of this (its skip connections need them).
    MultipleOf(i64),
}

impl Sides {
    fn allow(&self, height: i64, width: i64) -> bool {
        match *self {
            Sides::Any => true,
            Sides::Exactly(h, w) => (height, width) == (h, w),
            Sides::MultipleOf(m) => height % m == 0 && width % m == 0,
        }
    }
}

impl Images {
    /// `Ok` for a floating-point batch `[batch, channels, height, width]` this model takes.
    pub(crate) fn check(&self, x: &Tensor) -> Result<()> {
        let shape = x.size();
        // Runs at every forward: the message is only built for a batch that is refused.
        let refuse = |problem: String, hint: &str| {
            let wanted = match self.sides {
                Sides::Exactly(h, w) => format!("[batch, {}, {h}, {w}]", self.channels),
                _ => format!("[batch, {}, height, width]", self.channels),
            };
            Err(Error::msg(format!(
                "{} ({}) takes images shaped {wanted}; {problem}{hint}",
                self.model, self.field
            )))
        };
        if shape.len() != 4 {
            let hint = if shape.len() == 3
                && self.channels == 1
                && self.sides.allow(shape[1], shape[2])
            {
                " (a channel dimension missing? ExpandDims with axis = 0 in the pipeline adds it)"
            } else {
                ""
            };
            return refuse(format!("got a batch shaped {shape:?}"), hint);
        }
        if shape[1] != self.channels {
            let hint = if shape[3] == self.channels {
                " (channels last? ChannelTranspose in the pipeline moves them first)"
            } else {
                ""
            };
            return refuse(
                format!("got {} channels in a batch shaped {shape:?}", shape[1]),
                hint,
            );
        }
        let (height, width) = (shape[2], shape[3]);
        match self.sides {
            Sides::Exactly(h, w) if (height, width) != (h, w) => {
                return refuse(
                    format!("got {height}x{width} images (batch shaped {shape:?})"),
                    " (Resize or CenterCrop in the pipeline, or the model's shape to match)",
                )
            }
            Sides::MultipleOf(m) if height % m != 0 || width % m != 0 => {
                return refuse(
                    format!(
                        "got {height}x{width} images, but height and width must be multiples of {m}"
                    ),
                    "",
                )
            }
            _ => {}
        }
        floating(self.model, x)
    }
}

/// `Ok` for a floating-point `x`: the models' weights are, and bytes straight from a file are
/// the usual way to get anything else.
pub(crate) fn floating(model: &str, x: &Tensor) -> Result<()> {
    if x.is_floating_point() {
        return Ok(());
    }
    Err(Error::msg(format!(
        "{model} takes floating-point inputs; got {:?} (shaped {:?}): scale them in the pipeline, e.g. with Minmax or Normalize",
        x.kind(),
        x.size()
    )))
}

/// `Ok` for a floating-point batch whose samples hold `features` numbers (flattened from
/// dimension 1), as a dense first layer needs.
pub(crate) fn features(model: &str, x: &Tensor, features: i64) -> Result<()> {
    let shape = x.size();
    let per_sample: i64 = shape.iter().skip(1).product();
    if shape.len() < 2 || per_sample != features {
        return Err(Error::msg(format!(
            "{model} (inputs = {features}) takes {features} features per sample, flattened from dimension 1; got a batch shaped {shape:?}{}",
            if shape.len() < 2 {
                String::new()
            } else {
                format!(" ({per_sample} per sample)")
            }
        )));
    }
    floating(model, x)
}

/// `Ok` for integer token ids below `vocab`, the rows of the model's embedding. Out of range,
/// libtorch says only "index out of range in self" (on a GPU it asserts inside a kernel,
/// which ends the process), so the first id past the vocabulary is named. The range is read
/// on the CPU only: on a GPU reading it back would wait for the device at every step.
pub(crate) fn token_ids(model: &str, tokens: &Tensor, vocab: i64) -> Result<()> {
    if tokens.is_floating_point() {
        return Err(Error::msg(format!(
            "{model} takes integer token ids; got {:?} (shaped {:?})",
            tokens.kind(),
            tokens.size()
        )));
    }
    if tokens.device() != fe_plugin_api::tch::Device::Cpu || tokens.numel() == 0 {
        return Ok(());
    }
    let (low, high) = (
        tokens.f_min()?.int64_value(&[]),
        tokens.f_max()?.int64_value(&[]),
    );
    if low < 0 || high >= vocab {
        let bad = if low < 0 { low } else { high };
        return Err(Error::msg(format!(
            "{model} (vocab = {vocab}) takes token ids from 0 to {}; got {bad}",
            vocab - 1
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe_plugin_api::tch::{Device, Kind, Tensor};

    fn lenet() -> Images {
        Images {
            model: "LeNet",
            field: "input_shape = [1, 28, 28]".into(),
            channels: 1,
            sides: Sides::Exactly(28, 28),
        }
    }

    fn message(result: Result<()>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn the_shape_it_was_built_for_passes() {
        lenet()
            .check(&Tensor::zeros([2, 1, 28, 28], (Kind::Float, Device::Cpu)))
            .unwrap();
    }

    #[test]
    fn each_mismatch_names_what_came_and_the_usual_fix() {
        let float = (Kind::Float, Device::Cpu);
        let unbatched = message(lenet().check(&Tensor::zeros([2, 28, 28], float)));
        assert!(unbatched.contains("[batch, 1, 28, 28]"), "{unbatched}");
        assert!(unbatched.contains("[2, 28, 28]"), "{unbatched}");
        assert!(unbatched.contains("ExpandDims"), "{unbatched}");

        let last = message(lenet().check(&Tensor::zeros([2, 28, 28, 1], float)));
        assert!(last.contains("got 28 channels"), "{last}");
        assert!(last.contains("ChannelTranspose"), "{last}");

        let size = message(lenet().check(&Tensor::zeros([2, 1, 32, 32], float)));
        assert!(size.contains("got 32x32 images"), "{size}");
        assert!(size.contains("input_shape = [1, 28, 28]"), "{size}");

        let bytes =
            message(lenet().check(&Tensor::zeros([2, 1, 28, 28], (Kind::Uint8, Device::Cpu))));
        assert!(
            bytes.contains("floating-point") && bytes.contains("Uint8"),
            "{bytes}"
        );
        assert!(bytes.contains("Minmax"), "{bytes}");
    }

    #[test]
    fn sides_that_must_be_multiples_are_checked_as_such() {
        let unet = Images {
            model: "UNet",
            field: "input_shape = [1, 64, 64]".into(),
            channels: 1,
            sides: Sides::MultipleOf(16),
        };
        let float = (Kind::Float, Device::Cpu);
        unet.check(&Tensor::zeros([1, 1, 32, 48], float)).unwrap();
        let odd = message(unet.check(&Tensor::zeros([1, 1, 30, 48], float)));
        assert!(odd.contains("multiples of 16"), "{odd}");
    }

    #[test]
    fn token_ids_must_be_integers_inside_the_vocabulary() {
        let ids = |v: &[i64]| Tensor::from_slice(v).reshape([1, -1]);
        token_ids("LSTMClassifier", &ids(&[0, 5, 63]), 64).unwrap();
        let high = message(token_ids("LSTMClassifier", &ids(&[0, 64]), 64));
        assert_eq!(
            high,
            "LSTMClassifier (vocab = 64) takes token ids from 0 to 63; got 64"
        );
        let low = message(token_ids("LSTMClassifier", &ids(&[-1, 3]), 64));
        assert!(low.ends_with("got -1"), "{low}");
        let float = message(token_ids(
            "LSTMClassifier",
            &Tensor::zeros([1, 2], (Kind::Float, Device::Cpu)),
            64,
        ));
        assert!(float.contains("integer token ids"), "{float}");
    }

    #[test]
    fn dense_inputs_count_features_per_sample() {
        let float = (Kind::Float, Device::Cpu);
        features("MLP", &Tensor::zeros([4, 2, 3], float), 6).unwrap();
        let wrong = message(features("MLP", &Tensor::zeros([4, 28, 28, 3], float), 784));
        assert!(
            wrong.contains("2352 per sample") && wrong.contains("inputs = 784"),
            "{wrong}"
        );
        let flat = message(features("MLP", &Tensor::zeros([784], float), 784));
        assert!(flat.contains("[784]"), "{flat}");
    }
}
