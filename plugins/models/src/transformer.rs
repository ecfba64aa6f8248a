//! A small Transformer encoder classifier for token sequences, built from PyTorch's
//! `nn.TransformerEncoderLayer` (post-norm, ReLU, `batch_first=True`) so its variables carry
//! PyTorch's names:
//!
//! ```python
//! class TransformerClassifier(nn.Module):
//!     def __init__(self, vocab, classes, d_model, heads, layers, ff, max_len, dropout):
//!         super().__init__()
//!         self.embedding = nn.Embedding(vocab, d_model)
//!         self.position = nn.Embedding(max_len, d_model)
//!         layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout, batch_first=True)
//!         self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
//!         self.fc = nn.Linear(d_model, classes)
//!
//!     def forward(self, tokens, mask=None):
//!         positions = torch.arange(tokens.shape[1], device=tokens.device)
//!         x = self.embedding(tokens.long()) + self.position(positions)
//!         if mask is None:
//!             return self.fc(self.encoder(x).mean(1))
//!         keep = mask != 0
//!         h = self.encoder(x, src_key_padding_mask=~keep)
//!         weights = keep.unsqueeze(-1).to(h.dtype)
//!         return self.fc((h * weights).sum(1) / weights.sum(1))
//! ```
//!
//! The optional second input is a tokenizer's attention mask (`Tokenize`'s second output:
//! 1 for a real token, 0 for padding): padding then takes no part in attention nor in the
//! mean, so a sentence's logits do not depend on how far it was padded.

use fe_plugin_api::tch::nn::{self, Init};
use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{Error, Result};
use serde::Deserialize;

use crate::layers::{Embedding, LayerNorm, Linear};

/// The Transformer classifier's configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct TransformerConfig {
    /// Number of distinct token ids (ids lie in `0..vocab`).
    pub vocab: i64,
    /// Number of outputs (logits).
    pub classes: i64,
    /// Width of the embeddings and of every layer.
    pub d_model: i64,
    /// Attention heads; must divide `d_model`.
    pub heads: i64,
    /// Encoder layers.
    pub layers: i64,
    /// Width of each layer's feed-forward block.
    pub ff: i64,
    /// Longest sequence (learned position embeddings).
    pub max_len: i64,
    /// Dropout in training (attention weights, after attention, in and after the feed-forward).
    pub dropout: f64,
}

impl Default for TransformerConfig {
    fn default() -> Self {
        Self {
            vocab: 64,
            classes: 4,
            d_model: 64,
            heads: 4,
            layers: 2,
            ff: 128,
            max_len: 64,
            dropout: 0.1,
        }
    }
}

/// `nn.MultiheadAttention`: `in_proj_weight`, `in_proj_bias`, `out_proj.{weight,bias}`.
struct SelfAttention {
    in_proj_weight: Tensor,
    in_proj_bias: Tensor,
    out_proj: Linear,
    heads: i64,
}

impl SelfAttention {
    fn new(path: nn::Path<'_>, d_model: i64, heads: i64) -> Self {
        // PyTorch: xavier_uniform_ in-projection, zero biases.
        let bound = (6.0 / (d_model + 3 * d_model) as f64).sqrt();
        let in_proj_weight = path.var(
            "in_proj_weight",
            &[3 * d_model, d_model],
            Init::Uniform {
                lo: -bound,
                up: bound,
            },
        );
        let in_proj_bias = path.var("in_proj_bias", &[3 * d_model], Init::Const(0.0));
        let out_proj = Linear::zero_bias(&path / "out_proj", d_model, d_model);
        Self {
            in_proj_weight,
            in_proj_bias,
            out_proj,
            heads,
        }
    }

    /// `keep`: `[batch, 1, 1, length]` booleans, true where a key may be attended to.
    fn forward(&self, x: &Tensor, keep: Option<&Tensor>, dropout: f64) -> Result<Tensor> {
        let qkv = x.f_linear(&self.in_proj_weight, Some(&self.in_proj_bias))?;
        // Heads split off and merged back by chunks of the feature dimension, not by reshapes
        // to [batch, length, heads, head width]: a traced export then records no batch size or
        // sequence length (it takes any), and ONNX keeps every tensor's rank.
        let split =
            |t: &Tensor| -> Result<Tensor> { Ok(Tensor::f_stack(&t.f_chunk(self.heads, -1)?, 1)?) };
        let parts = qkv.f_chunk(3, -1)?;
        let (q, k, v) = (split(&parts[0])?, split(&parts[1])?, split(&parts[2])?);
        let attended = Tensor::f_scaled_dot_product_attention::<&Tensor>(
            &q, &k, &v, keep, dropout, false, None, false,
        )?;
        let merged = Tensor::f_cat(&attended.f_unbind(1)?, -1)?;
        self.out_proj.forward(&merged)
    }
}

