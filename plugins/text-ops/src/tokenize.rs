//! `Tokenize`: text to ids with a Hugging Face `tokenizer.json` (BPE, WordPiece, Unigram,
//! WordLevel: whatever the file describes, normalizer, pre-tokenizer and post-processor
//! included), as the Python `tokenizers` package encodes it.

use std::path::PathBuf;

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use serde::Deserialize;
use tokenizers::{
    EncodeInput, Encoding, PaddingDirection, PaddingParams, PaddingStrategy, Tokenizer,
    TruncationDirection, TruncationParams, TruncationStrategy,
};

use crate::text::{batch_texts, ids_tensor, sample_text, stack_rows};

/// `truncation`: on/off, or a strategy named as in Hugging Face `transformers`.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(untagged)]
pub enum Truncation {
    /// `true`: `longest_first`; `false`: never truncate (even when the file says to).
    Switch(bool),
    /// `"longest_first"`, `"only_first"`, `"only_second"` or `"do_not_truncate"`.
    Strategy(String),
}

/// `padding`: on/off, or a strategy named as in Hugging Face `transformers`.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(untagged)]
pub enum Padding {
    /// `true`: `max_length`; `false`: never pad (even when the file says to).
    Switch(bool),
    /// `"max_length"` or `"do_not_pad"` (`"longest"` is refused: see [`TokenizeConfig`]).
    Strategy(String),
}

/// `left` or `right`.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The start of the sequence.
    Left,
    /// The end of the sequence.
    #[default]
    Right,
}

/// `Tokenize` configuration. `inputs`: one text key, or two for a sequence pair (BERT's
/// `[CLS] a [SEP] b [SEP]`). `outputs`: ids, then optionally the attention mask, then the type
/// ids (all int64).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct TokenizeConfig {
    /// The `tokenizer.json` file (relative to the manifest).
    pub tokenizer: PathBuf,
    /// The length sequences are truncated to and padded to. Without it, the file's own
    /// truncation and padding settings apply (as the Python package applies them).
    pub max_length: Option<usize>,
    /// Default: on when `max_length` is given (`longest_first`), else the file's setting.
    pub truncation: Option<Truncation>,
    /// Default: `max_length` when `max_length` is given, else the file's setting. `longest`
    /// (pad to the batch's longest) is not a per-sample operation: the `Batch` op's
    /// `pad_value` does that.
    pub padding: Option<Padding>,
    /// Add the post-processor's special tokens (`[CLS]`, `[SEP]`, `<s>`...). Default true.
    #[serde(default = "yes")]
    pub add_special_tokens: bool,
    /// The id padding writes. Default: the file's padding id, else the id of `[PAD]`, `<pad>`
    /// or `<|padding|>` in the vocabulary.
    pub pad_id: Option<u32>,
    /// Overlap kept between a truncated sequence and its overflow (which is dropped). Default 0.
    #[serde(default)]
    pub stride: usize,
    /// Which end truncation cuts. Default `right`.
    #[serde(default)]
    pub truncation_side: Side,
    /// Which end padding fills. Default `right`.
    #[serde(default)]
    pub padding_side: Side,
}

fn yes() -> bool {
    true
}

/// Tokens that name padding in the common vocabularies (BERT, RoBERTa/T5, GPT-NeoX).
const PAD_TOKENS: [&str; 3] = ["[PAD]", "<pad>", "<|padding|>"];

/// Text to ids through a Hugging Face tokenizer.
pub struct Tokenize {
    tokenizer: Tokenizer,
    add_special_tokens: bool,
    /// Outputs wanted: ids always, then attention mask, then type ids.
    outputs: usize,
    fixed_length: bool,
}

