#!/usr/bin/env python3
"""llama-bench's pp/tg tests on llama.cpp through its C API (llama-cpp-python), to put beside
`tessera bench` in the same run: a warm-up, then for each repetition a fresh KV cache and one
`llama_decode` of an N-token batch (pp) or N single-token `llama_decode`s (tg), each ended by
`llama_synchronize`, as llama-bench times them. Random token ids, as llama-bench uses.

Prints one JSON object per line: model, test, n_threads, repack, flash_attn, samples_ts, avg_ts.

Usage: llama_cpp_bench.py MODEL.gguf [-p 512] [-n 128] [-r 3] [-t 2] [--repack 0|1] [--fa 0|1]
(repack 1 is llama.cpp's default: Q4_0/Q4_K/IQ4_NL weights interleaved at load on x86; on a
CPU with AMX the extra buffers crash here, see testdata/refs/README.md.)"""
import argparse, json, os, random, statistics, time
import llama_cpp as lc

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("-p", type=int, default=512)
ap.add_argument("-n", type=int, default=128)
ap.add_argument("-r", type=int, default=3)
ap.add_argument("-t", type=int, default=2)
ap.add_argument("--repack", type=int, default=1)
ap.add_argument("--fa", type=int, default=1)
a = ap.parse_args()

lc.llama_backend_init()
mp = lc.llama_model_default_params()
mp.use_extra_bufts = bool(a.repack)
model = lc.llama_model_load_from_file(a.model.encode(), mp)
assert model, f"cannot load {a.model}"
cp = lc.llama_context_default_params()
cp.n_ctx = max(a.p, 1) + a.n + 16
cp.n_batch = cp.n_ubatch = max(a.p, 1)
cp.n_threads = cp.n_threads_batch = a.t
cp.flash_attn_type = 1 if a.fa else 0
cp.no_perf = True
ctx = lc.llama_init_from_model(model, cp)
assert ctx, "cannot create a context"
vocab = lc.llama_model_get_vocab(model)
n_vocab = lc.llama_vocab_n_tokens(vocab)
rng = random.Random(0)


def decode(tokens):
    arr = (lc.llama_token * len(tokens))(*tokens)
    rc = lc.llama_decode(ctx, lc.llama_batch_get_one(arr, len(tokens)))
    assert rc == 0, f"llama_decode: {rc}"
    lc.llama_synchronize(ctx)


def run(test):
    lc.llama_memory_clear(lc.llama_get_memory(ctx), True)
    t0 = time.perf_counter()
    if test == "pp":
        decode([rng.randrange(n_vocab) for _ in range(a.p)])
        n = a.p
    else:
        for _ in range(a.n):
            decode([rng.randrange(n_vocab)])
        n = a.n
    return n / (time.perf_counter() - t0)


for test, n in (("pp", a.p), ("tg", a.n)):
    if n <= 0:
        continue
    run(test)  # warm-up
    samples = [run(test) for _ in range(a.r)]
    print(json.dumps({
        "model": os.path.basename(a.model), "test": f"{test}{n}", "n_threads": a.t,
        "repack": bool(a.repack), "flash_attn": bool(a.fa),
        "samples_ts": [round(s, 2) for s in samples], "avg_ts": round(statistics.mean(samples), 2),
        "median_ts": round(statistics.median(samples), 2),
        "system_info": lc.llama_print_system_info().decode().strip(),
    }), flush=True)
