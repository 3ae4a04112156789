#!/usr/bin/env python3
"""llama-perplexity's `--kl-divergence-base` file, made with llama.cpp through llama-cpp-python.

Usage: llama_cpp_kld_base.py MODEL.gguf TEXT_FILE N_CTX FLASH_ATTN(0|1) OUT.kld [N_CHUNKS]
As llama-perplexity: the text is tokenized with BOS, cut into chunks of N_CTX tokens, each
chunk evaluated from an empty cache with its first token replaced by BOS (when the vocabulary
adds one), and the log-probabilities of the last N_CTX - 1 - N_CTX/2 positions of each chunk
written in the file's 16-bit form. Then
  tessera perplexity -m MODEL.gguf -c N_CTX -fa on|off --kl-divergence-base OUT.kld --kl-divergence
prints Tessera's KL-divergence from llama.cpp, as llama-perplexity would (no llama-perplexity
binary is needed). Needs llama-cpp-python 0.3.36 (llama.cpp b11312); weights are kept out of
the AMX/repack buffers unless REPACK=1 (llama.cpp's default; compare with Tessera's default
then, `--no-repack` otherwise; never on a CPU with AMX: testdata/refs/README.md). Also prints
llama.cpp's perplexity."""
import math, os, struct, sys
import numpy as np
import llama_cpp
import llama_cpp.llama as _L
from llama_cpp import Llama

_orig = llama_cpp.llama_model_default_params
def _params():
    p = _orig(); p.use_extra_bufts = os.environ.get("REPACK") == "1"; return p
llama_cpp.llama_model_default_params = _params
_L.llama_cpp.llama_model_default_params = _params

model, text_file, n_ctx, fa, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
llm = Llama(model_path=model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=2,
            flash_attn=fa == "1", logits_all=True, verbose=False)
text = open(text_file, encoding="utf-8").read()
tokens = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
n_chunk = len(tokens) // n_ctx
if len(sys.argv) > 6:
    n_chunk = min(n_chunk, int(sys.argv[6]))
n_vocab = llm.n_vocab()
bos = llm.token_bos()
add_bos = llm._model.add_bos_token() if hasattr(llm._model, "add_bos_token") else True
first = n_ctx // 2
nv = 2 * ((n_vocab + 1) // 2) + 4


def encode(logits):
    """llama-perplexity's log_softmax into 16 bits: scale, min log-prob, quantized values."""
    mx, mn = np.float32(logits.max()), np.float32(logits.min())
    mn = max(mn, np.float32(mx - np.float32(16)))
    sum_exp = float(np.exp((logits - mx).astype(np.float32)).astype(np.float64).sum())
    log_sum = np.float32(math.log(sum_exp))
    min_log_prob = np.float32(mn - mx - log_sum)
    scale = np.float32((mx - mn) / np.float32(65535))
    row = np.zeros(nv, dtype=np.uint16)
    row[:4] = np.frombuffer(struct.pack("<ff", scale, min_log_prob), dtype=np.uint16)
    if scale != 0:
        v = np.float32(1) / scale * (logits - mn).astype(np.float32)
        q = np.rint(v).astype(np.int64)
        row[4:4 + n_vocab] = np.where(logits > mn, q, 0).astype(np.uint16)
    return row, float(mx + log_sum - 0)


nll, count = 0.0, 0
with open(out, "wb") as f:
    f.write(b"_logits_")
    f.write(struct.pack("<iii", n_ctx, n_vocab, n_chunk))
    f.write(np.array(tokens[:n_ctx * n_chunk], dtype=np.int32).tobytes())
    for i in range(n_chunk):
        chunk = list(tokens[i * n_ctx:(i + 1) * n_ctx])
        if add_bos and bos >= 0:
            chunk[0] = bos
        llm.reset()
        llm.eval(chunk)
        for j in range(first, n_ctx - 1):
            logits = np.array(llm.scores[j], dtype=np.float32)
            row, lse = encode(logits)
            f.write(row.tobytes())
            nll += lse - float(logits[tokens[i * n_ctx + j + 1]])
            count += 1
        print(f"[{i + 1}] {math.exp(nll / count):.4f}", flush=True)
print(f"llama.cpp perplexity: {math.exp(nll / count):.4f} over {count} tokens, {n_chunk} chunks of {n_ctx}")