impl FromConfig for Tokenize {
    type Config = TokenizeConfig;
    fn from_config(config: TokenizeConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        if !(1..=2).contains(&ctx.inputs.len()) {
            return Err(Error::config(
                "inputs",
                format!(
                    "Tokenize takes one text key, or two for a sequence pair; got {}",
                    ctx.inputs.len()
                ),
            ));
        }
        if !(1..=3).contains(&ctx.outputs.len()) {
            return Err(Error::config(
                "outputs",
                format!(
                    "Tokenize writes ids, then optionally the attention mask, then the type ids (1 to 3 keys); got {}",
                    ctx.outputs.len()
                ),
            ));
        }
        if config.max_length == Some(0) {
            return Err(Error::config("max_length", "must be at least 1"));
        }
        let path = ctx.resolve_path(&config.tokenizer);
        let mut tokenizer = load(&path)?;
        let truncation = truncation(&config, tokenizer.get_truncation().cloned())?;
        tokenizer
            .with_truncation(truncation)
            .map_err(|e| Error::config("truncation", format!("{}: {e}", path.display())))?;
        let padding = padding(&config, &tokenizer, &path)?;
        let fixed_length = matches!(
            padding,
            Some(PaddingParams {
                strategy: PaddingStrategy::Fixed(_),
                ..
            })
        );
        tokenizer.with_padding(padding);
        Ok(Tokenize {
            tokenizer,
            add_special_tokens: config.add_special_tokens,
            outputs: ctx.outputs.len(),
            fixed_length,
        })
    }
}

/// The tokenizer in `path`, or an error naming the file and what is wrong with it.
pub(crate) fn load(path: &std::path::Path) -> Result<Tokenizer> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::config("tokenizer", format!("cannot read {}: {e}", path.display())))?;
    text.parse::<Tokenizer>().map_err(|e| {
        Error::config(
            "tokenizer",
            format!("{} is not a valid tokenizer.json: {e}", path.display()),
        )
    })
}

fn truncation(
    config: &TokenizeConfig,
    from_file: Option<TruncationParams>,
) -> Result<Option<TruncationParams>> {
    let strategy = match &config.truncation {
        None if config.max_length.is_none() => return Ok(from_file),
        None | Some(Truncation::Switch(true)) => TruncationStrategy::LongestFirst,
        Some(Truncation::Switch(false)) => return Ok(None),
        Some(Truncation::Strategy(name)) => match name.as_str() {
            "longest_first" => TruncationStrategy::LongestFirst,
            "only_first" => TruncationStrategy::OnlyFirst,
            "only_second" => TruncationStrategy::OnlySecond,
            "do_not_truncate" => return Ok(None),
            other => {
                return Err(Error::config(
                    "truncation",
                    format!("expected true, false, \"longest_first\", \"only_first\", \"only_second\" or \"do_not_truncate\", got {other:?}"),
                ))
            }
        },
    };
    let Some(max_length) = config
        .max_length
        .or(from_file.as_ref().map(|t| t.max_length))
    else {
        return Err(Error::config(
            "truncation",
            "truncating needs a length: set max_length",
        ));
    };
    Ok(Some(TruncationParams {
        max_length,
        strategy,
        stride: config.stride,
        direction: match config.truncation_side {
            Side::Left => TruncationDirection::Left,
            Side::Right => TruncationDirection::Right,
        },
    }))
}

