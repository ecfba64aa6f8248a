//! Random values as data: `Noise`, e.g. a GAN generator's latent vector.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use serde::Deserialize;

/// Which distribution `Noise` draws from.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Normal with `mean` and `std`.
    Normal,
    /// Uniform in [`low`, `high`).
    Uniform,
}

/// `Noise` configuration.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct NoiseConfig {
    /// Shape of the values of one sample, e.g. `[100]`.
    pub shape: Vec<i64>,
    /// `normal` (default) or `uniform`.
    #[serde(default = "normal")]
    pub distribution: Distribution,
    /// Mean of the normal distribution.
    #[serde(default)]
    pub mean: f64,
    /// Standard deviation of the normal distribution.
    #[serde(default = "one")]
    pub std: f64,
    /// Lower bound of the uniform distribution.
    #[serde(default)]
    pub low: f64,
    /// Upper bound of the uniform distribution (exclusive).
    #[serde(default = "one")]
    pub high: f64,
}

fn normal() -> Distribution {
    Distribution::Normal
}

fn one() -> f64 {
    1.0
}

/// No inputs, one output: float32 random values of `shape`, drawn from the sample's seed, so
/// the same run gives the same noise whatever the number of workers.
pub struct Noise {
    config: NoiseConfig,
    count: usize,
}

impl FromConfig for Noise {
    type Config = NoiseConfig;
    fn from_config(config: NoiseConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(0), Some(1))?;
        if config.shape.is_empty() || config.shape.iter().any(|&d| d < 1) {
            return Err(Error::config(
                "shape",
                "must list one or more positive sizes",
            ));
        }
        if config.std.is_nan() || config.std < 0.0 {
            return Err(Error::config("std", "must be at least 0"));
        }
        if config.low.is_nan() || config.high.is_nan() || config.low >= config.high {
            return Err(Error::config("high", "must be greater than `low`"));
        }
        let count = config.shape.iter().product::<i64>() as usize;
        Ok(Noise { config, count })
    }
}

impl NumpyOp for Noise {
    fn forward(&self, _inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(ctx.seed);
        let c = &self.config;
        let values: Vec<f32> = match c.distribution {
            Distribution::Uniform => (0..self.count)
                .map(|_| rng.random_range(c.low..c.high) as f32)
                .collect(),
            Distribution::Normal => (0..self.count)
                .map(|_| {
                    // Box–Muller: two uniforms to one standard normal.
                    let u1: f64 = 1.0 - rng.random::<f64>();
                    let u2: f64 = rng.random::<f64>();
                    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                    (c.mean + c.std * z) as f32
                })
                .collect(),
        };
        Ok(vec![
            Tensor::from_slice(&values).f_reshape(c.shape.as_slice())?
        ])
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::testing;
    use fe_plugin_api::StepContext;

    fn draw(config: &str, seed: u64) -> fe_plugin_api::tch::Tensor {
        let op = testing::numpy_op("Noise", config, &[], &["z"]).unwrap();
        let ctx = StepContext {
            seed,
            ..StepContext::for_tests()
        };
        op.forward_with(&[], &ctx).unwrap().remove(0)
    }

    #[test]
    fn same_seed_same_noise_other_seed_other_noise() {
        let a = draw("shape = [4, 2]", 1);
        assert_eq!(a.size(), [4, 2]);
        assert!(a.equal(&draw("shape = [4, 2]", 1)));
        assert!(!a.equal(&draw("shape = [4, 2]", 2)));
    }

    #[test]
    fn moments_match_the_distribution() {
        let z = draw("shape = [20000]\nmean = 3.0\nstd = 2.0", 7);
        let mean = z.mean(fe_plugin_api::tch::Kind::Double).double_value(&[]);
        let std = z.std(true).double_value(&[]);
        assert!((mean - 3.0).abs() < 0.05, "{mean}");
        assert!((std - 2.0).abs() < 0.05, "{std}");
        let u = draw(
            "shape = [20000]\ndistribution = \"uniform\"\nlow = -1.0\nhigh = 1.0",
            7,
        );
        assert!(u.min().double_value(&[]) >= -1.0 && u.max().double_value(&[]) < 1.0);
        assert!(
            u.mean(fe_plugin_api::tch::Kind::Double)
                .double_value(&[])
                .abs()
                < 0.03
        );
    }

    #[test]
    fn config_errors() {
        assert_eq!(
            testing::numpy_op("Noise", "shape = []", &[], &["z"])
                .unwrap_err()
                .field
                .as_str(),
            "shape"
        );
        assert_eq!(
            testing::numpy_op(
                "Noise",
                "shape = [2]\nlow = 1.0\nhigh = 0.0\ndistribution = \"uniform\"",
                &[],
                &["z"]
            )
            .unwrap_err()
            .field
            .as_str(),
            "high"
        );
        assert_eq!(
            testing::numpy_op("Noise", "shape = [2]", &["x"], &["z"])
                .unwrap_err()
                .field
                .as_str(),
            "inputs"
        );
    }
}
