//! `WordtoId`: FastEstimator's `fe.op.numpyop.univariate.WordtoId` — each word of a text to
//! its id in a fixed vocabulary.
//!
//! FastEstimator takes a list of tokens and a dict (a missing word is a `KeyError`); here a
//! text arrives as UTF-8 bytes, so its words are what whitespace separates (pre-split tokens
//! joined by spaces), and the dict is a vocabulary file or an inline table. A word outside
//! the vocabulary is an error naming it, unless `unk` gives the id it maps to instead.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use fe_plugin_api::tch::Tensor;
use fe_plugin_api::{CreateContext, Error, FromConfig, NumpyOp, Result, StepContext};
use serde::Deserialize;

use crate::text::{batch_texts, ids_tensor, sample_text, stack_rows};

/// What an unknown word becomes: an id, or a word of the vocabulary whose id it takes.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(untagged)]
pub enum Unknown {
    /// This id.
    Id(i64),
    /// The id of this vocabulary word (`"[UNK]"`).
    Word(String),
}

/// `WordtoId` configuration: exactly one of `vocab` and `mapping`.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct WordtoIdConfig {
    /// A vocabulary file (relative to the manifest): one word per line, its id the line's
    /// number from 0 (BERT's `vocab.txt`, Keras' vocabulary files).
    pub vocab: Option<PathBuf>,
    /// An inline table `{ word = id, ... }`.
    pub mapping: Option<BTreeMap<String, i64>>,
    /// What words outside the vocabulary become. Default: they are an error.
    pub unk: Option<Unknown>,
    /// Lower-case the text before looking words up. Default false.
    #[serde(default)]
    pub lowercase: bool,
}

/// Words to ids.
pub struct WordtoId {
    ids: HashMap<String, i64>,
    unk: Option<i64>,
    lowercase: bool,
    /// Where the vocabulary came from, for messages.
    source: String,
}

impl FromConfig for WordtoId {
    type Config = WordtoIdConfig;
    fn from_config(config: WordtoIdConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(None, None)?;
        if ctx.inputs.is_empty() || ctx.inputs.len() != ctx.outputs.len() {
            return Err(Error::config(
                "outputs",
                format!(
                    "WordtoId writes one output per input (at least one): got {} input(s) and {} output(s)",
                    ctx.inputs.len(),
                    ctx.outputs.len()
                ),
            ));
        }
        let (ids, source) = match (config.vocab, config.mapping) {
            (Some(path), None) => {
                let path = ctx.resolve_path(&path);
                (read_vocab(&path)?, path.display().to_string())
            }
            (None, Some(mapping)) => (mapping.into_iter().collect(), "mapping".to_owned()),
            _ => {
                return Err(Error::config(
                    "vocab",
                    "give exactly one of vocab (a file, one word per line) and mapping (a table of word = id)",
                ))
            }
        };
        let unk = match config.unk {
            None => None,
            Some(Unknown::Id(id)) => Some(id),
            Some(Unknown::Word(word)) => Some(*ids.get(&word).ok_or_else(|| {
                Error::config(
                    "unk",
                    format!("{word:?} is not in the vocabulary ({source})"),
                )
            })?),
        };
        Ok(WordtoId {
            ids,
            unk,
            lowercase: config.lowercase,
            source,
        })
    }
}

/// A vocabulary file: line `n` (from 0) holds the word whose id is `n`.
fn read_vocab(path: &Path) -> Result<HashMap<String, i64>> {
    let bad = |m: String| Error::config("vocab", format!("{}: {m}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let mut ids = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        // Words are what whitespace separates, so a line with none or with several could
        // never be looked up: better refused than a silent hole in the ids.
        let word = line.trim();
        if word.is_empty() || word.split_whitespace().nth(1).is_some() {
            return Err(bad(format!("line {} holds {line:?}, not one word", n + 1)));
        }
        if let Some(first) = ids.insert(word.to_owned(), n as i64) {
            return Err(bad(format!(
                "line {} repeats {word:?} of line {}",
                n + 1,
                first + 1
            )));
        }
    }
    if ids.is_empty() {
        return Err(bad("the vocabulary is empty".to_owned()));
    }
    Ok(ids)
}

impl WordtoId {
    fn convert(&self, text: &str) -> Result<Tensor> {
        let text = if self.lowercase {
            text.to_lowercase()
        } else {
            text.to_owned()
        };
        let ids = text
            .split_whitespace()
            .map(|word| match (self.ids.get(word), self.unk) {
                (Some(&id), _) | (None, Some(id)) => Ok(id),
                (None, None) => Err(Error::msg(format!(
                    "WordtoId: {word:?} is not in the vocabulary ({}); set unk to map unknown words to an id",
                    self.source
                ))),
            })
            .collect::<Result<Vec<i64>>>()?;
        Ok(ids_tensor(ids))
    }
}

impl NumpyOp for WordtoId {
    fn forward(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        inputs
            .iter()
            .map(|x| self.convert(&sample_text(x, "WordtoId")?))
            .collect()
    }

    /// Texts of a batch (rows of zero-padded bytes) to stacked ids: every text must have the
    /// same number of words.
    fn forward_batch(&self, inputs: &[&Tensor], _ctx: &StepContext<'_>) -> Result<Vec<Tensor>> {
        let mut out = Vec::with_capacity(inputs.len());
        for x in inputs {
            let rows = batch_texts(x, "WordtoId")?
                .iter()
                .map(|t| Ok(vec![self.convert(t)?]))
                .collect::<Result<Vec<_>>>()?;
            out.extend(stack_rows(
                rows,
                "WordtoId",
                "pad them after this op (PadSequence, or the Batch op's pad_value)",
            )?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
