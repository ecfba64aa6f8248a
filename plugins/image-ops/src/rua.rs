//! `RUA`: FastEstimator's RandAugment variant (`fe.op.numpyop.univariate.RUA`). Per call it
//! applies `N` augmentations, each picked uniformly (with repetition) from `choices`, where
//! `level` (0..=30) sets both how many and how strong: `m = level / 30` narrows every
//! augmentation's range to `m` times its extent about its middle (`set_rua_level`), and
//! `N = level (min(#choices, 5) - 1) / 30 + 1` ops run: `int(N)` always and one more with
//! probability `N % 1`.
//!
//! RUA's `Rotate`, `Equalize`, `AutoContrast`, `Posterize` and `Solarize` are FastEstimator's
//! PIL / RUA-specific ones, not the albumentations ops of the same names this plugin also
//! registers; they live here and are reachable only through RUA.

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::color::uniform;
use crate::enhance::{apply_all, PilTransform};
use crate::layout::{paired_keys, rng};
use crate::pil::{self, Raster};
use crate::pil_geometry;

/// An augmentation RUA can choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Aug {
    /// PIL `Image.rotate` (nearest, black corners) by `U(-90 m, 90 m)` degrees.
    Rotate,
    Identity,
    /// PIL `ImageOps.autocontrast`.
    AutoContrast,
    /// PIL `ImageOps.equalize`.
    Equalize,
    /// Keeps `randint(round(8 - 7 m), 8)` high bits.
    Posterize,
    /// Inverts values `>= 256 - round(U(0, 256 m))`.
    Solarize,
    /// One of the `enhance.rs` ops at RUA's default range.
    Pil(PilTransform),
}

/// FastEstimator's default list, in its order, with each op's range before `set_rua_level`.
const DEFAULTS: [(&str, Aug, f64); 14] = [
    ("Rotate", Aug::Rotate, 90.0),
    ("Identity", Aug::Identity, 0.0),
    ("AutoContrast", Aug::AutoContrast, 0.0),
    ("Equalize", Aug::Equalize, 0.0),
    ("Posterize", Aug::Posterize, 7.0),
    ("Solarize", Aug::Solarize, 256.0),
    ("Sharpness", Aug::Pil(PilTransform::Sharpness), 0.9),
    ("Contrast", Aug::Pil(PilTransform::Contrast), 0.9),
    ("Color", Aug::Pil(PilTransform::Color), 0.9),
    ("Brightness", Aug::Pil(PilTransform::Brightness), 0.9),
    ("ShearX", Aug::Pil(PilTransform::ShearX), 0.5),
    ("ShearY", Aug::Pil(PilTransform::ShearY), 0.5),
    ("TranslateX", Aug::Pil(PilTransform::TranslateX), 0.33),
    ("TranslateY", Aug::Pil(PilTransform::TranslateY), 0.33),
];

/// Names of the default augmentations, for error messages.
fn names() -> String {
    DEFAULTS.map(|(n, _, _)| n).join(", ")
}

/// `choices`: one name or a list of them.
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum Choices {
    /// A single entry, e.g. `"defaults"`.
    One(String),
    /// Several entries: names to use, or `"!Name"`s to leave out of the defaults.
    Many(Vec<String>),
}

fn defaults() -> Choices {
    Choices::One("defaults".to_owned())
}

fn eighteen() -> f64 {
    18.0
}

/// `RUA` configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct RuaConfig {
    /// `"defaults"` (all 14), a list of names to use (e.g. `["Rotate", "Color"]`), or a list
    /// of `"!Name"`s to leave out of the defaults; names and negations do not mix.
    #[serde(default = "defaults")]
    pub choices: Choices,
    /// Strength, 0 to 30 (default 18): magnitude `level / 30` and the number of ops per call.
    #[serde(default = "eighteen")]
    pub level: f64,
}

/// FastEstimator's `_parse_aug_choices` on names: the chosen entries of [`DEFAULTS`].
fn parse_choices(choices: &Choices) -> Result<Vec<(&'static str, Aug, f64)>> {
    let list = match choices {
        Choices::One(name) => std::slice::from_ref(name),
        Choices::Many(list) => list.as_slice(),
    };
    let err = |msg: String| Error::config("choices", msg);
    let find = |name: &str| {
        DEFAULTS
            .iter()
            .find(|(n, _, _)| *n == name)
            .copied()
            .ok_or_else(|| {
                err(format!(
                    "unknown augmentation `{name}` (known: {})",
                    names()
                ))
            })
    };
    let remove: Vec<&str> = list.iter().filter_map(|n| n.strip_prefix('!')).collect();
    let add: Vec<&String> = list
        .iter()
        .filter(|n| !n.starts_with('!') && *n != "defaults")
        .collect();
    let with_defaults = list.iter().any(|n| n == "defaults");
    let chosen = if !remove.is_empty() {
        if !add.is_empty() {
            return Err(err(format!(
                "takes names to add or `!Name`s to remove, not both; got {add:?} and {remove:?}"
            )));
        }
        if with_defaults {
            return Err(err(
                "`!Name`s remove from the defaults already; drop \"defaults\"".to_owned(),
            ));
        }
        for name in &remove {
            find(name)?;
        }
        DEFAULTS
            .into_iter()
            .filter(|(n, _, _)| !remove.contains(n))
            .collect()
    } else if with_defaults {
        if !add.is_empty() {
            return Err(err(format!(
                "\"defaults\" already holds {add:?}; pass either \"defaults\" or names"
            )));
        }
        DEFAULTS.to_vec()
    } else {
        let mut chosen = Vec::new();
        for (i, name) in add.iter().enumerate() {
            // FastEstimator would narrow a repeated op's range twice; refuse instead.
            if add[..i].contains(name) {
                return Err(err(format!("`{name}` is listed twice")));
            }
            chosen.push(find(name)?);
        }
        chosen
    };
    if chosen.is_empty() {
        return Err(err("selects no augmentation".to_owned()));
    }
    Ok(chosen)
}