/// `nn.TransformerEncoderLayer` (post-norm, ReLU).
struct EncoderLayer {
    self_attn: SelfAttention,
    linear1: Linear,
    linear2: Linear,
    norm1: LayerNorm,
    norm2: LayerNorm,
}

impl EncoderLayer {
    fn new(path: nn::Path<'_>, config: &TransformerConfig) -> Self {
        let d = config.d_model;
        Self {
            self_attn: SelfAttention::new(&path / "self_attn", d, config.heads),
            linear1: Linear::new(&path / "linear1", d, config.ff),
            linear2: Linear::new(&path / "linear2", config.ff, d),
            norm1: LayerNorm::new(&path / "norm1", d),
            norm2: LayerNorm::new(&path / "norm2", d),
        }
    }

    fn forward(
        &self,
        x: &Tensor,
        keep: Option<&Tensor>,
        dropout: f64,
        train: bool,
    ) -> Result<Tensor> {
        let attention_dropout = if train { dropout } else { 0.0 };
        let attended = self
            .self_attn
            .forward(x, keep, attention_dropout)?
            .f_dropout(dropout, train)?;
        let x = self.norm1.forward(&x.f_add(&attended)?)?;
        let hidden = self
            .linear1
            .forward(&x)?
            .f_relu()?
            .f_dropout(dropout, train)?;
        let fed = self.linear2.forward(&hidden)?.f_dropout(dropout, train)?;
        self.norm2.forward(&x.f_add(&fed)?)
    }
}

/// Token embeddings + learned positions → encoder layers → mean over positions → linear.
pub struct Transformer {
    pub(crate) vs: nn::VarStore,
    embedding: Embedding,
    position: Embedding,
    layers: Vec<EncoderLayer>,
    fc: Linear,
    max_len: i64,
    vocab: i64,
    dropout: f64,
}

impl Transformer {
    pub(crate) fn new(vs: nn::VarStore, config: TransformerConfig) -> Result<Self> {
        for (field, value) in [
            ("vocab", config.vocab),
            ("classes", config.classes),
            ("d_model", config.d_model),
            ("heads", config.heads),
            ("layers", config.layers),
            ("ff", config.ff),
            ("max_len", config.max_len),
        ] {
            if value < 1 {
                return Err(Error::config(field, "must be at least 1"));
            }
        }
        if config.d_model % config.heads != 0 {
            return Err(Error::config(
                "heads",
                format!(
                    "{} does not divide d_model {}",
                    config.heads, config.d_model
                ),
            ));
        }
        if !(0.0..1.0).contains(&config.dropout) {
            return Err(Error::config("dropout", "must lie in [0, 1)"));
        }
        let root = vs.root();
        let encoder = &root / "encoder" / "layers";
        Ok(Self {
            embedding: Embedding::new(&root / "embedding", config.vocab, config.d_model),
            position: Embedding::new(&root / "position", config.max_len, config.d_model),
            layers: (0..config.layers)
                .map(|i| EncoderLayer::new(&encoder / i, &config))
                .collect(),
            fc: Linear::new(&root / "fc", config.d_model, config.classes),
            max_len: config.max_len,
            vocab: config.vocab,
            dropout: config.dropout,
            vs,
        })
    }

