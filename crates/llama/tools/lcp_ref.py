"""What the llama.cpp reference tools of this folder share (llama_cpp_kv_types.py,
llama_cpp_lora.py, llama_cpp_context_shift.py): llama.cpp's top log-probabilities as the
tests read them, a greedy continuation with its margins, and the CPU's flags."""

import numpy as np


def log_softmax(x):
    """Log-softmax in float64 of float32 logits."""
    x = x.astype(np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def top(logits, k):
    """The k most likely tokens as [[token, log-probability], ...] (ties in token order)."""
    lp = log_softmax(np.asarray(logits, dtype=np.float32))
    return [[int(t), float(lp[t])] for t in np.argsort(-lp, kind="stable")[:k]]


def margin(logits):
    """The top-2 logit margin."""
    two = np.sort(logits)[-2:]
    return float(two[1] - two[0])


def evaluated(llm, tokens, k):
    """`tokens` evaluated as one batch by `llm` (a llama_cpp.Llama with logits_all): the
    top-k entries at every position."""
    llm.eval(tokens)
    return [top(llm.scores[i], k) for i in range(len(tokens))]


def greedy(llm, n):
    """n greedy tokens after what `llm` evaluated, each decoded alone: (tokens, margins)."""
    gen, margins = [], []
    logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    for _ in range(n):
        t = int(np.argmax(logits))
        gen.append(t)
        margins.append(margin(logits))
        llm.eval([t])
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    return gen, margins


def cpu_flags():
    """The CPU's SIMD features that decide ggml's kernels."""
    flags = open("/proc/cpuinfo").read()
    return {f: f" {f} " in flags or f" {f}\n" in flags
            for f in ["avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile"]}
