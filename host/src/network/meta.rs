//! Meta ops (FastEstimator's `Sometimes`, `OneOf`, `Repeat`, `Fuse`): they wrap other ops and
//! run them on the same step data, so they need no key plumbing of their own.

use serde::Deserialize;

use super::node::OpNode;

/// A condition on a key's value, for `Repeat`'s `while` (the manifest cannot hold a lambda).
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    /// The key whose value is tested.
    pub key: String,
    /// How the tensor becomes one number: sum, mean, min, max (default), any, all.
    #[serde(default = "max")]
    pub reduce: String,
    /// lt, le, gt, ge, eq or ne.
    pub compare: String,
    /// The number compared with.
    pub value: f64,
}

fn max() -> String {
    "max".to_owned()
}

impl Condition {
    /// Checks the operator names.
    pub fn validate(&self) -> Result<(), String> {
        if !["sum", "mean", "min", "max", "any", "all"].contains(&self.reduce.as_str()) {
            return Err(format!(
                "reduce `{}` is not one of sum, mean, min, max, any, all",
                self.reduce
            ));
        }
        if !["lt", "le", "gt", "ge", "eq", "ne"].contains(&self.compare.as_str()) {
            return Err(format!(
                "compare `{}` is not one of lt, le, gt, ge, eq, ne",
                self.compare
            ));
        }
        Ok(())
    }

    /// Evaluates the condition on `value`.
    pub fn holds(&self, value: &tch::Tensor) -> Result<bool, tch::TchError> {
        let v = value.f_to_kind(tch::Kind::Double)?;
        let reduced = match self.reduce.as_str() {
            "sum" => v.f_sum(tch::Kind::Double)?,
            "mean" => v.f_mean(tch::Kind::Double)?,
            "min" => v.f_min()?,
            "any" => v.f_ne(0.0)?.f_any()?.f_to_kind(tch::Kind::Double)?,
            "all" => v.f_ne(0.0)?.f_all()?.f_to_kind(tch::Kind::Double)?,
            _ => v.f_max()?,
        }
        .double_value(&[]);
        Ok(match self.compare.as_str() {
            "lt" => reduced < self.value,
            "le" => reduced <= self.value,
            "gt" => reduced > self.value,
            "ge" => reduced >= self.value,
            "eq" => reduced == self.value,
            _ => reduced != self.value,
        })
    }
}

/// A meta op.
pub enum MetaOp {
    /// Runs `op` with probability `prob`; otherwise its outputs keep their current values.
    Sometimes {
        /// Probability of running.
        prob: f64,
        /// The wrapped op.
        op: Box<OpNode>,
    },
    /// Runs one of `ops`, chosen uniformly.
    OneOf {
        /// The alternatives (same inputs and outputs).
        ops: Vec<OpNode>,
    },
    /// Runs `op` `times` times, or while `condition` holds (at least once, at most `max_iter`).
    Repeat {
        /// The wrapped op.
        op: Box<OpNode>,
        /// Fixed repetitions.
        times: u32,
        /// Keep repeating while this holds.
        condition: Option<(crate::batch::KeyId, Condition)>,
        /// Upper bound with a condition.
        max_iter: Option<u32>,
    },
    /// Runs `ops` in order as one op.
    Fuse {
        /// The fused ops.
        ops: Vec<OpNode>,
    },
}

impl MetaOp {
    /// The wrapped ops.
    pub fn children(&self) -> Vec<&OpNode> {
        match self {
            MetaOp::Sometimes { op, .. } | MetaOp::Repeat { op, .. } => vec![op],
            MetaOp::OneOf { ops } | MetaOp::Fuse { ops } => ops.iter().collect(),
        }
    }

    /// The wrapped ops, mutably.
    pub fn children_mut(&mut self) -> Vec<&mut OpNode> {
        match self {
            MetaOp::Sometimes { op, .. } | MetaOp::Repeat { op, .. } => vec![op],
            MetaOp::OneOf { ops } | MetaOp::Fuse { ops } => ops.iter_mut().collect(),
        }
    }
}
