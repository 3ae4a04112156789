#!/usr/bin/env python3
"""Tessera beside llama.cpp in the same run: for each round and model, llama.cpp's pp/tg
(tools/llama_cpp_bench.py, with the python of a llama-cpp-python build) and then
`tessera bench -o json`, same threads, flash attention on; prints a markdown table with the
ratios and their medians. Environment: TESSERA_SIMD is passed through to tessera.

Usage: speed_vs_llama_cpp.py LLAMA_PYTHON TESSERA_BIN MODEL.gguf... [--rounds 3] [-t 2]
       [-p 512] [-n 128] [--repack 0|1]"""
import argparse, json, os, statistics, subprocess, sys

ap = argparse.ArgumentParser()
ap.add_argument("llama_python")
ap.add_argument("tessera")
ap.add_argument("models", nargs="+")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("-t", type=int, default=2)
ap.add_argument("-p", type=int, default=512)
ap.add_argument("-n", type=int, default=128)
ap.add_argument("--repack", type=int, default=1)
a = ap.parse_args()
here = os.path.dirname(os.path.abspath(__file__))

rows, ratios = [], {}
for rnd in range(1, a.rounds + 1):
    for m in a.models:
        out = subprocess.run([a.llama_python, os.path.join(here, "llama_cpp_bench.py"), m,
                              "-p", str(a.p), "-n", str(a.n), "-r", "3", "-t", str(a.t),
                              "--repack", str(a.repack), "--fa", "1"],
                             check=True, capture_output=True, text=True).stdout
        ref = {j["test"]: j["median_ts"] for j in map(json.loads, out.splitlines())}
        out = subprocess.run([a.tessera, "bench", "-m", m, "-p", str(a.p), "-n", str(a.n),
                              "-r", "3", "-t", str(a.t), "-o", "json"],
                             check=True, capture_output=True, text=True).stdout
        ours = {}
        for j in json.loads(out):
            test = f"pp{j['n_prompt']}" if j["n_prompt"] else f"tg{j['n_gen']}"
            ours[test] = statistics.median(j["samples_ts"])
            simd = j.get("simd", "?")
        name = os.path.basename(m)
        pp, tg = f"pp{a.p}", f"tg{a.n}"
        rp, rt = ours[pp] / ref[pp], ours[tg] / ref[tg]
        ratios.setdefault(name, []).append((rp, rt))
        rows.append(f"| {name} | {rnd} | {ref[pp]:.1f} | {ours[pp]:.1f} | {rp:.2f} | "
                    f"{ref[tg]:.1f} | {ours[tg]:.1f} | {rt:.2f} |")
        print(rows[-1], file=sys.stderr, flush=True)

print(f"Tessera SIMD {simd}; llama.cpp repack {'on' if a.repack else 'off'}, fa on, "
      f"{a.t} threads, medians of 3 per round\n")
print(f"| model | round | llama.cpp pp{a.p} | Tessera pp{a.p} | ratio | llama.cpp tg{a.n} "
      f"| Tessera tg{a.n} | ratio |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
print("\n".join(rows))
print()
for name, rs in ratios.items():
    print(f"- {name}: median ratio pp {statistics.median(r[0] for r in rs):.2f}, "
          f"tg {statistics.median(r[1] for r in rs):.2f}")
