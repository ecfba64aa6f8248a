//! FastEstimator's `BleuScore` trace: corpus BLEU (Papineni et al. 2002) of predicted token
//! sequences against one reference each, as NLTK's `corpus_bleu` computes it with uniform
//! weights over 1..=`n_gram` and Chen & Cherry's smoothing method 4 (`SmoothingFunction().method4`,
//! k = 5), which FastEstimator uses.
//!
//! Token 0 is padding and is dropped wherever it appears (FastEstimator's `get_formated_list`).
//! The partial state is NLTK's corpus counters (clipped and total n-grams per order, hypothesis
//! and closest-reference lengths): sums, so any split over batches and ranks gives the same
//! score. FastEstimator also rounds the score to 5 decimals and logs each sentence's BLEU; this
//! keeps full precision and reports the corpus score only.

use std::collections::HashMap;

use fe_plugin_api::tch::{Kind, Tensor};
use fe_plugin_api::{CreateContext, Error, FromConfig, Metric, Result, State, Value};
use serde::{Deserialize, Serialize};

/// Configuration of `BleuScore`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct BleuConfig {
    /// The largest n-gram order (BLEU-4 by default), weighted uniformly.
    #[serde(default = "four")]
    pub n_gram: usize,
}

fn four() -> usize {
    4
}

/// NLTK's smoothing method 4 constant `k`.
const SMOOTHING_K: f64 = 5.0;

/// Corpus counts, additive over sentences.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
struct Counts {
    /// Clipped n-gram matches of order `i + 1`.
    matched: Vec<u64>,
    /// Hypothesis n-grams of order `i + 1`, at least 1 per sentence (NLTK's `max(1, ·)`).
    total: Vec<u64>,
    hypothesis_length: u64,
    reference_length: u64,
}

impl Counts {
    fn new(n_gram: usize) -> Self {
        Self {
            matched: vec![0; n_gram],
            total: vec![0; n_gram],
            ..Self::default()
        }
    }

    fn add_sentence(&mut self, reference: &[i64], hypothesis: &[i64]) {
        for (index, (matched, total)) in self.matched.iter_mut().zip(&mut self.total).enumerate() {
            let n = index + 1;
            let reference = ngram_counts(reference, n);
            let mut clipped = 0;
            let mut count = 0;
            for (gram, times) in ngram_counts(hypothesis, n) {
                count += times;
                clipped += times.min(reference.get(gram).copied().unwrap_or(0));
            }
            *matched += clipped;
            *total += count.max(1);
        }
        // One reference: the closest reference length is its length.
        self.hypothesis_length += hypothesis.len() as u64;
        self.reference_length += reference.len() as u64;
    }

    fn add(&mut self, other: &Counts) -> Result<()> {
        if other.matched.len() != self.matched.len() || other.total.len() != self.total.len() {
            return Err(Error::msg(format!(
                "a partial state counts {} n-gram orders, this trace {}",
                other.matched.len(),
                self.matched.len()
            )));
        }
        for (mine, theirs) in self.matched.iter_mut().zip(&other.matched) {
            *mine += theirs;
        }
        for (mine, theirs) in self.total.iter_mut().zip(&other.total) {
            *mine += theirs;
        }
        self.hypothesis_length += other.hypothesis_length;
        self.reference_length += other.reference_length;
        Ok(())
    }

    /// NLTK's `corpus_bleu` from the counts.
    fn bleu(&self) -> f64 {
        let (hyp, reference) = (self.hypothesis_length, self.reference_length);
        let brevity = if hyp > reference {
            1.0
        } else if hyp == 0 {
            0.0
        } else {
            (1.0 - reference as f64 / hyp as f64).exp()
        };
        if self.matched.first().copied().unwrap_or(0) == 0 {
            return 0.0;
        }
        let weight = 1.0 / self.matched.len() as f64;
        let mut increment = 1;
        let mut log_sum = 0.0;
        for (&matched, &total) in self.matched.iter().zip(&self.total) {
            let precision = if matched == 0 && hyp > 1 {
                let numerator =
                    1.0 / (f64::from(2u32.pow(increment)) * SMOOTHING_K / (hyp as f64).ln());
                increment += 1;
                numerator / total as f64
            } else {
                matched as f64 / total as f64
            };
            // NLTK leaves a zero precision out of the geometric mean.
            if precision > 0.0 {
                log_sum += weight * precision.ln();
            }
        }
        brevity * log_sum.exp()
    }
}

fn ngram_counts(tokens: &[i64], n: usize) -> HashMap<&[i64], u64> {
    let mut counts = HashMap::new();
    if tokens.len() >= n {
        for gram in tokens.windows(n) {
            *counts.entry(gram).or_insert(0) += 1;
        }
    }
    counts
}

/// Corpus BLEU. Inputs `[y_true, y_pred]`: token ids `[N, L]` (or scores `[N, L, V]`, read by
/// argmax over the last dimension); output `[bleu]`, a float in [0, 1].
pub struct BleuScore {
    n_gram: usize,
    counts: Counts,
}

impl FromConfig for BleuScore {
    type Config = BleuConfig;
    fn from_config(config: BleuConfig, ctx: &CreateContext<'_>) -> Result<Self> {
        ctx.expect_arity(Some(2), Some(1))?;
        if config.n_gram == 0 || config.n_gram > 32 {
            return Err(Error::config(
                "n_gram",
                format!("must be between 1 and 32, got {}", config.n_gram),
            ));
        }
        Ok(Self {
            n_gram: config.n_gram,
            counts: Counts::new(config.n_gram),
        })
    }
}

