//! An LSTM classifier for token sequences, with PyTorch's variable names:
//!
//! ```python
//! class LSTMClassifier(nn.Module):
//!     def __init__(self, vocab, classes, embed, hidden, layers, dropout):
//!         super().__init__()
//!         self.embedding = nn.Embedding(vocab, embed)
//!         self.lstm = nn.LSTM(embed, hidden, layers, batch_first=True, dropout=dropout)
//!         self.fc = nn.Linear(hidden, classes)
//!
//!     def forward(self, tokens):
//!         _, (h, _) = self.lstm(self.embedding(tokens.long()))
//!         return self.fc(h[-1])
//! ```

use fe_plugin_api::tch::nn::{self, Init};
use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{Error, Result};
use serde::Deserialize;

use crate::layers::{Embedding, Linear};

/// The LSTM classifier's configuration.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct LstmConfig {
    /// Number of distinct token ids (ids lie in `0..vocab`).
    pub vocab: i64,
    /// Number of outputs (logits).
    pub classes: i64,
    /// Width of the token embeddings.
    pub embed: i64,
    /// Width of the LSTM state.
    pub hidden: i64,
    /// Stacked LSTM layers.
    pub layers: i64,
    /// Dropout between stacked layers, in training.
    pub dropout: f64,
}

impl Default for LstmConfig {
    fn default() -> Self {
        Self {
            vocab: 64,
            classes: 4,
            embed: 32,
            hidden: 64,
            layers: 1,
            dropout: 0.0,
        }
    }
}

/// Embedding → LSTM → the last layer's final hidden state → linear.
pub struct LstmClassifier {
    pub(crate) vs: nn::VarStore,
    embedding: Embedding,
    /// Per layer: `weight_ih_l{k}`, `weight_hh_l{k}`, `bias_ih_l{k}`, `bias_hh_l{k}`, in the
    /// order libtorch's `lstm` takes them.
    weights: Vec<Tensor>,
    fc: Linear,
    hidden: i64,
    layers: i64,
    vocab: i64,
    dropout: f64,
}

impl LstmClassifier {
    pub(crate) fn new(vs: nn::VarStore, config: LstmConfig) -> Result<Self> {
        for (field, value) in [
            ("vocab", config.vocab),
            ("classes", config.classes),
            ("embed", config.embed),
            ("hidden", config.hidden),
            ("layers", config.layers),
        ] {
            if value < 1 {
                return Err(Error::config(field, "must be at least 1"));
            }
        }
        if !(0.0..1.0).contains(&config.dropout) {
            return Err(Error::config("dropout", "must lie in [0, 1)"));
        }
        let root = vs.root();
        let lstm = &root / "lstm";
        // PyTorch: every LSTM weight and bias uniform in ±1/sqrt(hidden).
        let bound = 1.0 / (config.hidden as f64).sqrt();
        let init = Init::Uniform {
            lo: -bound,
            up: bound,
        };
        let gates = 4 * config.hidden;
        let mut weights = Vec::new();
        for layer in 0..config.layers {
            let input = if layer == 0 {
                config.embed
            } else {
                config.hidden
            };
            weights.push(lstm.var(&format!("weight_ih_l{layer}"), &[gates, input], init));
            weights.push(lstm.var(
                &format!("weight_hh_l{layer}"),
                &[gates, config.hidden],
                init,
            ));
            weights.push(lstm.var(&format!("bias_ih_l{layer}"), &[gates], init));
            weights.push(lstm.var(&format!("bias_hh_l{layer}"), &[gates], init));
        }
        if vs.device().is_cuda() && fe_plugin_api::tch::Cuda::cudnn_is_available() {
            // cuDNN runs an LSTM from one flat weight buffer: weights allocated apart would be
            // copied into one at every call (with a warning each time). This makes them views
            // of one buffer, as PyTorch's `flatten_parameters` does (mode 2 is cuDNN's LSTM).
            let _no_grad = fe_plugin_api::tch::no_grad_guard();
            let _buffer = Tensor::f_internal_cudnn_rnn_flatten_weight(
                &weights,
                4,
                config.embed,
                2,
                config.hidden,
                0,
                config.layers,
                true,
                false,
            )?;
        }
        Ok(Self {
            embedding: Embedding::new(&root / "embedding", config.vocab, config.embed),
            fc: Linear::new(&root / "fc", config.hidden, config.classes),
            weights,
            hidden: config.hidden,
            layers: config.layers,
            vocab: config.vocab,
            dropout: config.dropout,
            vs,
        })
    }

    /// `tokens`: `[batch, length]` integer ids.
    pub(crate) fn run(&self, tokens: &Tensor, train: bool) -> Result<Tensor> {
        crate::input::token_ids("LSTMClassifier", tokens, self.vocab)?;
        let size = tokens.size();
        if size.len() != 2 {
            return Err(Error::msg(format!(
                "expects token ids shaped [batch, length], got {size:?}"
            )));
        }
        let x = self.embedding.forward(tokens)?;
        // Zeros shaped from the batch rather than `zeros([layers, batch, hidden])`, which a
        // traced export would record with one batch size.
        let state = x
            .f_select(1, 0)?
            .f_select(1, 0)?
            .f_zeros_like()?
            .f_view([1, -1, 1])?
            .f_expand([self.layers, -1, self.hidden], false)?
            .f_contiguous()?;
        let (_, h, _) = x.f_lstm(
            &[&state, &state],
            &self.weights.iter().collect::<Vec<_>>(),
            true,
            self.layers,
            self.dropout,
            train,
            false,
            true,
        )?;
        self.fc.forward(&h.f_select(0, self.layers - 1)?)
    }
}