    /// `tokens`: `[batch, length]` integer ids; `mask`: `[batch, length]`, nonzero for a real
    /// token, zero for padding.
    pub(crate) fn run(
        &self,
        tokens: &Tensor,
        mask: Option<&Tensor>,
        train: bool,
    ) -> Result<Tensor> {
        crate::input::token_ids("TransformerClassifier", tokens, self.vocab)?;
        let size = tokens.size();
        let [_, length] = size[..] else {
            return Err(Error::msg(format!(
                "expects token ids shaped [batch, length], got {size:?}"
            )));
        };
        if length > self.max_len {
            return Err(Error::msg(format!(
                "sequences of {length} tokens are longer than max_len {}",
                self.max_len
            )));
        }
        // 0..length counted from the batch itself rather than `arange(length)`, which a traced
        // export would record as a constant of one length.
        let positions = tokens
            .f_select(0, 0)?
            .f_ones_like()?
            .f_cumsum(0, Kind::Int64)?
            .f_sub_scalar(1)?;
        let mut x = self
            .embedding
            .forward(tokens)?
            .f_add(&self.position.forward(&positions)?)?;
        let keep = match mask {
            Some(mask) => Some(padding_mask(mask, &size)?),
            None => None,
        };
        let attend = match &keep {
            Some(keep) => Some(keep.f_unsqueeze(1)?.f_unsqueeze(1)?),
            None => None,
        };
        for layer in &self.layers {
            x = layer.forward(&x, attend.as_ref(), self.dropout, train)?;
        }
        let pooled = match &keep {
            None => x.f_mean_dim(1, false, x.kind())?,
            Some(keep) => {
                let weights = keep.f_unsqueeze(-1)?.f_to_kind(x.kind())?;
                x.f_mul(&weights)?
                    .f_sum_dim_intlist(1, false, x.kind())?
                    .f_div(&weights.f_sum_dim_intlist(1, false, x.kind())?)?
            }
        };
        self.fc.forward(&pooled)
    }
}

/// The attention mask as booleans (true: a real token), checked against the tokens: a mask of
/// another shape, or a sequence with no real token (its mean would be 0/0), is refused.
fn padding_mask(mask: &Tensor, tokens: &[i64]) -> Result<Tensor> {
    if mask.size() != tokens {
        return Err(Error::msg(format!(
            "the attention mask (second input) is shaped {:?}, the token ids {tokens:?}: \
             give the mask the tokenizer wrote with these ids",
            mask.size()
        )));
    }
    let keep = mask.f_ne(0)?;
    let real = keep.f_any_dim(1, false)?.f_all()?;
    if !bool::try_from(&real).map_err(|e| Error::msg(e.to_string()))? {
        return Err(Error::msg(
            "the attention mask marks a sequence with no token at all (every entry 0): \
             is the second input the mask, not the type ids?",
        ));
    }
    Ok(keep)
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::{Device, Kind, Tensor};
    use fe_plugin_api::testing;

    #[test]
    fn padding_under_the_attention_mask_changes_nothing() {
        let mut model = testing::model("TransformerClassifier", "max_len = 16").unwrap();
        let tokens = Tensor::from_slice(&[5i64, 9, 3, 7, 1, 8]).view([2, 3]);
        let ones = Tensor::ones([2, 3], (Kind::Int64, Device::Cpu));
        let short = model.forward(&[&tokens, &ones], false).unwrap().remove(0);
        let padded = Tensor::cat(
            &[&tokens, &Tensor::zeros([2, 5], (Kind::Int64, Device::Cpu))],
            1,
        );
        let mask = Tensor::cat(
            &[&ones, &Tensor::zeros([2, 5], (Kind::Int64, Device::Cpu))],
            1,
        );
        let long = model.forward(&[&padded, &mask], false).unwrap().remove(0);
        assert!(
            long.allclose(&short, 1e-5, 1e-6, false),
            "{long} vs {short}"
        );
        let unmasked = model.forward(&[&padded], false).unwrap().remove(0);
        assert!(
            !unmasked.allclose(&short, 1e-3, 1e-3, false),
            "without the mask the padding is attended to and averaged in"
        );
    }

    #[test]
    fn a_mask_that_does_not_fit_the_tokens_is_refused() {
        let mut model = testing::model("TransformerClassifier", "").unwrap();
        let tokens = Tensor::ones([2, 4], (Kind::Int64, Device::Cpu));
        let short = Tensor::ones([2, 3], (Kind::Int64, Device::Cpu));
        let err = model.forward(&[&tokens, &short], false).err().unwrap();
        assert!(err.to_string().contains("attention mask"), "{err}");
        let empty = Tensor::zeros([2, 4], (Kind::Int64, Device::Cpu));
        let err = model.forward(&[&tokens, &empty], false).err().unwrap();
        assert!(err.to_string().contains("no token at all"), "{err}");
    }
}
