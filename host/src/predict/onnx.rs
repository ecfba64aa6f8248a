//! `export --format onnx`: the exported TorchScript file converted to ONNX by PyTorch's own
//! exporter, in a Python that has `torch` and `onnx` (fe-host writes no ONNX itself: libtorch
//! has no exporter, and PyTorch's is the one serving stacks are tested against). When that
//! Python also has `onnxruntime`, the ONNX model is checked against the TorchScript module.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// The environment variable naming the Python to use.
pub const PYTHON_VARIABLE: &str = "FE_HOST_PYTHON";

/// The ONNX opset written: supported by onnxruntime releases of the last years.
const OPSET: u32 = 17;

const SCRIPT: &str = include_str!("to_onnx.py");

/// What the Python must import.
const NEEDS: &str = "import torch, onnx";

/// The Python to convert with: `$FE_HOST_PYTHON` when set (and then only it), else the first
/// of `.venv/bin/python` in the current directory or one above it, `python3` and `python` on
/// PATH that imports torch and onnx. Refused with one line saying what was looked for.
pub fn find_python() -> Result<PathBuf> {
    if let Some(chosen) = std::env::var_os(PYTHON_VARIABLE).filter(|v| !v.is_empty()) {
        let chosen = PathBuf::from(chosen);
        return usable(&chosen).map(|()| chosen.clone()).map_err(|problem| {
            Error::Usage(format!(
                "--format onnx: {PYTHON_VARIABLE}={} {problem}; it needs torch and onnx (pip install onnx)",
                chosen.display()
            ))
        });
    }
    let mut candidates = Vec::new();
    if let Ok(here) = std::env::current_dir() {
        candidates.extend(here.ancestors().map(|dir| dir.join(".venv/bin/python")));
    }
    candidates.retain(|c| c.is_file());
    candidates.push(PathBuf::from("python3"));
    candidates.push(PathBuf::from("python"));
    let mut problems = Vec::new();
    for candidate in candidates {
        match usable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(problem) => problems.push(format!("{} {problem}", candidate.display())),
        }
    }
    Err(Error::Usage(format!(
        "--format onnx needs a Python with torch and onnx to convert the TorchScript export (set {PYTHON_VARIABLE}, or a .venv here or above, or python3 on PATH): {}; --format torchscript needs none",
        problems.join(", ")
    )))
}

/// `Ok` when `python` runs and imports torch and onnx; else what is wrong, briefly.
fn usable(python: &Path) -> std::result::Result<(), String> {
    let out = Command::new(python)
        .args(["-c", NEEDS])
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "is not found".to_owned(),
            _ => format!("cannot run ({e})"),
        })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.trim().lines().last().unwrap_or("failed").trim();
    Err(format!("cannot `{NEEDS}` ({last})"))
}

/// One model input as the converter needs it.
pub struct Input {
    /// The key, used as the ONNX input's name.
    pub key: String,
    /// One sample's shape (the batch axis is added, and dynamic).
    pub shape: Vec<i64>,
    /// The libtorch dtype's name (`Float`, `Int64`, `Uint8`, ...).
    pub dtype: String,
}

/// What the conversion found when it checked the ONNX model.
#[derive(Debug, serde::Deserialize)]
pub struct Checked {
    /// Whether onnxruntime was there to check it.
    pub checked: bool,
    /// The largest absolute difference from the TorchScript module, when checked.
    pub max_abs_difference: Option<f64>,
}

/// Converts the TorchScript file `torchscript` into `onnx` with `python`.
pub fn convert(
    python: &Path,
    torchscript: &Path,
    onnx: &Path,
    inputs: &[Input],
    outputs: &[String],
) -> Result<Checked> {
    let spec = serde_json::json!({
        "torchscript": torchscript,
        "onnx": onnx,
        "opset": OPSET,
        "inputs": inputs.iter().map(|i| serde_json::json!({
            "key": i.key, "shape": i.shape, "dtype": i.dtype,
        })).collect::<Vec<_>>(),
        "outputs": outputs,
    });
    let out = Command::new(python)
        .args(["-c", SCRIPT, &spec.to_string()])
        .output()
        .map_err(|e| Error::io(python, e))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.trim().lines().last().unwrap_or("failed").trim();
        return Err(Error::Run(format!(
            "{}: converting to ONNX with {} failed: {last}",
            onnx.display(),
            python.display()
        )));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.trim().lines().last().unwrap_or_default();
    serde_json::from_str(line).map_err(|e| {
        Error::Internal(format!(
            "the ONNX converter's report `{line}` is not what fe-host reads: {e}"
        ))
    })
}