/// Python's `round`: half to even.
fn round(v: f64) -> f64 {
    v.round_ties_even()
}

/// One augmentation with its range after `set_rua_level(m)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Choice {
    pub name: &'static str,
    pub aug: Aug,
    /// What the op draws from: degrees, bits (integers, both ends included), the Solarize
    /// threshold's `U(0, t)` bounds, or the `enhance.rs` value's uniform bounds.
    pub range: [f64; 2],
}

impl Choice {
    fn new((name, aug, limit): (&'static str, Aug, f64), m: f64) -> Choice {
        // `param_to_range(l)` narrowed about its middle: `(mid - m ext, mid + m ext)`.
        let narrowed = |[lo, hi]: [f64; 2]| {
            let (mid, extent) = ((hi + lo) / 2.0, m * ((hi - lo) / 2.0));
            [mid - extent, mid + extent]
        };
        let range = match aug {
            Aug::Identity | Aug::AutoContrast | Aug::Equalize => [0.0, 0.0],
            Aug::Posterize => [round(8.0 - m * limit), 8.0],
            Aug::Solarize => [0.0, m * limit],
            Aug::Rotate | Aug::Pil(_) => narrowed([-limit, limit]),
        };
        Choice { name, aug, range }
    }

    /// The op's own draw (FastEstimator's `forward`), after RUA picked it.
    fn draw(&self, rng: &mut ChaCha8Rng) -> f64 {
        match self.aug {
            Aug::Identity | Aug::AutoContrast | Aug::Equalize => 0.0,
            Aug::Posterize => rng.random_range(self.range[0] as i64..=self.range[1] as i64) as f64,
            Aug::Solarize => 256.0 - round(uniform(rng, self.range)),
            Aug::Rotate => uniform(rng, self.range),
            Aug::Pil(t) => t.base() + uniform(rng, self.range),
        }
    }
}

/// One augmentation of a call and the value it drew.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Step {
    pub choice: Choice,
    /// Degrees, bits, the Solarize threshold, or the `enhance.rs` value.
    pub value: f64,
}

impl Step {
    /// `img` after this step.
    pub(crate) fn apply(&self, img: &Raster) -> Raster {
        let v = self.value;
        match self.choice.aug {
            Aug::Identity => img.clone(),
            Aug::Rotate => pil_geometry::rotate(img, v),
            Aug::AutoContrast => pil::autocontrast(img),
            Aug::Equalize => pil::equalize(img),
            Aug::Posterize => {
                let keep = 255 - ((1u16 << (8 - v as u16)) - 1) as u8;
                map(img, |p| p & keep)
            }
            Aug::Solarize => map(img, |p| if f64::from(p) < v { p } else { 255 - p }),
            Aug::Pil(t) => t.apply(img, v),
        }
    }
}

fn map(img: &Raster, f: impl Fn(u8) -> u8) -> Raster {
    let data = img.data.iter().map(|&p| f(p)).collect();
    Raster { data, ..*img }
}

/// FastEstimator's RandAugment.
pub struct RUA {
    keys: Vec<String>,
    choices: Vec<Choice>,
    /// `int(N)`: ops every call applies.
    guaranteed: usize,
    /// `N % 1`: probability of one more.
    extra: f64,
}

impl FromConfig for RUA {
    type Config = RuaConfig;
    fn from_config(config: RuaConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        let level = config.level;
        if !(0.0..=30.0).contains(&level) {
            return Err(Error::config(
                "level",
                format!("must be in [0, 30], got {level}"),
            ));
        }
        let m = level / 30.0;
        let choices: Vec<Choice> = parse_choices(&config.choices)?
            .into_iter()
            .map(|entry| Choice::new(entry, m))
            .collect();
        let n_max = choices.len().min(5) as f64;
        let n = level * (n_max - 1.0) / 30.0 + 1.0;
        Ok(RUA {
            keys: paired_keys(ctx)?,
            choices,
            guaranteed: n.trunc() as usize,
            extra: n % 1.0,
        })
    }
}

impl RUA {
    /// The augmentations (with their ranges) RUA picks from.
    #[cfg(test)]
    pub(crate) fn choices(&self) -> &[Choice] {
        &self.choices
    }

    /// `int(N)` and `N % 1`.
    #[cfg(test)]
    pub(crate) fn count(&self) -> (usize, f64) {
        (self.guaranteed, self.extra)
    }

    /// The steps of the call seeded `seed`, in order. Draws: for each guaranteed op the pick
    /// then the op's value; then, when `N % 1 > 0`, the extra op's coin, pick and value.
    pub(crate) fn plan(&self, seed: u64) -> Vec<Step> {
        let mut rng = rng(seed);
        let pick = |rng: &mut ChaCha8Rng| {
            let choice = self.choices[rng.random_range(0..self.choices.len())];
            Step {
                choice,
                value: choice.draw(rng),
            }
        };
        let mut steps: Vec<Step> = (0..self.guaranteed).map(|_| pick(&mut rng)).collect();
        if self.extra > 0.0 && self.extra > rng.random::<f64>() {
            steps.push(pick(&mut rng));
        }
        steps
    }
}

impl NumpyOp for RUA {
    fn forward(&self, inputs: &[&Tensor], ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let steps = self.plan(ctx.seed);
        apply_all(&self.keys, inputs, |img| {
            steps.iter().fold(img.clone(), |acc, step| step.apply(&acc))
        })
    }
}
