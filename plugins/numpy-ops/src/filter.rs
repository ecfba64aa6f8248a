//! Filtering: `RemoveIf`, FastEstimator's sample filter with a declarative condition in place
//! of its Python lambda.
//!
//! Each input is turned into a verdict in two steps:
//!
//! 1. **reduce**: `sum`, `mean`, `min`, `max` reduce all elements to one number; `len` is the
//!    size of the first axis (Python's `len(x)`), `size` the number of elements; without
//!    `reduce` the input must hold exactly one element, which is taken as is. `any` and `all`
//!    reduce nothing: step 2 runs on every element and the verdict is whether *any* (or
//!    *all*) of the elements pass.
//! 2. **compare** the number(s) with `value`: `lt` (<), `le` (<=), `gt` (>), `ge` (>=),
//!    `eq` (==), `ne` (!=), or `isnan` (no `value`).
//!
//! With several inputs, `combine` says whether the sample goes when *any* input's verdict is
//! true (the default) or only when *all* are. Arithmetic is in float64, as in NumPy for
//! integer data (integers beyond 2^53 are rounded).

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use serde::Deserialize;

use crate::common::real_kind;

/// How `RemoveIf` turns each input into the number(s) it compares.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Reduce {
    /// The sum of the elements (0 for an empty input).
    Sum,
    /// The mean of the elements (NaN for an empty input).
    Mean,
    /// The smallest element (an empty input is an error).
    Min,
    /// The largest element (an empty input is an error).
    Max,
    /// Compare every element; true when any passes (false for an empty input).
    Any,
    /// Compare every element; true when all pass (true for an empty input).
    All,
    /// The size of the first axis (a 0-d input is an error).
    Len,
    /// The number of elements.
    Size,
}

/// The comparison `RemoveIf` applies, with `value` on the right.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Compare {
    /// `x < value`.
    Lt,
    /// `x <= value`.
    Le,
    /// `x > value`.
    Gt,
    /// `x >= value`.
    Ge,
    /// `x == value`.
    Eq,
    /// `x != value`.
    Ne,
    /// `x` is NaN (takes no `value`).
    Isnan,
}

/// How the verdicts of several inputs combine.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Combine {
    /// Remove the sample when any input's verdict is true.
    #[default]
    Any,
    /// Remove the sample only when every input's verdict is true.
    All,
}

/// `RemoveIf` configuration: remove the sample when `compare(reduce(input), value)` holds.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct RemoveIfConfig {
    /// `sum`, `mean`, `min`, `max`, `any`, `all`, `len` or `size` (see the module docs).
    /// Absent: each input must hold exactly one element (a label, say).
    #[serde(default)]
    pub reduce: Option<Reduce>,
    /// `lt`, `le`, `gt`, `ge`, `eq`, `ne` or `isnan`. Required.
    pub compare: Compare,
    /// The number on the right of the comparison. Required, except with `isnan` (which
    /// takes none).
    #[serde(default)]
    pub value: Option<f64>,
    /// With several inputs: `any` (default) removes the sample when any input's condition
    /// holds, `all` only when all of them hold.
    #[serde(default)]
    pub combine: Combine,
}

/// FastEstimator's `RemoveIf`: a filtering op that drops the samples its condition selects.
/// It writes nothing (`outputs` must be empty).
#[derive(Debug)]
pub struct RemoveIf {
    reduce: Option<Reduce>,
    compare: Compare,
    value: f64,
    combine: Combine,
}

impl FromConfig for RemoveIf {
    type Config = RemoveIfConfig;
    fn from_config(config: RemoveIfConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(None, Some(0))?;
        if ctx.inputs.is_empty() {
            return Err(Error::config(
                "inputs",
                "RemoveIf needs at least one input key to test",
            ));
        }
        let value = match (config.compare, config.value) {
            (Compare::Isnan, None) => f64::NAN,
            (Compare::Isnan, Some(_)) => {
                return Err(Error::config("value", "`isnan` compares with no value"))
            }
            (_, Some(value)) => value,
            (compare, None) => {
                return Err(Error::config(
                    "value",
                    format!("`{compare:?}` needs a value to compare with").to_lowercase(),
                ))
            }
        };
        Ok(RemoveIf {
            reduce: config.reduce,
            compare: config.compare,
            value,
            combine: config.combine,
        })
    }
}

impl RemoveIf {
    /// The number(s) to compare: a 0-d tensor, or every element for `any`/`all`.
    fn operand(&self, x: &Tensor) -> Result<Tensor> {
        real_kind(x, "RemoveIf")?;
        let numel = x.numel();
        let empty = |what: &str| {
            Error::msg(format!(
                "RemoveIf cannot take the {what} of an empty input (shape {:?})",
                x.size()
            ))
        };
        let double = || x.f_to_kind(Kind::Double);
        Ok(match self.reduce {
            None if numel == 1 => double()?.f_reshape([])?,
            None => {
                return Err(Error::msg(format!(
                    "RemoveIf without `reduce` needs single-element inputs, got shape {:?}: \
                     set `reduce` (sum, mean, min, max, any, all, len or size)",
                    x.size()
                )))
            }
            Some(Reduce::Sum) => double()?.f_sum(Kind::Double)?,
            Some(Reduce::Mean) => double()?.f_mean(Kind::Double)?,
            Some(Reduce::Min) if numel == 0 => return Err(empty("min")),
            Some(Reduce::Min) => double()?.f_min()?,
            Some(Reduce::Max) if numel == 0 => return Err(empty("max")),
            Some(Reduce::Max) => double()?.f_max()?,
            Some(Reduce::Any | Reduce::All) => double()?,
            Some(Reduce::Len) => {
                match x.size().first() {
                    Some(&len) => Tensor::from(len as f64),
                    None => return Err(Error::msg(
                        "RemoveIf cannot take the len of a 0-d input (use `size` or no `reduce`)",
                    )),
                }
            }
            Some(Reduce::Size) => Tensor::from(numel as f64),
        })
    }

    /// Whether the condition holds for one input.
    fn holds(&self, x: &Tensor) -> Result<bool> {
        let operand = self.operand(x)?;
        let v = self.value;
        let hits = match self.compare {
            Compare::Lt => operand.f_lt(v)?,
            Compare::Le => operand.f_le(v)?,
            Compare::Gt => operand.f_gt(v)?,
            Compare::Ge => operand.f_ge(v)?,
            Compare::Eq => operand.f_eq(v)?,
            Compare::Ne => operand.f_ne(v)?,
            Compare::Isnan => operand.f_isnan()?,
        };
        let verdict = if self.reduce == Some(Reduce::All) {
            hits.f_all()?
        } else {
            hits.f_any()?
        };
        Ok(verdict.f_int64_value(&[])? != 0)
    }
}

impl NumpyOp for RemoveIf {
    /// A filter writes nothing: the host calls [`NumpyOp::remove`] instead.
    fn forward(&self, _inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        Ok(Vec::new())
    }

    fn is_filter(&self) -> bool {
        true
    }

    fn remove(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<bool> {
        if inputs.is_empty() {
            return Err(Error::msg("RemoveIf was given no inputs"));
        }
        // Every input is evaluated, so an unusable input is reported whatever the others say.
        let verdicts = inputs
            .iter()
            .map(|x| self.holds(x))
            .collect::<Result<Vec<bool>>>()?;
        Ok(match self.combine {
            Combine::Any => verdicts.iter().any(|&v| v),
            Combine::All => verdicts.iter().all(|&v| v),
        })
    }
}

#[cfg(test)]
mod tests;
