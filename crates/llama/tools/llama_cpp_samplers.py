#!/usr/bin/env python3
"""Seeded tokens from llama.cpp's sampler chain, the reference for tessera-llama's samplers.

For each case of CASES, builds the chain llama.cpp's `common_sampler_init` builds for those
parameters (logit bias, then the steps in order with `temp_ext` for the temperature and the
seeded `dist` last; or temperature and mirostat), through the C API of llama.cpp b11312
(llama-cpp-python 0.3.36), feeds it a history and then one logit vector per step, and
records the token it selects at each step (accepting it before the next). The logits are
made by a generator both sides compute exactly (see `logits`), and DRY's sequence breakers
are turned into tokens with the GPT-2 vocabulary of testdata/vocab, so the fixture holds
only parameters and tokens (crates/llama/tests/fixtures/samplers.json, read by
crates/llama/tests/samplers.rs).

Usage: python3 crates/llama/tools/llama_cpp_samplers.py VOCAB.gguf \
    crates/llama/tests/fixtures/samplers.json
(VOCAB.gguf: testdata/vocab/ggml-vocab-gpt-2.gguf.gz unpacked). Needs llama-cpp-python
0.3.36; the result does not depend on the CPU (the samplers are scalar float code).
"""
import ctypes
import json
import sys

import llama_cpp as L

N = 2048  # candidates per step (token ids 0..N-1 of the vocabulary)
STEPS = 48
# Tokens made likely, so that repetitions (and DRY's breakers ':' 25 and '\n' 198) occur.
HOT = [11, 13, 25, 198, 262, 286, 290, 284, 318, 257, 30, 0]
HISTORY = [262, 286, 25, 198, 262, 286, 290, 11, 262, 286, 25, 198, 13, 257, 262, 286]

DEFAULTS = dict(
    temp=0.8, top_k=40, top_p=0.95, min_p=0.05, typical_p=1.0, repeat_penalty=1.0,
    repeat_last_n=64, frequency_penalty=0.0, presence_penalty=0.0, seed=1234, min_keep=0,
    dynatemp_range=0.0, dynatemp_exponent=1.0, xtc_probability=0.0, xtc_threshold=0.1,
    top_n_sigma=-1.0, dry_multiplier=0.0, dry_base=1.75, dry_allowed_length=2,
    dry_penalty_last_n=64, dry_sequence_breakers=["\n", ":", "\"", "*"], mirostat=0,
    mirostat_tau=5.0, mirostat_eta=0.1,
    order=["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
           "temperature"],
    logit_bias=[],
)

CASES = {
    "default": {},
    "penalties": dict(repeat_penalty=1.3, frequency_penalty=0.4, presence_penalty=0.3),
    "dry": dict(temp=1.0, dry_multiplier=0.8, dry_allowed_length=1),
    "dry_no_breakers": dict(temp=1.0, dry_multiplier=1.2, dry_base=2.0,
                            dry_allowed_length=1, dry_sequence_breakers=[]),
    "dry_own_breakers": dict(temp=1.0, dry_multiplier=0.8, dry_allowed_length=1,
                             dry_penalty_last_n=32, dry_sequence_breakers=[" the", ".\n"]),
    "xtc": dict(temp=1.0, top_k=0, min_p=0.0, xtc_probability=0.6, xtc_threshold=0.05,
                min_keep=1),
    "top_n_sigma": dict(temp=1.2, top_k=0, top_p=1.0, min_p=0.0, top_n_sigma=1.0),
    "dynatemp": dict(dynatemp_range=0.6, dynatemp_exponent=1.5, top_k=0, min_p=0.01),
    "mirostat1": dict(mirostat=1, temp=0.9, mirostat_tau=4.0, mirostat_eta=0.15),
    "mirostat2": dict(mirostat=2, temp=0.9, mirostat_tau=3.0, mirostat_eta=0.2),
    "everything": dict(temp=1.1, repeat_penalty=1.1, typical_p=0.95, min_keep=3,
                       dry_multiplier=0.5, dry_allowed_length=1, xtc_probability=0.4,
                       xtc_threshold=0.08, top_n_sigma=2.0, dynatemp_range=0.3,
                       logit_bias=[[25, -1.5], [262, 0.75], [13, float("-inf")]],
                       order=["temperature", "top_k", "dry", "penalties", "xtc", "min_p",
                              "typ_p", "top_n_sigma", "top_p"]),
}


def logits(case_index, step):
    """xorshift32 from a state of the case and step; each logit (x >> 8) / 2^24 * 8 - 4,
    exact in float; the HOT tokens get +3.5."""
    x = (0x9E3779B9 * (case_index + 1) ^ (0x85EBCA77 * (step + 1))) & 0xFFFFFFFF
    x = x or 1
    out = []
    for _ in range(N):
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        out.append((x >> 8) / 16777216.0 * 8.0 - 4.0)
    for t in HOT:
        out[t] += 3.5
    return out


