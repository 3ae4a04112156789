#!/usr/bin/env python3
"""Speculative decoding's speed-up in `tessera run`: the same prompt decoded plainly and with
speculation, alternating, ROUNDS times; prints a table of decode t/s (medians), the speed-up
(median of the rounds' ratios), acceptance, and whether the texts agree (greedy: they should,
up to steps whose top-2 margin is tiny, as llama.cpp's).

    python3 tools/spec_bench.py MODEL PROMPT_FILE [--rounds 3] [-n 400] [-c 8192] [-t 2]
        [--chat] [--tessera target/release/tessera] -- SPEC_FLAGS...

    e.g. ... -- --spec-type ngram-simple
         ... -- -md DRAFT.gguf --spec-draft-n-max 4

Standard library only.
"""

import argparse
import re
import statistics
import subprocess
import sys

EVAL = re.compile(r"^\s+eval time =.*?([\d.]+) tokens per second", re.M)
SPEC = re.compile(r"^speculative\s+= (\S+): (\d+) drafted, (\d+) accepted", re.M)


def run(args, extra):
    cmd = [args.tessera, "run", "-m", args.model, "-f", args.prompt_file, "-no-cnv",
           "-n", str(args.n), "-c", str(args.c), "-t", str(args.t), "--temp", "0"]
    if args.chat:
        cmd.append("--chat")
    p = subprocess.run(cmd + extra, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd + extra)} failed:\n{p.stderr}")
    m = EVAL.search(p.stderr)
    if not m:
        sys.exit(f"no eval line in:\n{p.stderr}")
    s = SPEC.search(p.stderr)
    return p.stdout, float(m.group(1)), (s and (s.group(1), int(s.group(2)), int(s.group(3))))


def main():
    argv = sys.argv[1:]
    spec_flags = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prompt_file")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=400)
    ap.add_argument("-c", type=int, default=8192)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--chat", action="store_true")
    ap.add_argument("--tessera", default="target/release/tessera")
    args = ap.parse_args(argv)
    if not spec_flags:
        sys.exit("give the speculation flags after --")
    plain, spec, ratios, same = [], [], [], True
    kind, drafted, accepted = "?", 0, 0
    for _ in range(args.rounds):
        text_p, tp, _ = run(args, [])
        text_s, ts, st = run(args, spec_flags)
        plain.append(tp)
        spec.append(ts)
        ratios.append(ts / tp)
        same &= text_p == text_s
        if st:
            kind, drafted, accepted = st[0], drafted + st[1], accepted + st[2]
    acc = accepted / drafted if drafted else 0.0
    print(f"| mode | decode t/s (median of {args.rounds}) | speed-up | acceptance | same text |")
    print("| --- | ---: | ---: | ---: | --- |")
    print(f"| plain | {statistics.median(plain):.2f} | 1.00 | | |")
    print(f"| {kind} `{' '.join(spec_flags)}` | {statistics.median(spec):.2f} | "
          f"{statistics.median(ratios):.2f} | {acc:.3f} ({accepted}/{drafted}) | "
          f"{'yes' if same else 'no'} |")


if __name__ == "__main__":
    main()
