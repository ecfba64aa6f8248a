//! Writing predictions: CSV (every value, or the top-k classes with their scores), NPY (one
//! array) or safetensors (every key). The text and header layouts are pure functions.

use std::path::Path;

use tch::{Kind, Tensor};

use crate::error::{Error, Result};

/// An output format, from the file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// One row per sample.
    Csv,
    /// One array.
    Npy,
    /// Every key by name.
    Safetensors,
}

impl OutputFormat {
    /// The format of `path`, from its extension.
    pub fn of(path: &Path) -> Result<Self> {
        let extension = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        match extension.as_str() {
            "csv" => Ok(OutputFormat::Csv),
            "npy" => Ok(OutputFormat::Npy),
            "safetensors" => Ok(OutputFormat::Safetensors),
            _ => Err(Error::Usage(format!(
                "--out {}: write predictions to a .csv, .npy or .safetensors file",
                path.display()
            ))),
        }
    }
}

/// Writes `columns` (key, values joined over samples) to `path` in `format`; `top_k` turns a
/// CSV of class scores into the k best classes per sample.
pub fn write(
    path: &Path,
    format: OutputFormat,
    columns: &[(String, Tensor)],
    top_k: Option<usize>,
) -> Result<()> {
    if top_k.is_some() && format != OutputFormat::Csv {
        return Err(Error::Usage(
            "--top-k writes a CSV: use --out FILE.csv".into(),
        ));
    }
    match format {
        OutputFormat::Safetensors => crate::system::tensors::write(path, columns),
        OutputFormat::Npy => {
            let [(key, values)] = columns else {
                let keys: Vec<&str> = columns.iter().map(|(k, _)| k.as_str()).collect();
                return Err(Error::Usage(format!(
                    "an NPY file holds one array, but {} keys were produced ({}): choose one with --key",
                    keys.len(),
                    keys.join(", ")
                )));
            };
            let bytes = npy_bytes(values).map_err(|e| Error::Run(format!("`{key}`: {e}")))?;
            write_file(path, &bytes)
        }
        OutputFormat::Csv => {
            let text = match top_k {
                Some(k) => {
                    let [(key, scores)] = columns else {
                        return Err(Error::Usage(
                            "--top-k ranks the classes of one key: choose it with --key".into(),
                        ));
                    };
                    top_k_csv(scores, k).map_err(|e| Error::Usage(format!("`{key}`: {e}")))?
                }
                None => values_csv(columns).map_err(Error::Run)?,
            };
            write_file(path, text.as_bytes())
        }
    }
}

/// Writes `bytes` to `path` through a temporary beside it: a failure leaves no partial file.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    // Written next to the target and renamed, so a failure leaves no partial file behind.
    let tmp = path.with_extension("partial");
    // Errors name the file asked for: the temporary beside it is ours, not the user's.
    crate::replace::through_temp(path, &tmp, |tmp| {
        std::fs::write(tmp, bytes).map_err(|e| Error::io(path, e))
    })
}

/// Per-sample values of a joined column as (rows, values per row).
fn rows(values: &Tensor) -> std::result::Result<(usize, usize, Vec<f64>), String> {
    let values = values
        .f_to_device(tch::Device::Cpu)
        .map_err(crate::tch_message)?;
    let n = if values.dim() == 0 {
        1
    } else {
        values.size()[0] as usize
    };
    let flat: Vec<f64> = values
        .f_to_kind(Kind::Double)
        .and_then(|t| t.f_flatten(0, -1))
        .and_then(|t| Vec::<f64>::try_from(&t))
        .map_err(crate::tch_message)?;
    let width = flat.len().checked_div(n).unwrap_or(0);
    Ok((n, width, flat))
}

fn is_integral(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Uint8 | Kind::Int8 | Kind::Int16 | Kind::Int | Kind::Int64 | Kind::Bool
    )
}

fn number(value: f64, integral: bool) -> String {
    if integral {
        format!("{}", value as i64)
    } else {
        // f32 values print in their shortest round-trip form.
        format!("{}", value as f32)
    }
}

/// `index,<key>` (or `<key>_0,<key>_1,...` for several values per sample), one row a sample.
pub fn values_csv(columns: &[(String, Tensor)]) -> std::result::Result<String, String> {
    let mut header = vec!["index".to_owned()];
    let mut tables = Vec::new();
    let mut samples = None;
    for (key, values) in columns {
        let (n, width, flat) = rows(values).map_err(|e| format!("`{key}`: {e}"))?;
        if samples.is_some_and(|s| s != n) {
            return Err(format!(
                "`{key}` has {n} rows but the other keys have {}; write it on its own with --key",
                samples.unwrap_or_default()
            ));
        }
        samples = Some(n);
        if width == 1 {
            header.push(key.clone());
        } else {
            header.extend((0..width).map(|i| format!("{key}_{i}")));
        }
        tables.push((width, flat, is_integral(values.kind())));
    }
    let mut text = header.join(",");
    text.push('\n');
    for row in 0..samples.unwrap_or(0) {
        text.push_str(&row.to_string());
        for (width, flat, integral) in &tables {
            for value in &flat[row * width..(row + 1) * width] {
                text.push(',');
                text.push_str(&number(*value, *integral));
            }
        }
        text.push('\n');
    }
    Ok(text)
}