def chain_of(p, vocab, n_vocab):
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    add = lambda s: L.llama_sampler_chain_add(chain, s)
    if p["logit_bias"]:
        arr = (L.llama_logit_bias * len(p["logit_bias"]))()
        for i, (t, b) in enumerate(p["logit_bias"]):
            arr[i].token, arr[i].bias = t, b
        add(L.llama_sampler_init_logit_bias(n_vocab, len(p["logit_bias"]), arr))
    if p["mirostat"] == 1:
        add(L.llama_sampler_init_temp(p["temp"]))
        add(L.llama_sampler_init_mirostat(n_vocab, p["seed"], p["mirostat_tau"],
                                          p["mirostat_eta"], 100))
        return chain
    if p["mirostat"] == 2:
        add(L.llama_sampler_init_temp(p["temp"]))
        add(L.llama_sampler_init_mirostat_v2(p["seed"], p["mirostat_tau"], p["mirostat_eta"]))
        return chain
    for step in p["order"]:
        if step == "penalties":
            add(L.llama_sampler_init_penalties(n_vocab, p["repeat_last_n"], p["repeat_penalty"],
                                               p["frequency_penalty"], p["presence_penalty"]))
        elif step == "dry":
            bs = [b.encode() for b in p["dry_sequence_breakers"]]
            arr = (ctypes.c_char_p * max(1, len(bs)))(*bs)
            add(L.llama_sampler_init_dry(vocab, p["dry_multiplier"], p["dry_base"],
                                         p["dry_allowed_length"], p["dry_penalty_last_n"],
                                         arr, len(bs)))
        elif step == "top_n_sigma":
            add(L.llama_sampler_init_top_n_sigma(p["top_n_sigma"]))
        elif step == "top_k":
            add(L.llama_sampler_init_top_k(p["top_k"]))
        elif step == "typ_p":
            add(L.llama_sampler_init_typical(p["typical_p"], p["min_keep"]))
        elif step == "top_p":
            add(L.llama_sampler_init_top_p(p["top_p"], p["min_keep"]))
        elif step == "min_p":
            add(L.llama_sampler_init_min_p(p["min_p"], p["min_keep"]))
        elif step == "xtc":
            add(L.llama_sampler_init_xtc(p["xtc_probability"], p["xtc_threshold"],
                                         p["min_keep"], p["seed"]))
        elif step == "temperature":
            add(L.llama_sampler_init_temp_ext(p["temp"], p["dynatemp_range"],
                                              p["dynatemp_exponent"]))
        else:
            raise SystemExit(f"unknown step {step}")
    add(L.llama_sampler_init_dist(p["seed"]))
    return chain


def main():
    vocab_path, out_path = sys.argv[1], sys.argv[2]
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.vocab_only = True
    model = L.llama_model_load_from_file(vocab_path.encode(), mp)
    if not model:
        raise SystemExit(f"cannot load {vocab_path}")
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    cases = []
    for ci, (name, over) in enumerate(CASES.items()):
        p = dict(DEFAULTS, **over)
        chain = chain_of(p, vocab, n_vocab)
        for t in HISTORY:
            L.llama_sampler_accept(chain, t)
        tokens = []
        arr = (L.llama_token_data * N)()
        for step in range(STEPS):
            for i, v in enumerate(logits(ci, step)):
                arr[i].id, arr[i].logit, arr[i].p = i, v, 0.0
            cur = L.llama_token_data_array(data=arr, size=N, selected=-1, sorted=False)
            L.llama_sampler_apply(chain, ctypes.byref(cur))
            if not 0 <= cur.selected < cur.size:
                raise SystemExit(f"{name}: step {step} selected nothing")
            tok = cur.data[cur.selected].id
            L.llama_sampler_accept(chain, tok)
            tokens.append(tok)
        L.llama_sampler_free(chain)
        params = {k: v for k, v in p.items() if k != "logit_bias"}
        params["logit_bias"] = [[t, "-inf" if b == float("-inf") else b]
                                for t, b in p["logit_bias"]]
        cases.append({"name": name, "index": ci, "params": params, "tokens": tokens})
        print(f"{name}: {tokens[:12]} ...")
    out = {
        "made_by": "crates/llama/tools/llama_cpp_samplers.py with llama-cpp-python "
                   f"{L.__version__} (llama.cpp b11312)",
        "vocab": "ggml-vocab-gpt-2.gguf",
        "n_candidates": N, "steps": STEPS, "hot": HOT, "history": HISTORY,
        "cases": cases,
    }
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
