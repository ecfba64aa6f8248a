//! Short English-like sentences about one of four topics (sport, food, weather, music), as
//! CSV files (`<split>.csv`: `text`, `label`), and a word-level `tokenizer.json` trained on the
//! training split with the Rust `tokenizers` trainer — so the text example needs neither a
//! download nor Python. Each sentence mixes filler words shared by every topic with a few
//! words of its own topic (and now and then one of another topic's), so a bag of words
//! solves it and chance is 1 / 4.

use std::fmt::Write as _;
use std::path::Path;

use rand::seq::IndexedRandom;
use rand::Rng;
use tokenizers::models::wordlevel::{WordLevel, WordLevelTrainer};
use tokenizers::models::TrainerWrapper;
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer};

use super::splits::{self, Spec};
use crate::error::{Error, Result};

/// Words of each topic, by label.
const TOPICS: [&[&str]; 4] = [
    &[
        "football", "goal", "match", "team", "referee", "stadium", "coach", "league", "player",
        "score", "penalty", "season",
    ],
    &[
        "recipe", "soup", "bread", "oven", "garlic", "dinner", "spicy", "kitchen", "chef",
        "butter", "noodles", "café",
    ],
    &[
        "rain",
        "storm",
        "sunny",
        "forecast",
        "wind",
        "clouds",
        "snow",
        "temperature",
        "fog",
        "humid",
        "thunder",
        "breeze",
    ],
    &[
        "guitar",
        "concert",
        "melody",
        "drums",
        "album",
        "singer",
        "chorus",
        "piano",
        "song",
        "rhythm",
        "orchestra",
        "naïve",
    ],
];

/// Words every topic uses.
const FILLER: [&str; 40] = [
    "the",
    "a",
    "we",
    "they",
    "today",
    "yesterday",
    "really",
    "very",
    "some",
    "and",
    "but",
    "was",
    "is",
    "were",
    "after",
    "before",
    "with",
    "without",
    "our",
    "their",
    "new",
    "old",
    "good",
    "bad",
    "again",
    "then",
    "about",
    "quite",
    "long",
    "short",
    "in",
    "on",
    "at",
    "for",
    "people",
    "everyone",
    "week",
    "morning",
    "Zürich",
    "said",
];

/// Vocabulary size the trainer aims at (the example's `vocab`): small enough that rarer
/// words are split into word pieces.
pub const VOCAB: usize = 200;

/// Special tokens, in id order: `[PAD]` is 0, as `Embedding`s conventionally reserve it.
const SPECIAL: [&str; 4] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"];

fn sentence(rng: &mut impl Rng) -> (String, usize) {
    let label = rng.random_range(0..TOPICS.len());
    let words = rng.random_range(6..=16);
    let mut text = String::new();
    for i in 0..words {
        let roll: f64 = rng.random();
        let topic = if roll < 0.3 {
            label
        } else if roll < 0.34 {
            rng.random_range(0..TOPICS.len())
        } else {
            usize::MAX
        };
        let word = match TOPICS.get(topic) {
            Some(words) => words.choose(rng),
            None => FILLER.choose(rng),
        }
        .copied()
        .unwrap_or("the");
        if i > 0 {
            text.push(' ');
        }
        text.push_str(word);
    }
    text.push('.');
    (text, label)
}

/// The sentences and labels of one split.
pub fn split(seed: u64, split_id: u64, count: usize) -> Vec<(String, usize)> {
    (0..count)
        .map(|index| sentence(&mut splits::sample_rng(seed, split_id, index)))
        .collect()
}

/// A BERT-style word-level tokenizer (lower-casing, accent stripping, punctuation split,
/// `[CLS] A [SEP]`) trained on `texts`.
///
/// Word level, not WordPiece or BPE: the crate's subword trainers break ties between equally
/// frequent pairs in hash order, so one seed gave different vocabularies run to run. A word
/// vocabulary depends only on which words occur (all fit in [`VOCAB`]); its ids, which the
/// trainer also orders by hash among equal counts, are then renumbered: special tokens
/// first, then the words sorted.
pub fn train_tokenizer(texts: &[String]) -> Result<Tokenizer> {
    // The corpus and settings are fixed, so a failure here is a bug, not a user's mistake.
    let bad = |e: tokenizers::Error| Error::Internal(format!("training the tokenizer: {e}"));
    let mut tokenizer = Tokenizer::new(
        WordLevel::builder()
            .unk_token("[UNK]".to_owned())
            .build()
            .map_err(bad)?,
    );
    tokenizer
        .with_normalizer(Some(BertNormalizer::default()))
        .with_pre_tokenizer(Some(BertPreTokenizer));
    let mut trainer: TrainerWrapper = WordLevelTrainer::builder()
        .vocab_size(VOCAB)
        .show_progress(false)
        .special_tokens(SPECIAL.iter().map(|t| AddedToken::from(*t, true)).collect())
        .build()
        .map_err(|e| Error::Internal(format!("tokenizer trainer: {e}")))?
        .into();
    tokenizer.train(&mut trainer, texts.iter()).map_err(bad)?;
    let template = TemplateProcessing::builder()
        .try_single("[CLS] $A [SEP]")
        .map_err(|e| Error::Internal(format!("tokenizer template: {e}")))?
        .try_pair("[CLS] $A [SEP] $B:1 [SEP]:1")
        .map_err(|e| Error::Internal(format!("tokenizer template: {e}")))?
        .special_tokens(vec![("[CLS]", 2), ("[SEP]", 3)])
        .build()
        .map_err(|e| Error::Internal(format!("tokenizer template: {e}")))?;
    tokenizer.with_post_processor(Some(template));
    renumbered(&tokenizer)
}

