#!/usr/bin/env python3
"""llama.cpp's log-probabilities after a prompt with an image, the reference for tessera-mtmd's
chunk evaluation (tests/image_prompt.rs).

Gemma-3-270M (text only, but Gemma 3's vocabulary and graph) with the tests' random Gemma 3
projector made for its width (`cargo run -p tessera-mtmd --example write_mmproj -- OUT 640`):
through llama.cpp b11312 (llama-cpp-python 0.3.36; flash attention, its default repacked
weights, 2 threads, n_ctx 512), `mtmd_tokenize` of PROMPT with IMAGE at its marker, then
`mtmd_helper_eval_chunks` (the image's embeddings decoded with non-causal attention), then
STEPS greedy tokens decoded one at a time. Records the chunks (text tokens; image token
counts), and after the prompt and each step the top-5 log-probabilities (log-softmax in
float64 of the float32 logits), the token and the top-2 margin. Writes
crates/mtmd/tests/fixtures/image_prompt_LEVEL.json.

Each SIMD level needs its own reference: run with the python of a llama-cpp-python built with
the level's explicit flags (tools/make_ref_set.sh); its libmtmd, if it has none, comes from
another 0.3.36 build through MTMD_CPP_LIB (it then uses the level's libllama and libggml,
already loaded).

Usage: MTMD_CPP_LIB=DIR VENV/bin/python crates/mtmd/tools/llama_cpp_image_prompt.py LEVEL \\
    BUILD_FLAGS GEMMA3.gguf MMPROJ.gguf IMAGE OUT.json [idefics3]

With `idefics3`: SmolLM2-135M-Instruct given Idefics3's image tokens (`write_mmproj
--idefics3-lm SRC DST`) and the tests' random Idefics3 projector of its width (`write_mmproj
--idefics3 OUT 576`), a ChatML prompt: the image becomes its tiles and overview, causal.
With `qwen25vl`: the random Qwen2-VL language model `synth-qwen2vl-q8_0` (`cargo xtask
synth-models DIR`) and the tests' random Qwen2.5-VL projector of its width (`write_mmproj
--qwen25vl OUT 256`): the image at its own size, M-RoPE grid positions.
"""
import ctypes
import json
import os
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama
from llama_cpp import mtmd_cpp as m

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "llama", "tools"))
from lcp_ref import cpu_flags, margin, top  # noqa: E402

PROMPT = ("<start_of_turn>user\nWhat is in this picture? <__media__> Answer in one word."
          "<end_of_turn>\n<start_of_turn>model\n")
STEPS = 10
TOP = 5


PROMPTS = {
    "gemma3": PROMPT,
    "idefics3": ("<|im_start|>user\n<__media__>What is in this picture? Answer in one word."
                 "<|im_end|>\n<|im_start|>assistant\n"),
    "qwen25vl": ("<|im_start|>user\n<__media__>What is in this picture? Answer in one word."
                 "<|im_end|>\n<|im_start|>assistant\n"),
}


def main():
    level, flags_used, model, mmproj, image, out_path = sys.argv[1:7]
    prompt = PROMPTS[sys.argv[7] if len(sys.argv) > 7 else "gemma3"]
    llm = Llama(model_path=model, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2,
                n_threads_batch=2, flash_attn=True, verbose=False)
    p = m.mtmd_context_params_default()
    p.use_gpu = False
    p.n_threads = 2
    p.print_timings = False
    p.flash_attn_type = 1
    mctx = m.mtmd_init_from_file(mmproj.encode(), llm.model, p)
    assert mctx, "mtmd_init_from_file failed"
    w = m.mtmd_helper_bitmap_init_from_file_wrapper(mctx, image.encode(), False,
                                                    m.mtmd_helper_init_opt_default())
    assert w.bitmap, "the image did not load"
    chunks = m.mtmd_input_chunks_init()
    text = m.mtmd_input_text(prompt.encode(), len(prompt.encode()), True, True)
    bitmaps = (m.mtmd_bitmap_p_ctypes * 1)(w.bitmap)
    assert m.mtmd_tokenize(mctx, chunks, ctypes.byref(text), bitmaps, 1) == 0
    desc = []
    for i in range(m.mtmd_input_chunks_size(chunks)):
        c = m.mtmd_input_chunks_get(chunks, i)
        kind = m.mtmd_input_chunk_get_type(c)
        n = m.mtmd_input_chunk_get_n_tokens(c)
        if kind == 0:
            n_out = ctypes.c_size_t()
            toks = m.mtmd_input_chunk_get_tokens_text(c, ctypes.byref(n_out))
            desc.append({"type": "text", "tokens": [toks[j] for j in range(n_out.value)]})
        else:
            desc.append({"type": "image", "n_tokens": n})
    new_n_past = llama_cpp.llama_pos(0)
    assert m.mtmd_helper_eval_chunks(mctx, llm.ctx, chunks, 0, 0, 512, True,
                                     ctypes.byref(new_n_past)) == 0
    n_vocab = llm.n_vocab()

    def logits():
        ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(n_vocab,)).astype(np.float32).copy()

    lg = logits()
    steps = [{"top": top(lg, TOP), "margin": margin(lg)}]
    for _ in range(STEPS):
        t = int(np.argmax(lg))
        arr = (llama_cpp.llama_token * 1)(t)
        assert llama_cpp.llama_decode(llm.ctx, llama_cpp.llama_batch_get_one(arr, 1)) == 0
        lg = logits()
        steps.append({"token": t, "top": top(lg, TOP), "margin": margin(lg)})
    print(f"{len(desc)} chunks, n_past {new_n_past.value}, greedy {[s.get('token') for s in steps[1:]]}")
    out = {"made_by": "crates/mtmd/tools/llama_cpp_image_prompt.py with llama-cpp-python "
                      f"{llama_cpp.__version__} (llama.cpp b11312), mtmd_tokenize + "
                      "mtmd_helper_eval_chunks, flash attention, 2 threads, n_ctx 512",
           "simd_level": level, "build": flags_used, "cpu": cpu_flags(), "prompt": prompt,
           "image": os.path.basename(image), "n_past": new_n_past.value, "chunks": desc,
           "steps": steps}
    with open(out_path, "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main()
