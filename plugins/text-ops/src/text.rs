//! Reading text inputs and writing id outputs, shared by the ops.

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{tensor_text, Error, Result};

/// The text a sample's input holds (a 1-D uint8 tensor of UTF-8, as CSV string columns and
/// WebDataset `.txt` members arrive), naming the op in the error.
pub(crate) fn sample_text(x: &Tensor, op: &str) -> Result<String> {
    tensor_text(x).map_err(|e| Error::msg(format!("{op}: {}", e.message())))
}

/// The texts of a batch: a 2-D uint8 tensor, one text per row. The host pads ragged text
/// rows with zero bytes when it stacks them, so trailing zeros are not part of a text.
pub(crate) fn batch_texts(x: &Tensor, op: &str) -> Result<Vec<String>> {
    if x.kind() != Kind::Uint8 || x.dim() != 2 {
        return Err(Error::msg(format!(
            "{op}: expected a batch of texts (a 2-D uint8 tensor), got a {:?} tensor of shape {:?}",
            x.kind(),
            x.size()
        )));
    }
    let rows = x.size()[0];
    (0..rows)
        .map(|row| {
            let bytes = Vec::<u8>::try_from(x.f_get(row)?.f_contiguous()?)
                .map_err(|e| Error::msg(format!("{op}: cannot read text bytes: {e}")))?;
            let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            String::from_utf8(bytes[..end].to_vec())
                .map_err(|e| Error::msg(format!("{op}: text of batch row {row} is not UTF-8: {e}")))
        })
        .collect()
}

/// Ids as a 1-D int64 tensor (what embedding layers and the losses take).
pub(crate) fn ids_tensor(ids: impl IntoIterator<Item = i64>) -> Tensor {
    let ids: Vec<i64> = ids.into_iter().collect();
    Tensor::from_slice(&ids)
}

/// Stacks per-sample outputs of equal length into batch outputs, or explains why not.
pub(crate) fn stack_rows(rows: Vec<Vec<Tensor>>, op: &str, hint: &str) -> Result<Vec<Tensor>> {
    let Some(first) = rows.first() else {
        return Ok(Vec::new());
    };
    let width = first.len();
    let mut out = Vec::with_capacity(width);
    for slot in 0..width {
        let column: Vec<&Tensor> = rows.iter().filter_map(|r| r.get(slot)).collect();
        let lengths: Vec<i64> = column.iter().map(|t| t.size()[0]).collect();
        if lengths.windows(2).any(|w| w[0] != w[1]) {
            return Err(Error::msg(format!(
                "{op}: the batch's sequences have different lengths ({lengths:?}), so they cannot be stacked; {hint}"
            )));
        }
        out.push(Tensor::f_stack(&column, 0)?);
    }
    Ok(out)
}