/// `tokenizer` (word level) with its ids in a fixed order: `SPECIAL` first, then the words.
fn renumbered(tokenizer: &Tokenizer) -> Result<Tokenizer> {
    let bad = |e: String| Error::Internal(format!("renumbering the tokenizer: {e}"));
    let text = tokenizer.to_string(false).map_err(|e| bad(e.to_string()))?;
    let mut json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let Some(vocab) = json
        .pointer_mut("/model/vocab")
        .and_then(|v| v.as_object_mut())
    else {
        return Err(bad("no model.vocab".to_owned()));
    };
    let mut words: Vec<String> = vocab
        .keys()
        .filter(|w| !SPECIAL.contains(&w.as_str()))
        .cloned()
        .collect();
    words.sort();
    *vocab = SPECIAL
        .iter()
        .map(|t| (*t).to_owned())
        .chain(words)
        .enumerate()
        .map(|(id, word)| (word, serde_json::Value::from(id)))
        .collect();
    json.to_string()
        .parse::<Tokenizer>()
        .map_err(|e| bad(e.to_string()))
}

fn csv(rows: &[(String, usize)]) -> String {
    let mut out = String::from("text,label\n");
    for (text, label) in rows {
        // Sentences hold no quote, comma or line break, but quoting keeps the file valid CSV
        // whatever the word lists become.
        let _ = writeln!(out, "\"{}\",{label}", text.replace('"', "\"\""));
    }
    out
}

/// Writes `<split>.csv` for each split and `tokenizer.json` (trained on the train split, or
/// on the first split written when there is none) into `dir`, and `MANIFEST` last.
pub fn write(dir: &Path, spec: Spec) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let marker = dir.join("MANIFEST");
    let _ = std::fs::remove_file(&marker);
    let mut record = format!(
        "fe-host synthetic text v1\nseed = {}\nvocab = {VOCAB}\n",
        spec.seed
    );
    let mut corpus: Option<Vec<String>> = None;
    for (name, id, count) in [
        ("train", 0u64, spec.train),
        ("eval", 1, spec.eval),
        ("test", 2, spec.test),
    ] {
        if count == 0 {
            continue;
        }
        let rows = split(spec.seed, id, count);
        let path = dir.join(format!("{name}.csv"));
        std::fs::write(&path, csv(&rows)).map_err(|e| Error::io(&path, e))?;
        corpus.get_or_insert_with(|| rows.into_iter().map(|(t, _)| t).collect());
        let _ = writeln!(record, "{name} = {count}");
    }
    let Some(corpus) = corpus else {
        return Err(Error::Usage(
            "nothing to generate: every split has 0 samples".to_owned(),
        ));
    };
    let path = dir.join("tokenizer.json");
    let json = train_tokenizer(&corpus)?
        .to_string(true)
        .map_err(|e| Error::Internal(format!("serializing the tokenizer: {e}")))?;
    std::fs::write(&path, json).map_err(|e| Error::io(&path, e))?;
    std::fs::write(&marker, record).map_err(|e| Error::io(&marker, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_are_deterministic_and_carry_their_topic() {
        let a = split(3, 0, 300);
        assert_eq!(a, split(3, 0, 300));
        assert_ne!(a, split(4, 0, 300));
        let mut right = 0;
        for (text, label) in &a {
            let votes: Vec<usize> = (0..4)
                .map(|t| {
                    text.trim_end_matches('.')
                        .split(' ')
                        .filter(|w| TOPICS[t].contains(w))
                        .count()
                })
                .collect();
            right += usize::from((0..4).all(|t| t == *label || votes[t] < votes[*label]));
        }
        // A bag of words gets most of them right; chance is a quarter.
        assert!(right > 200, "{right} of 300");
    }

    #[test]
    fn the_trained_tokenizer_pads_with_zero_and_wraps_in_cls_sep() {
        let texts: Vec<String> = split(1, 0, 400).into_iter().map(|(t, _)| t).collect();
        let tokenizer = train_tokenizer(&texts).unwrap();
        assert_eq!(tokenizer.token_to_id("[PAD]"), Some(0));
        assert!(tokenizer.get_vocab_size(true) <= VOCAB);
        let encoding = tokenizer.encode("The Football match", true).unwrap();
        let ids = encoding.get_ids();
        assert_eq!((ids[0], ids[ids.len() - 1]), (2, 3));
        assert!(!ids.contains(&1), "known words are not [UNK]: {ids:?}");
    }

    #[test]
    fn one_corpus_gives_one_tokenizer_file() {
        // The trainer counts words in hash maps whose order changes from run to run (and
        // from call to call); the file must not.
        let texts: Vec<String> = split(2, 0, 500).into_iter().map(|(t, _)| t).collect();
        let files: Vec<String> = (0..4)
            .map(|_| train_tokenizer(&texts).unwrap().to_string(true).unwrap())
            .collect();
        assert!(files.windows(2).all(|w| w[0] == w[1]));
        assert!(files[0].contains("\"football\""), "{}", files[0]);
    }
}
