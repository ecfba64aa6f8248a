//! A metric's checkpoint state when it holds several partial states.
//!
//! A checkpoint taken inside an epoch holds the metric's partial state so far. On resume the
//! metric starts from its reset state and the host keeps the saved partial; at the epoch's end
//! both are reduced together, exactly as partials of several workers are (Determined's
//! `MetricReducer` contract), so the value equals the uninterrupted run's. This needs nothing
//! new from plugins: every metric can already reduce several partials. A second checkpoint in
//! the same epoch then has two partials to keep; they are stored as one state in the layout
//! below. A single partial is stored as the metric returned it.

use fe_plugin_api::State;
use serde::{Deserialize, Serialize};

/// The JSON key that marks a state holding several partials.
const MARK: &str = "fe_host_metric_partials";

#[derive(Serialize, Deserialize)]
struct Part {
    json: String,
    tensors: Vec<String>,
}

/// The same state, sharing tensor storage.
pub fn copy(state: &State) -> State {
    State::from_parts(
        state.json_text().to_owned(),
        state
            .tensors()
            .iter()
            .map(|(name, tensor)| (name.clone(), tensor.shallow_clone()))
            .collect(),
    )
}

/// Several partial states as one: each partial's JSON under [`MARK`], its tensors renamed
/// `<index>/<name>`.
pub fn join(partials: Vec<State>) -> Result<State, String> {
    let mut parts = Vec::with_capacity(partials.len());
    let mut tensors = Vec::new();
    for (index, partial) in partials.into_iter().enumerate() {
        let (json, named) = partial.into_parts();
        let mut names = Vec::with_capacity(named.len());
        for (name, tensor) in named {
            tensors.push((format!("{index}/{name}"), tensor));
            names.push(name);
        }
        parts.push(Part {
            json,
            tensors: names,
        });
    }
    let json = serde_json::to_string(&serde_json::json!({ MARK: parts }))
        .map_err(|e| format!("cannot serialize metric partials: {e}"))?;
    Ok(State::from_parts(json, tensors))
}

/// The partial states a checkpointed metric state holds: none for an empty state, the parts
/// of a [`join`]ed one, or the state itself.
pub fn split(state: State) -> Result<Vec<State>, String> {
    if state.is_empty() {
        return Ok(Vec::new());
    }
    let parts = match serde_json::from_str::<serde_json::Value>(state.json_text()) {
        Ok(serde_json::Value::Object(mut object)) if object.len() == 1 => {
            match object.remove(MARK) {
                Some(parts) => serde_json::from_value::<Vec<Part>>(parts)
                    .map_err(|e| format!("invalid metric partials: {e}"))?,
                None => return Ok(vec![state]),
            }
        }
        _ => return Ok(vec![state]),
    };
    let (_, mut tensors) = state.into_parts();
    let mut out = Vec::with_capacity(parts.len());
    for (index, part) in parts.into_iter().enumerate() {
        let mut named = Vec::with_capacity(part.tensors.len());
        for name in part.tensors {
            let stored = format!("{index}/{name}");
            let position = tensors
                .iter()
                .position(|(n, _)| *n == stored)
                .ok_or_else(|| format!("metric partial {index} lacks its tensor `{name}`"))?;
            named.push((name, tensors.swap_remove(position).1));
        }
        out.push(State::from_parts(part.json, named));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Tensor;

    fn partial(json: &str, tensor: Option<f32>) -> State {
        let state = State::from_parts(json.to_owned(), Vec::new());
        match tensor {
            Some(v) => state.with_tensor("counts", Tensor::from_slice(&[v])),
            None => state,
        }
    }

    fn describe(states: &[State]) -> Vec<(String, Vec<(String, f64)>)> {
        states
            .iter()
            .map(|s| {
                let tensors = s
                    .tensors()
                    .iter()
                    .map(|(n, t)| (n.clone(), t.double_value(&[0])))
                    .collect();
                (s.json_text().to_owned(), tensors)
            })
            .collect()
    }

    #[test]
    fn joined_partials_split_back_into_the_same_partials() {
        let partials = vec![partial("[3,8]", Some(1.5)), partial("[1,4]", Some(-2.0))];
        let expected = describe(&partials);
        let joined = join(partials).unwrap();
        assert_eq!(describe(&split(joined).unwrap()), expected);
    }

    #[test]
    fn a_plain_partial_is_one_partial_and_an_empty_state_none() {
        let plain = partial(r#"{"correct":3}"#, None);
        assert_eq!(describe(&split(copy(&plain)).unwrap()), describe(&[plain]));
        assert!(split(State::empty()).unwrap().is_empty());
    }

    #[test]
    fn a_joined_state_missing_a_tensor_is_an_error() {
        let joined = join(vec![partial("1", Some(1.0))]).unwrap();
        let (json, _) = joined.into_parts();
        let err = split(State::from_parts(json, Vec::new())).unwrap_err();
        assert!(err.contains("lacks its tensor `counts`"), "{err}");
    }
}
