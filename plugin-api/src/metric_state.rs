//! How a metric's checkpoint state carries what the metric keeps across epochs.
//!
//! A metric crosses the boundary as an [`FfiTrace`](crate::ffi::FfiTrace), whose `state` the
//! host checkpoints and later hands back as one more partial to reduce (the contract in
//! host/src/estimator/metric_state.rs). Its [`Metric::state`](crate::Metric::state), what
//! `reset` leaves alone (a history, a best value), rides along in the same state under
//! [`MARK`]: the partial's JSON and tensors under `partial`, the kept state's under `kept`. No
//! type crosses the boundary changed, so the adapter inside each plugin is the only reader:
//! it takes the partial back out before `reduce`, and the kept state before `load_state`.
//! A metric that keeps nothing checkpoints its partial exactly as before.

use serde::{Deserialize, Serialize};

use crate::{Error, Result, State};

/// The JSON key that marks a metric state carrying a kept state.
const MARK: &str = "fe_metric_kept";

#[derive(Serialize, Deserialize)]
struct Part {
    json: String,
    tensors: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Envelope {
    partial: Part,
    kept: Part,
}

/// The checkpoint state of a metric with `partial` so far and `kept` across epochs.
pub(crate) fn wrap(partial: State, kept: State) -> Result<State> {
    if kept.is_empty() {
        return Ok(partial);
    }
    let mut tensors = Vec::new();
    let mut part = |prefix: &str, state: State| {
        let (json, named) = state.into_parts();
        let mut names = Vec::with_capacity(named.len());
        for (name, tensor) in named {
            tensors.push((format!("{prefix}/{name}"), tensor));
            names.push(name);
        }
        Part {
            json,
            tensors: names,
        }
    };
    let envelope = Envelope {
        partial: part("partial", partial),
        kept: part("kept", kept),
    };
    let json = serde_json::to_string(&serde_json::json!({ MARK: envelope }))
        .map_err(|e| Error::msg(format!("cannot serialize a metric's state: {e}")))?;
    Ok(State::from_parts(json, tensors))
}

/// The partial and kept states in a checkpointed metric state: the state itself and an
/// empty kept state when it is a bare partial (a metric that keeps nothing, or a plugin
/// built before kept states).
pub(crate) fn unwrap(state: State) -> Result<(State, State)> {
    let envelope = match serde_json::from_str::<serde_json::Value>(state.json_text()) {
        Ok(serde_json::Value::Object(mut object)) if object.len() == 1 => {
            match object.remove(MARK) {
                Some(envelope) => serde_json::from_value::<Envelope>(envelope)
                    .map_err(|e| Error::msg(format!("invalid metric state: {e}")))?,
                None => return Ok((state, State::empty())),
            }
        }
        _ => return Ok((state, State::empty())),
    };
    let (_, mut tensors) = state.into_parts();
    let mut take = |prefix: &str, part: Part| -> Result<State> {
        let mut named = Vec::with_capacity(part.tensors.len());
        for name in part.tensors {
            let stored = format!("{prefix}/{name}");
            let at = tensors
                .iter()
                .position(|(n, _)| *n == stored)
                .ok_or_else(|| Error::msg(format!("metric state lacks tensor `{stored}`")))?;
            named.push((name, tensors.swap_remove(at).1));
        }
        Ok(State::from_parts(part.json, named))
    };
    let partial = take("partial", envelope.partial)?;
    let kept = take("kept", envelope.kept)?;
    Ok((partial, kept))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Tensor;

    #[test]
    fn a_partial_and_a_kept_state_come_back_apart_with_their_tensors() {
        let partial = State::from_json(&1u32)
            .unwrap()
            .with_tensor("values", Tensor::from_slice(&[1.0f64, 2.0]));
        let kept = State::from_json(&"history")
            .unwrap()
            .with_tensor("values", Tensor::from_slice(&[3i64]));
        let (partial, kept) = unwrap(wrap(partial, kept).unwrap()).unwrap();
        assert_eq!(partial.json::<u32>().unwrap(), 1);
        assert_eq!(kept.json::<String>().unwrap(), "history");
        let values = Vec::<f64>::try_from(partial.tensor("values").unwrap()).unwrap();
        assert_eq!(values, [1.0, 2.0]);
        let kept_values = Vec::<i64>::try_from(kept.tensor("values").unwrap()).unwrap();
        assert_eq!(kept_values, [3]);
    }

    #[test]
    fn a_metric_that_keeps_nothing_checkpoints_its_bare_partial() {
        let partial = State::from_json(&[1.5f64, 2.0]).unwrap();
        let wrapped = wrap(partial, State::empty()).unwrap();
        assert_eq!(wrapped.json_text(), "[1.5,2.0]");
        let (back, kept) = unwrap(wrapped).unwrap();
        assert_eq!(back.json_text(), "[1.5,2.0]");
        assert!(kept.is_empty());
    }

    #[test]
    fn a_bare_partial_whose_json_is_an_object_is_not_mistaken_for_a_wrapped_one() {
        let partial = State::from_json(&serde_json::json!({ "sum": 3.0 })).unwrap();
        let (back, kept) = unwrap(partial).unwrap();
        assert_eq!(back.json_text(), r#"{"sum":3.0}"#);
        assert!(kept.is_empty());
    }
}
