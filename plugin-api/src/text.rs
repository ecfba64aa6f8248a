//! Text values (file paths, captions, CSV strings) travel as tensors too: a 1-D `uint8`
//! tensor of UTF-8 bytes. These helpers make and read them, so every plugin agrees.

use tch::{Kind, Tensor};

use crate::{Error, Result};

/// A 1-D `uint8` tensor holding `text` as UTF-8.
///
/// ```
/// let t = fe_plugin_api::text_tensor("images/cat.png");
/// assert_eq!(fe_plugin_api::tensor_text(&t)?, "images/cat.png");
/// # Ok::<(), fe_plugin_api::Error>(())
/// ```
pub fn text_tensor(text: &str) -> Tensor {
    Tensor::from_slice(text.as_bytes())
}

/// The text a tensor made by [`text_tensor`] holds.
pub fn tensor_text(tensor: &Tensor) -> Result<String> {
    if tensor.kind() != Kind::Uint8 || tensor.dim() != 1 {
        return Err(Error::msg(format!(
            "expected text (a 1-D uint8 tensor), got a {:?} tensor of shape {:?}",
            tensor.kind(),
            tensor.size()
        )));
    }
    let bytes: Vec<u8> = Vec::<u8>::try_from(tensor.f_contiguous()?)
        .map_err(|e| Error::msg(format!("cannot read text bytes: {e}")))?;
    String::from_utf8(bytes).map_err(|e| Error::msg(format!("text is not UTF-8: {e}")))
}