fn padding(
    config: &TokenizeConfig,
    tokenizer: &Tokenizer,
    path: &std::path::Path,
) -> Result<Option<PaddingParams>> {
    let from_file = tokenizer.get_padding().cloned();
    let on = match &config.padding {
        None if config.max_length.is_none() => {
            return Ok(from_file.map(|p| PaddingParams {
                pad_id: config.pad_id.unwrap_or(p.pad_id),
                ..p
            }))
        }
        None | Some(Padding::Switch(true)) => true,
        Some(Padding::Switch(false)) => false,
        Some(Padding::Strategy(name)) => match name.as_str() {
            "max_length" => true,
            "do_not_pad" => false,
            "longest" => {
                return Err(Error::config(
                    "padding",
                    "\"longest\" pads to the longest sequence of a batch, which a per-sample op does not see: use \"max_length\" with max_length, or leave padding off and give the Batch op a pad_value",
                ))
            }
            other => {
                return Err(Error::config(
                    "padding",
                    format!("expected true, false, \"max_length\" or \"do_not_pad\", got {other:?}"),
                ))
            }
        },
    };
    if !on {
        return Ok(None);
    }
    let fixed_in_file = match from_file.as_ref().map(|p| &p.strategy) {
        Some(PaddingStrategy::Fixed(n)) => Some(*n),
        _ => None,
    };
    let Some(length) = config.max_length.or(fixed_in_file) else {
        return Err(Error::config(
            "padding",
            "padding to a fixed length needs one: set max_length",
        ));
    };
    let pad_id = match (config.pad_id, &from_file) {
        (Some(id), _) => id,
        (None, Some(p)) => p.pad_id,
        (None, None) => PAD_TOKENS
            .iter()
            .find_map(|t| tokenizer.token_to_id(t))
            .ok_or_else(|| {
                Error::config(
                    "pad_id",
                    format!(
                        "{} has no padding token ({}) and no padding settings: set pad_id",
                        path.display(),
                        PAD_TOKENS.join(", ")
                    ),
                )
            })?,
    };
    let pad_token = tokenizer
        .id_to_token(pad_id)
        .unwrap_or_else(|| "[PAD]".to_owned());
    Ok(Some(PaddingParams {
        strategy: PaddingStrategy::Fixed(length),
        direction: match config.padding_side {
            Side::Left => PaddingDirection::Left,
            Side::Right => PaddingDirection::Right,
        },
        pad_to_multiple_of: from_file.as_ref().and_then(|p| p.pad_to_multiple_of),
        pad_id,
        pad_type_id: from_file.as_ref().map_or(0, |p| p.pad_type_id),
        pad_token,
    }))
}

impl Tokenize {
    fn encode(&self, texts: &[String]) -> Result<Vec<Tensor>> {
        let input: EncodeInput<'_> = match texts {
            [a] => a.as_str().into(),
            [a, b] => (a.as_str(), b.as_str()).into(),
            _ => {
                return Err(Error::msg(format!(
                    "Tokenize: expected 1 or 2 texts, got {}",
                    texts.len()
                )))
            }
        };
        let encoding: Encoding = self
            .tokenizer
            .encode(input, self.add_special_tokens)
            .map_err(|e| Error::msg(format!("Tokenize: {e}")))?;
        let columns = [
            encoding.get_ids(),
            encoding.get_attention_mask(),
            encoding.get_type_ids(),
        ];
        Ok(columns[..self.outputs]
            .iter()
            .map(|c| ids_tensor(c.iter().map(|&v| i64::from(v))))
            .collect())
    }
}

impl NumpyOp for Tokenize {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let texts = inputs
            .iter()
            .map(|x| sample_text(x, "Tokenize"))
            .collect::<Result<Vec<_>>>()?;
        self.encode(&texts)
    }

    /// A batch of texts (rows of zero-padded bytes) to stacked ids; the sequences must come
    /// out of equal length, which fixed padding guarantees.
    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let columns = inputs
            .iter()
            .map(|x| batch_texts(x, "Tokenize"))
            .collect::<Result<Vec<_>>>()?;
        let rows = columns.first().map_or(0, Vec::len);
        let encoded = (0..rows)
            .map(|row| {
                let texts: Vec<String> = columns.iter().map(|c| c[row].clone()).collect();
                self.encode(&texts)
            })
            .collect::<Result<Vec<_>>>()?;
        let hint = if self.fixed_length {
            "the tokenizer pads to a fixed length"
        } else {
            "set max_length (padding = \"max_length\") so every sequence has one length"
        };
        stack_rows(encoded, "Tokenize", hint)
    }
}

#[cfg(test)]
mod tests;
