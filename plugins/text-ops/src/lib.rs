//! Text NumpyOps for fe-host pipelines.
//!
//! * [`tokenize`]: `Tokenize`, text to ids (and attention mask, type ids) with a Hugging Face
//!   `tokenizer.json`, equal to what the Python `tokenizers` package gives for that file;
//! * [`word_to_id`]: `WordtoId`, FastEstimator's word-by-word lookup in a plain vocabulary.
//!
//! Texts arrive as the host carries them: a 1-D uint8 tensor of UTF-8 per sample (CSV string
//! columns, WebDataset `.txt` members). Ids leave as int64 (what `Embedding` takes). See the
//! crate's README for every field and a manifest snippet.
#![warn(missing_docs)]

mod text;
pub mod tokenize;
pub mod word_to_id;

pub use tokenize::{Padding, Side, Tokenize, TokenizeConfig, Truncation};
pub use word_to_id::{Unknown, WordtoId, WordtoIdConfig};

use fe_plugin_api::{inventory, Field, Registration};

inventory::submit! {
    Registration::numpy_op::<Tokenize>("Tokenize", "Text to int64 ids (+ attention mask, type ids) with a Hugging Face tokenizer.json")
    .fields(&[
        Field::required("tokenizer", "string (path)", "The tokenizer.json (BPE, WordPiece, Unigram, WordLevel), relative to the manifest"),
        Field::optional("max_length", "integer", "none (the file's settings)", "Length to truncate and pad to"),
        Field::optional("truncation", "bool | \"longest_first\" | \"only_first\" | \"only_second\" | \"do_not_truncate\"", "on with max_length, else the file's", "Whether and how to cut sequences longer than max_length"),
        Field::optional("padding", "bool | \"max_length\" | \"do_not_pad\"", "\"max_length\" with max_length, else the file's", "Pad every sequence to max_length, so batches stack"),
        Field::optional("add_special_tokens", "bool", "true", "Add the post-processor's special tokens ([CLS], [SEP], <s>, ...)"),
        Field::optional("pad_id", "integer", "the file's, else [PAD] / <pad> / <|padding|>", "Id written by padding (mask 0 there)"),
        Field::optional("stride", "integer", "0", "Tokens a truncated sequence shares with its (dropped) overflow"),
        Field::optional("truncation_side", "\"left\" | \"right\"", "\"right\"", "Which end truncation cuts"),
        Field::optional("padding_side", "\"left\" | \"right\"", "\"right\"", "Which end padding fills"),
    ])
}
inventory::submit! {
    Registration::numpy_op::<WordtoId>("WordtoId", "Each whitespace-separated word to its int64 id in a vocabulary (FastEstimator's WordtoId)")
    .fields(&[
        Field::optional("vocab", "string (path)", "none (give vocab or mapping)", "Vocabulary file, one word per line, id = line number from 0; relative to the manifest"),
        Field::optional("mapping", "table of word = integer", "none (give vocab or mapping)", "The vocabulary inline"),
        Field::optional("unk", "integer | string", "none (unknown words are an error)", "Id of unknown words, or a vocabulary word whose id they take"),
        Field::optional("lowercase", "bool", "false", "Lower-case the text before looking words up"),
    ])
}

fe_plugin_api::export_plugin!();

#[cfg(test)]
mod tests {
    use fe_plugin_api::{find_registration, ComponentKind};

    #[test]
    fn every_op_is_registered_as_a_numpy_op() {
        for name in ["Tokenize", "WordtoId"] {
            let registration = find_registration(ComponentKind::NumpyOp, name);
            assert!(registration.is_some_and(|r| !r.doc().is_empty()), "{name}");
        }
    }
}