/// `index,class_1,score_1,...,class_k,score_k`: the k highest-scoring classes of each row of
/// a `[samples, classes]` tensor, best first (ties keep the lower class first).
pub fn top_k_csv(scores: &Tensor, k: usize) -> std::result::Result<String, String> {
    if scores.dim() != 2 {
        return Err(format!(
            "--top-k needs class scores of shape [samples, classes], got {:?}",
            scores.size()
        ));
    }
    let (n, classes, flat) = rows(scores)?;
    if k == 0 || k > classes {
        return Err(format!(
            "--top-k {k}: there are {classes} classes, so k runs from 1 to {classes}"
        ));
    }
    let mut header = vec!["index".to_owned()];
    for i in 1..=k {
        header.push(format!("class_{i}"));
        header.push(format!("score_{i}"));
    }
    let mut text = header.join(",");
    text.push('\n');
    for row in 0..n {
        let values = &flat[row * classes..(row + 1) * classes];
        let mut order: Vec<usize> = (0..classes).collect();
        order.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
        text.push_str(&row.to_string());
        for &class in &order[..k] {
            text.push_str(&format!(",{class},{}", values[class] as f32));
        }
        text.push('\n');
    }
    Ok(text)
}

/// numpy's dtype string for `kind`.
fn descr(kind: Kind) -> Option<&'static str> {
    Some(match kind {
        Kind::Float => "<f4",
        Kind::Double => "<f8",
        Kind::Half => "<f2",
        Kind::Int64 => "<i8",
        Kind::Int => "<i4",
        Kind::Int16 => "<i2",
        Kind::Int8 => "|i1",
        Kind::Uint8 => "|u1",
        Kind::Bool => "|b1",
        _ => return None,
    })
}

/// The NPY 1.0 header for an array of `descr` and `shape` (padded so data starts on a
/// 64-byte boundary, as numpy writes it).
pub fn npy_header(descr: &str, shape: &[i64]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(i64::to_string).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}

/// `values` as an NPY file (little-endian, C order). bfloat16 is written as float32, which
/// numpy lacks.
pub fn npy_bytes(values: &Tensor) -> std::result::Result<Vec<u8>, String> {
    let mut values = values
        .f_to_device(tch::Device::Cpu)
        .and_then(|t| t.f_contiguous())
        .map_err(crate::tch_message)?;
    if values.kind() == Kind::BFloat16 {
        values = values.f_to_kind(Kind::Float).map_err(crate::tch_message)?;
    }
    let kind = values.kind();
    let descr = descr(kind).ok_or_else(|| format!("{kind:?} values have no NPY type"))?;
    let mut out = npy_header(descr, &values.size());
    let numel = values.numel();
    let mut data = vec![0u8; numel * kind.elt_size_in_bytes()];
    values
        .f_copy_data_u8(&mut data, numel)
        .map_err(crate::tch_message)?;
    out.extend_from_slice(&data);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_header_is_what_numpy_writes() {
        let header = npy_header("<f4", &[3, 2]);
        assert_eq!(header.len() % 64, 0);
        let text = String::from_utf8_lossy(&header[10..]).into_owned();
        assert!(text.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }"));
        assert!(text.ends_with('\n'));
        let one = String::from_utf8_lossy(&npy_header("<i8", &[5])[10..]).into_owned();
        assert!(one.contains("'shape': (5,)"), "{one}");
    }

    #[test]
    fn npy_bytes_round_trip_through_the_pipeline_reader() {
        let values = Tensor::from_slice(&[1.5f32, -2.0, 3.25, 4.0]).reshape([2, 2]);
        let bytes = npy_bytes(&values).unwrap();
        let array = crate::pipeline::formats::npy::NpyArray::new(
            crate::pipeline::formats::Bytes::from_vec(bytes),
        )
        .unwrap();
        let back = array.items(&[0, 1]).unwrap();
        assert!(back.equal(&values), "{back:?}");
    }

    #[test]
    fn top_k_lists_the_best_classes_first() {
        let scores = Tensor::from_slice(&[0.1f32, 0.7, 0.2, 0.5, 0.5, 0.0]).reshape([2, 3]);
        let text = top_k_csv(&scores, 2).unwrap();
        assert_eq!(
            text,
            "index,class_1,score_1,class_2,score_2\n0,1,0.7,2,0.2\n1,0,0.5,1,0.5\n"
        );
        assert!(top_k_csv(&Tensor::from_slice(&[1.0f32]), 1).is_err());
        // More classes than there are is refused, not quietly cut to the three there are.
        let too_many = top_k_csv(&scores, 4).unwrap_err();
        assert_eq!(
            too_many,
            "--top-k 4: there are 3 classes, so k runs from 1 to 3"
        );
        top_k_csv(&scores, 3).unwrap();
    }

    #[test]
    fn values_csv_flattens_each_sample() {
        let scores = Tensor::from_slice(&[0.25f32, 0.75, 1.0, 0.0]).reshape([2, 2]);
        let labels = Tensor::from_slice(&[1i64, 0]);
        let text = values_csv(&[("p".into(), scores), ("y".into(), labels)]).unwrap();
        assert_eq!(text, "index,p_0,p_1,y\n0,0.25,0.75,1\n1,1,0,0\n");
    }
}
