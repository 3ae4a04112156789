#!/usr/bin/env python3
"""Renders conversations through each real model's `tokenizer.chat_template` the way
llama-cpp-python 0.3.36 does (its Jinja2ChatFormatter: jinja2's sandboxed environment with
trim_blocks and lstrip_blocks, as Hugging Face's apply_chat_template), and writes the prompts
as the fixture crates/llama/tests/fixtures/chat.json that tests/chat.rs compares Tessera with.

    python3 crates/llama/tools/make_chat_refs.py MODELS_DIR > crates/llama/tests/fixtures/chat.json
"""
import json
import sys

from llama_cpp import Llama
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Name three primes."},
        {"role": "assistant", "content": "2, 3, 5."},
        {"role": "user", "content": "  And the next one?  "},
    ],
]

out = {}
for name in ["smollm2-135m-instruct-q4_1", "qwen2.5-coder-0.5b-instruct-q4_k_m"]:
    llm = Llama(model_path=f"{sys.argv[1]}/{name}.gguf", vocab_only=True, verbose=False)
    template = llm.metadata["tokenizer.chat_template"]
    text = lambda t: llm._model.token_get_text(t) if t >= 0 else ""
    cases = []
    for messages in CONVERSATIONS:
        for add_generation_prompt in [True, False]:
            fmt = Jinja2ChatFormatter(
                template, eos_token=text(llm.token_eos()), bos_token=text(llm.token_bos()),
                add_generation_prompt=add_generation_prompt)
            cases.append({"messages": messages, "add_generation_prompt": add_generation_prompt,
                          "prompt": fmt(messages=messages).prompt})
    out[name] = cases
json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
print()
