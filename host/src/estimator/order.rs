//! The order traces run in: FastEstimator's `sort_traces`, a topological sort on the keys
//! traces read and write, so a trace that needs `f1_score` runs after the one that writes it.
//! Traces without inputs (and the essentials) keep their place at the front; traces that read
//! everything (`*`, the loggers) go last, writers among them first.

use std::collections::{BTreeSet, VecDeque};

/// What the sort needs to know of a trace.
#[derive(Debug, Clone, Default)]
pub struct Deps {
    /// For messages.
    pub label: String,
    /// Keys it reads (batch keys or other traces' outputs).
    pub inputs: Vec<String>,
    /// Keys it writes.
    pub outputs: Vec<String>,
    /// Runs first whatever it reads (TrainEssential, EvalEssential).
    pub essential: bool,
    /// Reads everything logged (`*`): the loggers.
    pub reads_everything: bool,
}

/// Why traces cannot be ordered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderError {
    /// A trace reads keys nothing provides.
    Unsatisfiable {
        /// The trace.
        label: String,
        /// The keys.
        missing: Vec<String>,
    },
    /// Traces read each other's outputs.
    Cycle(Vec<String>),
}

impl std::fmt::Display for OrderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OrderError::Unsatisfiable { label, missing } => {
                write!(
                    f,
                    "{label} has unsatisfiable inputs: {}",
                    missing.join(", ")
                )
            }
            OrderError::Cycle(labels) => {
                write!(f, "dependency cycle among traces: {}", labels.join(", "))
            }
        }
    }
}

/// The indices of `traces` in the order they must run. `available`: keys provided without a
/// trace (batch keys); `None` assumes every key no trace writes is provided (the weak sort).
/// Fails naming the traces when inputs cannot be satisfied or depend on each other in a cycle.
pub fn sort_traces(
    traces: &[Deps],
    available: Option<&BTreeSet<String>>,
) -> Result<Vec<usize>, OrderError> {
    let trace_outputs: BTreeSet<&str> = traces
        .iter()
        .flat_map(|t| t.outputs.iter().map(String::as_str))
        .collect();
    let weak = available.is_none();
    let mut available: BTreeSet<String> = match available {
        Some(keys) => keys.clone(),
        None => traces
            .iter()
            .flat_map(|t| t.inputs.iter())
            .filter(|k| !trace_outputs.contains(k.as_str()))
            .cloned()
            .collect(),
    };
    let satisfied = |trace: &Deps, available: &BTreeSet<String>| {
        trace.inputs.iter().all(|k| available.contains(k))
            || (weak
                && trace
                    .inputs
                    .iter()
                    .filter(|k| !trace.outputs.contains(k) && !available.contains(*k))
                    .all(|k| !trace_outputs.contains(k.as_str())))
    };
    let mut sorted = Vec::with_capacity(traces.len());
    let mut end: VecDeque<usize> = VecDeque::new();
    let mut pending: VecDeque<usize> = VecDeque::new();
    let mut pending_outputs: BTreeSet<String> = BTreeSet::new();
    for (i, trace) in traces.iter().enumerate() {
        if trace.inputs.is_empty() && !trace.reads_everything || trace.essential {
            sorted.push(i);
            available.extend(trace.outputs.iter().cloned());
        } else if trace.reads_everything {
            if trace.outputs.is_empty() {
                end.push_back(i);
            } else {
                end.push_front(i);
            }
        } else if satisfied(trace, &available) {
            sorted.push(i);
            available.extend(trace.outputs.iter().cloned());
        } else {
            pending.push_back(i);
            pending_outputs.extend(trace.outputs.iter().cloned());
        }
    }
    let mut seen: BTreeSet<usize> = BTreeSet::new();
    while let Some(i) = pending.pop_front() {
        let trace = &traces[i];
        seen.insert(i);
        if satisfied(trace, &available) {
            sorted.push(i);
            available.extend(trace.outputs.iter().cloned());
            seen.clear();
        } else if trace
            .inputs
            .iter()
            .all(|k| available.contains(k) || pending_outputs.contains(k))
        {
            pending.push_back(i);
        } else {
            let missing = trace
                .inputs
                .iter()
                .filter(|k| !available.contains(*k) && !pending_outputs.contains(*k))
                .cloned()
                .collect();
            return Err(OrderError::Unsatisfiable {
                label: trace.label.clone(),
                missing,
            });
        }
        if !pending.is_empty() && seen.len() == pending.len() {
            let names = seen.iter().map(|&i| traces[i].label.clone()).collect();
            return Err(OrderError::Cycle(names));
        }
    }
    sorted.extend(end);
    Ok(sorted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(label: &str, inputs: &[&str], outputs: &[&str]) -> Deps {
        Deps {
            label: label.into(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
            ..Deps::default()
        }
    }

    #[test]
    fn a_trace_runs_after_the_one_writing_its_input() {
        let traces = vec![
            trace("EarlyStopping", &["f1"], &[]),
            trace("Logger", &[], &[]),
            trace("F1Score", &["y", "y_pred"], &["f1"]),
            Deps {
                reads_everything: true,
                ..trace("CSVLogger", &[], &[])
            },
            trace("BestModelSaver", &["f1"], &["since_best_f1"]),
        ];
        let order = sort_traces(&traces, None).unwrap();
        // As FastEstimator: a trace whose input is ready on the first pass keeps its place.
        assert_eq!(order, [1, 2, 4, 0, 3]);
        let batch: BTreeSet<String> = ["y", "y_pred"].iter().map(|s| s.to_string()).collect();
        assert_eq!(sort_traces(&traces, Some(&batch)).unwrap(), [1, 2, 4, 0, 3]);
    }

    #[test]
    fn a_chain_given_backwards_runs_forwards_and_independent_traces_keep_their_order() {
        let chain = vec![
            trace("C", &["b"], &["c"]),
            trace("B", &["a"], &["b"]),
            trace("A", &["x"], &["a"]),
        ];
        let batch: BTreeSet<String> = ["x"].iter().map(|s| s.to_string()).collect();
        assert_eq!(sort_traces(&chain, Some(&batch)).unwrap(), [2, 1, 0]);
        let independent = vec![
            trace("Z", &["x"], &["z"]),
            trace("M", &[], &["m"]),
            trace("A", &["x"], &["a"]),
        ];
        assert_eq!(sort_traces(&independent, Some(&batch)).unwrap(), [0, 1, 2]);
    }

    #[test]
    fn essentials_stay_first_and_writers_among_the_everything_readers_go_first() {
        let traces = vec![
            Deps {
                reads_everything: true,
                ..trace("CSVLogger", &[], &[])
            },
            Deps {
                reads_everything: true,
                ..trace("Summarizer", &[], &["summary"])
            },
            Deps {
                essential: true,
                ..trace("EvalEssential", &["ce"], &["ce"])
            },
        ];
        assert_eq!(sort_traces(&traces, None).unwrap(), [2, 1, 0]);
    }

    #[test]
    fn unsatisfiable_inputs_and_cycles_name_the_traces() {
        let batch: BTreeSet<String> = ["y"].iter().map(|s| s.to_string()).collect();
        let traces = vec![trace("Precision", &["y", "y_pred"], &["precision"])];
        let err = sort_traces(&traces, Some(&batch)).unwrap_err().to_string();
        assert_eq!(err, "Precision has unsatisfiable inputs: y_pred");
        let cycle = vec![trace("A", &["b"], &["a"]), trace("B", &["a"], &["b"])];
        let err = sort_traces(&cycle, None).unwrap_err().to_string();
        assert_eq!(err, "dependency cycle among traces: A, B");
    }
}
