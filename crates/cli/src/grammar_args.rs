//! Constrained output for `tessera run`, as llama.cpp's flags: `--grammar` / `--grammar-file`
//! (GBNF) and `-j/--json-schema` / `--json-schema-file`. The grammar is compiled by the
//! server crate's llguidance matcher (GBNF rewritten to Lark, as `tessera serve`'s `grammar`
//! field), and masks every token the output could not continue with at each sampling step;
//! in a conversation (`-cnv`) every reply follows it, from the grammar's start (llama-cli
//! resets its grammar each turn).

use anyhow::{anyhow, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use tessera_llama::Model;
use tessera_server::chat::constrain::{Constrainer, Constraint, Matcher};

/// Grammar options (llama.cpp's names; one at most).
#[derive(Args, Debug, Clone, Default)]
pub struct GrammarArgs {
    /// A GBNF grammar the output must follow.
    #[arg(long, value_name = "GRAMMAR", group = "constraint")]
    grammar: Option<String>,
    /// Read the GBNF grammar from a file.
    #[arg(long = "grammar-file", value_name = "FILE", group = "constraint")]
    grammar_file: Option<PathBuf>,
    /// A JSON schema the output must follow (`{}`: any JSON object).
    #[arg(short = 'j', long = "json-schema", value_name = "SCHEMA", group = "constraint")]
    json_schema: Option<String>,
    /// Read the JSON schema from a file.
    #[arg(
        long = "json-schema-file",
        visible_alias = "jf",
        value_name = "FILE",
        group = "constraint"
    )]
    json_schema_file: Option<PathBuf>,
}

impl GrammarArgs {
    /// The constraint given, compiled for `model`; `None` without one.
    pub fn matcher(&self, model: &Arc<Model>) -> Result<Option<Matcher>> {
        self.compile(model)?.map(|c| c.matcher()).transpose()
    }

    /// The constraint given, ready to make a fresh matcher per reply; `None` without one.
    pub fn compile(&self, model: &Arc<Model>) -> Result<Option<Compiled>> {
        let read = |p: &PathBuf| {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
        };
        let (constraint, flag) = if let Some(g) = &self.grammar {
            (lark(g, "--grammar")?, "--grammar")
        } else if let Some(p) = &self.grammar_file {
            (lark(&read(p)?, "--grammar-file")?, "--grammar-file")
        } else if let Some(s) = &self.json_schema {
            (schema(s, "--json-schema")?, "--json-schema")
        } else if let Some(p) = &self.json_schema_file {
            (schema(&read(p)?, "--json-schema-file")?, "--json-schema-file")
        } else {
            return Ok(None);
        };
        let constrainer = Constrainer::new(model.clone()).map_err(|e| anyhow!("{flag}: {e}"))?;
        let compiled = Compiled { constrainer, constraint, flag };
        compiled.matcher()?;
        Ok(Some(compiled))
    }
}

/// A grammar or schema with the model's vocabulary for llguidance: a fresh [`Matcher`] per
/// reply.
pub struct Compiled {
    constrainer: Constrainer,
    constraint: Constraint,
    flag: &'static str,
}

impl Compiled {
    /// A matcher at the start of the grammar.
    pub fn matcher(&self) -> Result<Matcher> {
        self.constrainer.matcher(&self.constraint, self.flag).map_err(|e| anyhow!("{}", e.message))
    }
}

fn lark(gbnf: &str, flag: &str) -> Result<Constraint> {
    let lark = tessera_server::chat::gbnf::to_lark(gbnf).map_err(|e| anyhow!("{flag}: {e}"))?;
    Ok(Constraint::Lark(lark))
}

fn schema(text: &str, flag: &str) -> Result<Constraint> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| anyhow!("{flag}: not JSON: {e}"))?;
    if !v.is_object() {
        return Err(anyhow!("{flag}: a JSON schema is an object"));
    }
    Ok(Constraint::JsonSchema(v))
}
