//! Structured output with llguidance (the constrained-decoding library llama.cpp and
//! mistral.rs use): the model's vocabulary as llguidance's token trie, JSON schemas and Lark
//! grammars compiled per request into a [`Matcher`] that masks every token the output could
//! not continue with.

use crate::api::ApiError;
use crate::ServerError;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;
use std::sync::Arc;
use tessera_llama::Model;

/// What a request constrains its output to.
#[derive(Debug, Clone, PartialEq)]
pub enum Constraint {
    /// A JSON schema (`response_format` `json_schema` / `json_object`, llama-server's
    /// `json_schema`).
    JsonSchema(Value),
    /// A grammar in llguidance's Lark syntax (from the `grammar` field's GBNF).
    Lark(String),
}

/// The vocabulary for llguidance: each token's bytes (control tokens marked with 0xFF, as
/// llguidance expects), and tokenization through the model's own tokenizer.
struct VocabEnv {
    trie: TokTrie,
    model: Arc<Model>,
}

impl TokenizerEnv for VocabEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.model.vocab.tokenize(&String::from_utf8_lossy(s), false, false)
    }
}

/// Compiles constraints for one model (the token trie and llguidance's slices are built once).
pub struct Constrainer {
    factory: ParserFactory,
    /// The token that ends a constrained reply (end of turn, else end of text).
    pub eos: u32,
}

impl Constrainer {
    /// Builds the trie of `model`'s vocabulary.
    pub fn new(model: Arc<Model>) -> crate::Result<Self> {
        let v = &model.vocab;
        let n = v.n_tokens();
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|t| {
                let plain = v.token_to_piece(t, false);
                if plain.is_empty() {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend(v.token_to_piece(t, true));
                    w
                } else {
                    plain
                }
            })
            .collect();
        let eos = v.eot().or(v.eos()).ok_or_else(|| {
            ServerError::Constraint("the vocabulary has no end-of-text token".into())
        })?;
        let mut info = TokRxInfo::new(n as u32, eos);
        info.tok_bos = v.bos();
        info.tok_end_of_turn = v.eot();
        let trie = TokTrie::from(&info, &words);
        let env: llguidance::toktrie::TokEnv = Arc::new(VocabEnv { trie, model });
        let factory =
            ParserFactory::new_simple(&env).map_err(|e| ServerError::Constraint(e.to_string()))?;
        Ok(Constrainer { factory, eos })
    }

    /// A matcher for `c`; a 400 naming `param` when the schema or grammar does not compile.
    pub fn matcher(&self, c: &Constraint, param: &str) -> Result<Matcher, ApiError> {
        let grammar = match c {
            Constraint::JsonSchema(s) => TopLevelGrammar::from_json_schema(s.clone()),
            Constraint::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
        };
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| ApiError::field(param, format!("cannot be compiled: {e}")))?;
        let m = Matcher::new(Ok(parser));
        if let Some(e) = m.get_error() {
            return Err(ApiError::field(param, format!("cannot be compiled: {e}")));
        }
        Ok(m)
    }
}

/// Sets the logits of every token `m` does not allow to -inf; an error if the matcher failed.
pub fn mask_logits(m: &mut Matcher, logits: &mut [f32]) -> crate::Result<()> {
    let mask = m.compute_mask_or_eos().map_err(|e| ServerError::Decoding(e.to_string()))?;
    for (t, l) in logits.iter_mut().enumerate() {
        if !mask.is_allowed(t as TokenId) {
            *l = f32::NEG_INFINITY;
        }
    }
    Ok(())
}
