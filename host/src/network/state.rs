//! What the network's components carry from one step to the next, for checkpoints: plugin
//! state, `UpdateOp`'s gradient accumulation, and the same for ops wrapped in meta ops (kept
//! under `children`, so one checkpoint entry covers an op and everything it wraps).

use fe_plugin_api::State;
use serde_json::{json, Value};
use tch::Tensor;

use super::node::{OpKind, OpNode};

impl OpNode {
    /// The op's state, its wrapped ops' included.
    pub fn state(&self) -> Result<State, String> {
        let (own, mut tensors): (Value, Vec<(String, Tensor)>) = match &self.kind {
            OpKind::Plugin(handle) => {
                let (json, tensors) = handle.state().map_err(|e| e.to_string())?.into_parts();
                let json = if json.is_empty() {
                    Value::Null
                } else {
                    serde_json::from_str(&json).map_err(|e| {
                        format!("{} returned state that is not JSON: {e}", self.label)
                    })?
                };
                (json, tensors)
            }
            OpKind::Update(update) => {
                let mut tensors: Vec<(String, tch::Tensor)> = update
                    .grad_sum
                    .iter()
                    .enumerate()
                    .map(|(i, t)| (format!("grad_sum/{i}"), t.shallow_clone()))
                    .collect();
                if let Some(flag) = &update.found_inf_sum {
                    tensors.push(("found_inf_sum".to_owned(), flag.shallow_clone()));
                }
                (
                    json!({ "calls": update.calls, "grad_sum": update.grad_sum.len() }),
                    tensors,
                )
            }
            _ => (Value::Null, Vec::new()),
        };
        let mut children = Vec::new();
        if let OpKind::Meta(meta) = &self.kind {
            for (i, child) in meta.children().into_iter().enumerate() {
                let (json, child_tensors) = child.state()?.into_parts();
                children.push(if json.is_empty() {
                    Value::Null
                } else {
                    serde_json::from_str(&json).map_err(|e| e.to_string())?
                });
                tensors.extend(
                    child_tensors
                        .into_iter()
                        .map(|(name, t)| (format!("children/{i}/{name}"), t)),
                );
            }
        }
        let json = if own.is_null() && children.iter().all(Value::is_null) {
            if tensors.is_empty() {
                return Ok(State::empty());
            }
            Value::Null
        } else if children.is_empty() {
            own
        } else {
            json!({ "own": own, "children": children })
        };
        let text = if json.is_null() {
            String::new()
        } else {
            json.to_string()
        };
        Ok(State::from_parts(text, tensors))
    }

    /// Restores what [`OpNode::state`] returned.
    pub fn load_state(&mut self, state: State) -> Result<(), String> {
        let (text, tensors) = state.into_parts();
        let json: Value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).map_err(|e| format!("invalid state JSON: {e}"))?
        };
        let is_meta = matches!(self.kind, OpKind::Meta(_));
        let (own, children) = if is_meta {
            (
                json["own"].clone(),
                json["children"].as_array().cloned().unwrap_or_default(),
            )
        } else {
            (json, Vec::new())
        };
        let (mut own_tensors, mut child_tensors): (Vec<_>, Vec<_>) = tensors
            .into_iter()
            .partition(|(name, _)| !name.starts_with("children/"));
        match &mut self.kind {
            OpKind::Plugin(handle) => {
                let text = if own.is_null() {
                    String::new()
                } else {
                    own.to_string()
                };
                handle
                    .load_state(State::from_parts(text, own_tensors))
                    .map_err(|e| e.to_string())?;
            }
            OpKind::Update(update) => {
                update.calls = own["calls"].as_u64().unwrap_or(0);
                let count = own["grad_sum"].as_u64().unwrap_or(0) as usize;
                let mut grad_sum = Vec::with_capacity(count);
                for i in 0..count {
                    let name = format!("grad_sum/{i}");
                    let position = own_tensors
                        .iter()
                        .position(|(n, _)| *n == name)
                        .ok_or_else(|| format!("UpdateOp state lacks `{name}`"))?;
                    grad_sum.push(own_tensors.swap_remove(position).1);
                }
                update.grad_sum = grad_sum;
                update.found_inf_sum = own_tensors
                    .iter()
                    .position(|(n, _)| n == "found_inf_sum")
                    .map(|position| own_tensors.swap_remove(position).1);
            }
            OpKind::Meta(meta) => {
                for (i, child) in meta.children_mut().into_iter().enumerate() {
                    let prefix = format!("children/{i}/");
                    let (mine, rest): (Vec<_>, Vec<_>) = child_tensors
                        .into_iter()
                        .partition(|(name, _)| name.starts_with(&prefix));
                    child_tensors = rest;
                    let mine = mine
                        .into_iter()
                        .map(|(name, t)| (name[prefix.len()..].to_owned(), t))
                        .collect();
                    let text = match children.get(i) {
                        Some(Value::Null) | None => String::new(),
                        Some(v) => v.to_string(),
                    };
                    child.load_state(State::from_parts(text, mine))?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}
