//! Structured output with llguidance (the constrained-decoding library llama.cpp and
//! mistral.rs use): the model's vocabulary as llguidance's token trie, JSON schemas and Lark
//! grammars compiled per request into a [`Matcher`] that masks every token the output could
//! not continue with.

use crate::error::ApiError;
use crate::ServerError;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokRxInfo, TokTrie, TokenId, TokenizerEnv};
pub use llguidance::Matcher;
use llguidance::ParserFactory;
use serde_json::Value;
use std::sync::Arc;
use tessera_llama::sampling::TokenMask;
use tessera_llama::{Model, Vocab};

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
            .map_err(|e| ApiError::field(param, format!("cannot be compiled: {}", short(&e))))?;
        let mut m = Matcher::new(Ok(parser));
        if let Some(e) = m.get_error() {
            return Err(ApiError::field(param, format!("cannot be compiled: {}", short(&e))));
        }
        // Run once here, at admission: a grammar that compiles but cannot run (left
        // recursion, huge repetitions, too many alternatives) is the client's 400 before the
        // request is queued, not a failure in the middle of a reply.
        // Some limits are met only once a lexeme is read (rows of too many items, forced
        // tokens): a copy takes one allowed token and computes the next mask too.
        let run = |m: &mut Matcher| -> Result<(), String> {
            let mask = m.compute_mask().map_err(|e| e.to_string())?;
            let mut probe = m.deep_clone();
            if let Some(t) = mask.iter().find(|&t| t != self.eos) {
                probe.consume_token(t).map_err(|e| e.to_string())?;
                probe.compute_mask().map_err(|e| e.to_string())?;
            }
            Ok(())
        };
        if let Err(e) = run(&mut m) {
            return Err(ApiError::field(param, format!("cannot be run: {}", short(&e))));
        }
        Ok(m)
    }
}

/// The first line of llguidance's message, at most 200 characters (its messages can carry
/// the parser's whole state).
pub fn short(e: &impl std::fmt::Display) -> String {
    let text = e.to_string();
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let mut out: String = line.chars().take(200).collect();
    if out.len() < line.len() {
        out.push('…');
    }
    out
}

/// A request's matcher as the sampling step's mask: the tokens its grammar does not allow
/// get −∞, and each chosen token advances it (an end-of-generation token ends the reply
/// instead). Errors are llguidance's message, shortened.
pub struct GrammarMask<'a> {
    /// The request's matcher.
    pub matcher: &'a mut Matcher,
    /// The model's vocabulary (its end-of-generation tokens).
    pub vocab: &'a Vocab,
}

impl TokenMask for GrammarMask<'_> {
    type Error = String;

    fn mask(&mut self, logits: &mut [f32]) -> Result<(), String> {
        mask_logits(self.matcher, logits).map_err(|e| short(&e))
    }

    fn accept(&mut self, token: u32) -> Result<(), String> {
        if self.vocab.is_eog(token) {
            return Ok(());
        }
        self.matcher.consume_token(token).map(|_| ()).map_err(|e| short(&e))
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
