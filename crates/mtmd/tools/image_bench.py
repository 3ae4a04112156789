#!/usr/bin/env python3
"""Image evaluation time, Tessera beside llama.cpp on the same files, alternating rounds.

The image of PROMPT evaluated as each tool's multimodal prompt path does it (encode, then the
embeddings and the text before the prompt's last part decoded): Tessera's `tessera run
--mmproj --image` ("image eval time"), llama.cpp b11312's `mtmd_tokenize` +
`mtmd_helper_eval_chunks` through llama-cpp-python (the same split: the last text chunk left
out). Prints the medians and the ratio per round.

Usage: VENV/bin/python crates/mtmd/tools/image_bench.py TESSERA MODEL MMPROJ IMAGE [ROUNDS] [THREADS]
"""
import ctypes
import re
import statistics
import subprocess
import sys
import time

import llama_cpp
from llama_cpp import Llama
from llama_cpp import mtmd_cpp as m

PROMPT = "Describe this image: <__media__> in one word."


def tessera_ms(exe, model, mmproj, image, threads):
    out = subprocess.run([exe, "run", "-m", model, "--mmproj", mmproj, "--image", image, "-p",
                          PROMPT, "-n", "1", "-t", str(threads), "-no-cnv"],
                         capture_output=True, text=True, check=True)
    return float(re.search(r"image eval time\s+=\s+([\d.]+) ms", out.stderr).group(1))


def llama_ms(llm, mctx, image):
    w = m.mtmd_helper_bitmap_init_from_file_wrapper(mctx, image.encode(), False,
                                                    m.mtmd_helper_init_opt_default())
    chunks = m.mtmd_input_chunks_init()
    text = m.mtmd_input_text(PROMPT.encode(), len(PROMPT.encode()), True, True)
    assert m.mtmd_tokenize(mctx, chunks, ctypes.byref(text),
                           (m.mtmd_bitmap_p_ctypes * 1)(w.bitmap), 1) == 0
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
    n = m.mtmd_input_chunks_size(chunks)
    n_past = 0
    t = time.perf_counter()
    for i in range(n - 1):  # the last text chunk is the generation's prompt
        new = llama_cpp.llama_pos(0)
        c = m.mtmd_input_chunks_get(chunks, i)
        assert m.mtmd_helper_eval_chunk_single(mctx, llm.ctx, c, n_past, 0, 512, False,
                                               ctypes.byref(new)) == 0
        n_past = new.value
    ms = (time.perf_counter() - t) * 1e3
    m.mtmd_input_chunks_free(chunks)
    m.mtmd_bitmap_free(w.bitmap)
    return ms


def main():
    exe, model, mmproj, image = sys.argv[1:5]
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    threads = int(sys.argv[6]) if len(sys.argv) > 6 else 2
    llm = Llama(model_path=model, n_ctx=1024, n_batch=512, n_threads=threads,
                n_threads_batch=threads, flash_attn=True, verbose=False)
    p = m.mtmd_context_params_default()
    p.use_gpu, p.n_threads, p.print_timings, p.flash_attn_type = False, threads, False, 1
    mctx = m.mtmd_init_from_file(mmproj.encode(), llm.model, p)
    llama_ms(llm, mctx, image)  # warm-up
    ts, ls = [], []
    for r in range(rounds):
        ts.append(tessera_ms(exe, model, mmproj, image, threads))
        ls.append(llama_ms(llm, mctx, image))
        print(f"round {r + 1}: Tessera {ts[-1]:.1f} ms, llama.cpp {ls[-1]:.1f} ms, "
              f"speed-up {ls[-1] / ts[-1]:.2f}")
    print(f"median: Tessera {statistics.median(ts):.1f} ms, llama.cpp {statistics.median(ls):.1f} "
          f"ms, speed-up {statistics.median([l / t for l, t in zip(ls, ts)]):.2f}")


if __name__ == "__main__":
    main()
