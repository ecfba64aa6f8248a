//! Checks saved per-parameter optimizer state against the parameters it is loaded for, before
//! any of it is kept: the fused Adam kernel trusts every moment to have its parameter's shape
//! and dtype (a half-sized one made it write out of bounds, a segfault), a missing moment was
//! silently restarted from zero, and one of another dtype failed a step later.

use tch::Tensor;

/// The parameters an optimizer's saved state is loaded for, named for error messages.
pub struct Parameters<'a> {
    /// The model they belong to.
    pub model: &'a str,
    /// Their names, in the order of `tensors`.
    pub names: &'a [String],
    /// The parameters themselves: the order state tensor `<kind>/<index>` refers to.
    pub tensors: &'a [Tensor],
}

impl Parameters<'_> {
    fn describe(&self, index: usize) -> String {
        match self.names.get(index) {
            Some(name) => format!("parameter {index} of model `{}` (`{name}`)", self.model),
            None => format!("parameter {index} of model `{}`", self.model),
        }
    }
}

/// Checks `saved` (tensors named `<kind>/<parameter index>`) for an optimizer that keeps the
/// state `kinds` for each parameter it has updated: nothing else is there, a parameter has
/// either all of its state or none (one no gradient ever reached), and every tensor has the
/// dtype and shape of its parameter. The error names the tensor and what differs.
pub fn check(
    kinds: &[&str],
    params: &Parameters<'_>,
    saved: &[(String, Tensor)],
) -> Result<(), String> {
    let count = params.tensors.len();
    let mut touched = vec![false; count];
    for (name, tensor) in saved {
        let index = name
            .rsplit_once('/')
            .filter(|(kind, _)| kinds.contains(kind))
            .and_then(|(_, index)| index.parse::<usize>().ok())
            .ok_or_else(|| unexpected(name, kinds))?;
        let Some(param) = params.tensors.get(index) else {
            return Err(match count {
                0 => format!(
                    "has `{name}`, but model `{}` has no parameters",
                    params.model
                ),
                _ => format!(
                    "has `{name}`, but model `{}` has {count} parameters (0 to {})",
                    params.model,
                    count - 1
                ),
            });
        };
        if tensor.kind() != param.kind() || tensor.size() != param.size() {
            return Err(format!(
                "`{name}` is {:?} {:?} but {} is {:?} {:?}",
                tensor.kind(),
                tensor.size(),
                params.describe(index),
                param.kind(),
                param.size()
            ));
        }
        touched[index] = true;
    }
    for (index, _) in touched.iter().enumerate().filter(|(_, t)| **t) {
        for kind in kinds {
            let wanted = format!("{kind}/{index}");
            if !saved.iter().any(|(name, _)| *name == wanted) {
                return Err(format!(
                    "is missing `{wanted}` for {}, whose other optimizer state is there",
                    params.describe(index)
                ));
            }
        }
    }
    Ok(())
}

fn unexpected(name: &str, kinds: &[&str]) -> String {
    if kinds.is_empty() {
        format!("has `{name}`, but this optimizer keeps no per-parameter state")
    } else {
        format!(
            "has `{name}`, which is no state of this optimizer (it keeps {} per parameter, named `<kind>/<parameter index>`)",
            kinds.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    fn zeros(shape: &[i64], kind: Kind) -> Tensor {
        Tensor::zeros(shape, (kind, Device::Cpu))
    }

    fn check_against(saved: Vec<(&str, Tensor)>) -> Result<(), String> {
        let names = vec!["fc.weight".to_owned(), "fc.bias".to_owned()];
        let tensors = vec![zeros(&[10, 4], Kind::Float), zeros(&[10], Kind::Float)];
        let params = Parameters {
            model: "net",
            names: &names,
            tensors: &tensors,
        };
        let saved: Vec<(String, Tensor)> =
            saved.into_iter().map(|(n, t)| (n.to_owned(), t)).collect();
        check(&["exp_avg", "exp_avg_sq"], &params, &saved)
    }

    #[test]
    fn matching_state_and_untouched_parameters_pass() {
        let full = vec![
            ("exp_avg/0", zeros(&[10, 4], Kind::Float)),
            ("exp_avg_sq/0", zeros(&[10, 4], Kind::Float)),
            ("exp_avg/1", zeros(&[10], Kind::Float)),
            ("exp_avg_sq/1", zeros(&[10], Kind::Float)),
        ];
        assert_eq!(check_against(full), Ok(()));
        // Parameter 1 never had a gradient: no state at all is what the optimizer saves.
        let partial = vec![
            ("exp_avg/0", zeros(&[10, 4], Kind::Float)),
            ("exp_avg_sq/0", zeros(&[10, 4], Kind::Float)),
        ];
        assert_eq!(check_against(partial), Ok(()));
        assert_eq!(check_against(Vec::new()), Ok(()));
    }

    #[test]
    fn shape_and_dtype_name_the_tensor_and_its_parameter() {
        let err = check_against(vec![("exp_avg_sq/1", zeros(&[5], Kind::Float))]).unwrap_err();
        assert_eq!(
            err,
            "`exp_avg_sq/1` is Float [5] but parameter 1 of model `net` (`fc.bias`) is Float [10]"
        );
        let err = check_against(vec![("exp_avg/0", zeros(&[10, 4], Kind::Double))]).unwrap_err();
        assert_eq!(
            err,
            "`exp_avg/0` is Double [10, 4] but parameter 0 of model `net` (`fc.weight`) is Float [10, 4]"
        );
    }

    #[test]
    fn missing_and_extra_tensors_are_named() {
        let err = check_against(vec![("exp_avg/1", zeros(&[10], Kind::Float))]).unwrap_err();
        assert_eq!(
            err,
            "is missing `exp_avg_sq/1` for parameter 1 of model `net` (`fc.bias`), whose other optimizer state is there"
        );
        let err = check_against(vec![("momentum/0", zeros(&[10, 4], Kind::Float))]).unwrap_err();
        assert_eq!(
            err,
            "has `momentum/0`, which is no state of this optimizer (it keeps exp_avg, exp_avg_sq per parameter, named `<kind>/<parameter index>`)"
        );
        let err = check_against(vec![("exp_avg/2", zeros(&[10], Kind::Float))]).unwrap_err();
        assert_eq!(
            err,
            "has `exp_avg/2`, but model `net` has 2 parameters (0 to 1)"
        );
        let err = check_against(vec![("exp_avg/x", zeros(&[10], Kind::Float))]).unwrap_err();
        assert!(
            err.starts_with("has `exp_avg/x`, which is no state"),
            "{err}"
        );
    }
}
