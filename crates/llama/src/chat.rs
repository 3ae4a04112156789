//! Chat templates: the Jinja template in `tokenizer.chat_template`, rendered with minijinja
//! (with Python string methods such as `.strip()` that Hugging Face templates call), as
//! llama.cpp's `common_chat_apply_template` does.

use crate::{LlamaError, Result};
use tessera_vocab::Vocab;

/// Renders `messages` (role, content) through `template`; `add_generation_prompt` opens the
/// assistant's turn. `bos_token` / `eos_token` are the vocabulary's.
pub fn apply(
    template: &str,
    messages: &[(&str, &str)],
    add_generation_prompt: bool,
    vocab: &Vocab,
) -> Result<String> {
    let msgs: Vec<minijinja::Value> = messages
        .iter()
        .map(|(role, content)| minijinja::context! { role => *role, content => *content })
        .collect();
    render(template, minijinja::Value::from(msgs), None, add_generation_prompt, vocab, None)
}

/// Renders messages given as any serializable list of objects (`role`, `content`, and what
/// else the template reads: `tool_calls` with object `arguments`, `tool_call_id`, `name`),
/// and OpenAI's `tools` list as the template's `tools` variable when given, as llama.cpp's
/// `--jinja` renders them. `kwargs` (an object) adds variables, as llama-server's
/// `chat_template_kwargs` (`enable_thinking`, ...).
pub fn apply_structured<M: serde::Serialize, T: serde::Serialize, K: serde::Serialize>(
    template: &str,
    messages: &M,
    tools: Option<&T>,
    add_generation_prompt: bool,
    vocab: &Vocab,
    kwargs: Option<&K>,
) -> Result<String> {
    render(
        template,
        minijinja::Value::from_serialize(messages),
        tools.map(minijinja::Value::from_serialize),
        add_generation_prompt,
        vocab,
        kwargs.map(minijinja::Value::from_serialize),
    )
}

/// Whether `template` reads a `tools` variable (renders tool definitions itself).
pub fn reads_tools(template: &str) -> bool {
    template.contains("tools")
}

fn render(
    template: &str,
    msgs: minijinja::Value,
    tools: Option<minijinja::Value>,
    add_generation_prompt: bool,
    vocab: &Vocab,
    kwargs: Option<minijinja::Value>,
) -> Result<String> {
    let mut env = minijinja::Environment::new();
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
        },
    );
    env.add_template("chat", template).map_err(|e| LlamaError::Template(e.to_string()))?;
    let tok = |id: Option<u32>| {
        id.map(|t| String::from_utf8_lossy(&vocab.token_to_piece(t, true)).into_owned())
            .unwrap_or_default()
    };
    env.get_template("chat")
        .and_then(|t| {
            t.render(minijinja::context! {
                messages => msgs,
                tools => tools,
                add_generation_prompt => add_generation_prompt,
                bos_token => tok(vocab.bos()),
                eos_token => tok(vocab.eos()),
                ..kwargs.unwrap_or_default()
            })
        })
        .map_err(|e| LlamaError::Template(e.to_string()))
}