/// Token ids `[N, L]` as rows without padding.
fn sentences(tensor: &Tensor, what: &str) -> Result<Vec<Vec<i64>>> {
    let ids = if tensor.dim() > 2 && tensor.size().last().is_some_and(|&v| v > 1) {
        tensor.f_argmax(-1, false)?
    } else {
        tensor.shallow_clone()
    };
    let ids = match ids.dim() {
        1 => ids.f_unsqueeze(0)?,
        2 => ids,
        _ => {
            return Err(Error::msg(format!(
                "{what} has shape {:?}: expected token ids [N, L] or scores [N, L, V]",
                tensor.size()
            )))
        }
    };
    let (rows, columns) = (ids.size()[0], ids.size()[1]);
    let flat = Vec::<i64>::try_from(
        &ids.f_to_kind(Kind::Int64)?
            .f_flatten(0, -1)?
            .f_to_device(fe_plugin_api::tch::Device::Cpu)?,
    )?;
    Ok((0..rows as usize)
        .map(|row| {
            let start = row * columns as usize;
            flat[start..start + columns as usize]
                .iter()
                .copied()
                .filter(|&token| token != 0)
                .collect()
        })
        .collect())
}

impl Metric for BleuScore {
    fn reset(&mut self) {
        self.counts = Counts::new(self.n_gram);
    }

    fn accumulate(&mut self, inputs: &[&Tensor]) -> Result<()> {
        let [y_true, y_pred] = inputs else {
            return Err(Error::msg("expected inputs [y_true, y_pred]"));
        };
        let (references, hypotheses) = (sentences(y_true, "y_true")?, sentences(y_pred, "y_pred")?);
        if references.len() != hypotheses.len() {
            return Err(Error::msg(format!(
                "{} reference sentences for {} predicted ones",
                references.len(),
                hypotheses.len()
            )));
        }
        for (reference, hypothesis) in references.iter().zip(&hypotheses) {
            self.counts.add_sentence(reference, hypothesis);
        }
        Ok(())
    }

    fn partial(&self) -> Result<State> {
        State::from_json(&self.counts)
    }

    fn reduce(&self, partials: &[State]) -> Result<Vec<Value>> {
        let mut total = Counts::new(self.n_gram);
        for partial in partials {
            total.add(&partial.json()?)?;
        }
        Ok(vec![Value::Float(total.bleu())])
    }
}

#[cfg(test)]
mod tests {
    use fe_plugin_api::tch::Tensor;
    use fe_plugin_api::testing;

    use crate::test_support::{same_for_any_split, scalar};

    fn bleu(config: &str, batches: &[Vec<Tensor>]) -> f64 {
        let mut metric = testing::trace("BleuScore", config, &["y", "p"], &["bleu"]).unwrap();
        scalar(&same_for_any_split(&mut metric, batches)[0])
    }

    fn rows(rows: &[&[i64]]) -> Tensor {
        let width = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let cells: Vec<i64> = rows
            .iter()
            .flat_map(|r| r.iter().copied().chain(std::iter::repeat(0)).take(width))
            .collect();
        Tensor::from_slice(&cells).reshape([rows.len() as i64, width as i64])
    }

    #[test]
    fn nltk_corpus_bleu_values() {
        // NLTK: corpus_bleu([[[1,2,3,4,5,6]], [[7,8,9,10]]], [[1,2,3,4,9,6], [7,8,9]],
        //   smoothing_function=SmoothingFunction().method4) = 0.4971045437531401
        // (p = 8/9, 5/7, 3/5, 1/4 summed over both sentences; hyp 9 < ref 10: bp = exp(1 − 10/9)).
        let batches = vec![
            vec![rows(&[&[1, 2, 3, 4, 5, 6]]), rows(&[&[1, 2, 3, 4, 9, 6]])],
            vec![rows(&[&[7, 8, 9, 10]]), rows(&[&[7, 8, 9]])],
        ];
        let p: [f64; 4] = [8.0 / 9.0, 5.0 / 7.0, 0.6, 0.25];
        let want = (1.0f64 - 10.0 / 9.0).exp() * p.iter().map(|p| 0.25 * p.ln()).sum::<f64>().exp();
        let got = bleu("", &batches);
        assert!((got - want).abs() < 1e-15, "{got} vs {want}");
        assert!((got - 0.497_104_543_753_140_1).abs() < 1e-15, "{got}");
    }

    #[test]
    fn smoothing_replaces_missing_orders_and_no_unigram_gives_zero() {
        // No 3- or 4-gram matches: method 4 gives 1/(2^k·5/ln(hyp_len)) / total for them.
        let batches = vec![vec![rows(&[&[1, 2, 3, 4]]), rows(&[&[1, 2, 4, 3]])]];
        let ln4 = 4f64.ln();
        let p = [
            1.0,
            1.0 / 3.0,
            1.0 / (2.0 * 5.0 / ln4) / 2.0,
            1.0 / (4.0 * 5.0 / ln4) / 1.0,
        ];
        let want = p.iter().map(|p| 0.25 * p.ln()).sum::<f64>().exp();
        let got = bleu("", &batches);
        assert!((got - want).abs() < 1e-15, "{got} vs {want}");
        // NLTK: corpus_bleu([[[1,2,3,4]]], [[1,2,4,3]], smoothing_function=…method4).
        assert!((got - 0.200_047_172_258_023_76).abs() < 1e-15, "{got}");
        let none = vec![vec![rows(&[&[1, 2, 3]]), rows(&[&[4, 5, 6]])]];
        assert_eq!(bleu("", &none), 0.0);
        // Padding is not a token: identical sentences padded differently score 1.
        let padded = vec![vec![
            rows(&[&[5, 6, 7, 8, 9, 0, 0]]),
            rows(&[&[5, 6, 7, 8, 9]]),
        ]];
        assert_eq!(bleu("n_gram = 2", &padded), 1.0);
    }
}
