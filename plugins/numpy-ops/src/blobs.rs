//! `GaussianBlobs`: a generated classification dataset (scikit-learn's `make_blobs`), for
//! trying a manifest or a model without any data on disk.
//!
//! Sample `i` is drawn from the normal distribution around the centre of class `i % classes`;
//! centres are uniform in `[-center_box, center_box]` per feature. Everything derives from
//! `(seed, index)` alone, so any worker reads the same sample for the same index and a
//! resumed run sees the same data.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Dataset, Error, FromConfig, Result};
use serde::Deserialize;

/// `type = "GaussianBlobs"` in a `[pipeline.data.<mode>]` table.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct GaussianBlobsConfig {
    /// Number of samples.
    pub samples: u64,
    /// Features per sample (`x` has this many float32 values).
    #[serde(default = "two")]
    pub features: u32,
    /// Number of classes (`y` is an int64 in `0..classes`).
    #[serde(default = "three")]
    pub classes: u32,
    /// Standard deviation around each centre.
    #[serde(default = "one")]
    pub spread: f64,
    /// Centres lie in `[-center_box, center_box]` per feature.
    #[serde(default = "ten")]
    pub center_box: f64,
    /// Seed of the centres and the samples.
    #[serde(default)]
    pub seed: u64,
}

fn two() -> u32 {
    2
}
fn three() -> u32 {
    3
}
fn one() -> f64 {
    1.0
}
fn ten() -> f64 {
    10.0
}

/// The dataset (see the module documentation).
#[derive(Debug, Clone)]
pub struct GaussianBlobs {
    config: GaussianBlobsConfig,
    centres: Vec<Vec<f64>>,
}

/// SplitMix64: a well-mixed 64-bit value for each input (Steele, Lea & Flood, 2014).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform value in (0, 1) from `(seed, stream, n)`.
fn uniform(seed: u64, stream: u64, n: u64) -> f64 {
    let bits = mix(mix(seed ^ mix(stream)) ^ n) >> 11;
    (bits as f64 + 0.5) / (1u64 << 53) as f64
}

impl FromConfig for GaussianBlobs {
    type Config = GaussianBlobsConfig;

    fn from_config(config: GaussianBlobsConfig, _: &CreateContext<'_>) -> Result<Self> {
        if config.classes == 0 {
            return Err(Error::config("classes", "must be at least 1"));
        }
        if config.features == 0 {
            return Err(Error::config("features", "must be at least 1"));
        }
        if !(config.spread >= 0.0 && config.spread.is_finite()) {
            return Err(Error::config("spread", "must be a finite number >= 0"));
        }
        let centres = (0..u64::from(config.classes))
            .map(|class| {
                (0..u64::from(config.features))
                    .map(|f| {
                        let u = uniform(config.seed, class, f);
                        (2.0 * u - 1.0) * config.center_box
                    })
                    .collect()
            })
            .collect();
        Ok(Self { config, centres })
    }
}

impl Dataset for GaussianBlobs {
    fn len(&self) -> u64 {
        self.config.samples
    }

    fn keys(&self) -> Vec<String> {
        vec!["x".into(), "y".into()]
    }

    fn get(&self, index: u64) -> Result<Vec<Tensor>> {
        let class = index % u64::from(self.config.classes);
        // A stream per sample, far from the centres' streams.
        let stream = u64::MAX - index;
        let x: Vec<f32> = self.centres[class as usize]
            .iter()
            .enumerate()
            .map(|(f, centre)| {
                // Box-Muller: two uniforms give one standard normal.
                let (u1, u2) = (
                    uniform(self.config.seed, stream, 2 * f as u64),
                    uniform(self.config.seed, stream, 2 * f as u64 + 1),
                );
                let normal = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                (centre + self.config.spread * normal) as f32
            })
            .collect();
        Ok(vec![Tensor::from_slice(&x), Tensor::from(class as i64)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe_plugin_api::testing;

    fn blobs(config: &str) -> GaussianBlobs {
        let config = fe_plugin_api::parse_config::<GaussianBlobsConfig>(config).unwrap();
        GaussianBlobs::from_config(config, &CreateContext::detached("test")).unwrap()
    }

    #[test]
    fn samples_are_a_function_of_seed_and_index() {
        let a = blobs("samples = 10\nfeatures = 4\nseed = 3");
        let b = blobs("samples = 10\nfeatures = 4\nseed = 3");
        let c = blobs("samples = 10\nfeatures = 4\nseed = 4");
        let x = |d: &GaussianBlobs, i| Vec::<f32>::try_from(&d.get(i).unwrap()[0]).unwrap();
        assert_eq!(x(&a, 7), x(&b, 7));
        assert_ne!(x(&a, 7), x(&c, 7));
        assert_ne!(x(&a, 7), x(&a, 8));
        assert_eq!(a.get(7).unwrap()[0].size(), [4]);
        assert_eq!(a.get(7).unwrap()[1].int64_value(&[]), 1);
    }

    #[test]
    fn samples_gather_around_their_class_centre() {
        let d = blobs("samples = 3000\nclasses = 3\nspread = 0.5\nseed = 1");
        for class in 0..3u64 {
            let mean = (0..1000)
                .map(|k| Vec::<f32>::try_from(&d.get(class + 3 * k).unwrap()[0]).unwrap())
                .fold(vec![0.0f64; 2], |acc, x| {
                    acc.iter()
                        .zip(&x)
                        .map(|(a, v)| a + f64::from(*v) / 1000.0)
                        .collect()
                });
            for (m, c) in mean.iter().zip(&d.centres[class as usize]) {
                assert!(
                    (m - c).abs() < 0.1,
                    "class {class}: mean {mean:?} vs {:?}",
                    d.centres[class as usize]
                );
            }
        }
    }

    #[test]
    fn through_the_adapter_as_the_host_sees_it() {
        let d = testing::dataset("GaussianBlobs", "samples = 5\nfeatures = 3").unwrap();
        assert_eq!(
            (d.len(), d.keys()),
            (5, vec!["x".to_owned(), "y".to_owned()])
        );
        assert_eq!(d.get(4).unwrap()[0].size(), [3]);
        for (config, field) in [
            ("samples = 1\nclasses = 0", "classes"),
            ("samples = 1\nspread = -1.0", "spread"),
            ("samples = 1\ncolour = 2", "colour"),
        ] {
            let error = testing::dataset("GaussianBlobs", config).err().unwrap();
            assert!(
                error.field.as_str() == field || error.message.contains(field),
                "{field}: {error}"
            );
        }
    }
}
