#!/usr/bin/env python3
"""Greedy completions and top-3 log-probabilities of two OpenAI-compatible servers side by side
(`tessera serve` and llama-server on the same GGUF file), to check that Tessera computes what
llama.cpp computes on a quantization type the reference sets do not cover.

    python3 tools/compare_logprobs.py http://127.0.0.1:8181 http://127.0.0.1:8182

For each prompt: whether the texts are equal, the first token that differs, and the largest gap
between the two servers' log-probabilities (chosen token and top 3). Equal logits leave gaps
of about 1e-5 (the servers' own log-softmax rounding); different arithmetic shows up as gaps
of 1e-3 and more. llama-server folds a token that ends inside a UTF-8 character into the next
one in its `logprobs`, so a row can show a differing token with equal texts: look at that
position's values before calling it a difference. Standard library only.
"""

import json
import sys
import urllib.request

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a land far away,"]


def complete(url, prompt, n=24):
    body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 3})
    req = urllib.request.Request(url + "/v1/completions", body.encode(),
                                 {"Content-Type": "application/json"})
    choice = json.load(urllib.request.urlopen(req, timeout=600))["choices"][0]
    lp = choice["logprobs"]
    if "content" in lp:  # llama-server's form
        toks = [e["token"] for e in lp["content"]]
        chosen = [e["logprob"] for e in lp["content"]]
        top = [[t["logprob"] for t in e["top_logprobs"]] for e in lp["content"]]
    else:  # the OpenAI completions form
        toks, chosen = lp["tokens"], lp["token_logprobs"]
        top = [sorted(d.values(), reverse=True) for d in lp["top_logprobs"]]
    return choice["text"], toks, chosen, top


def main():
    a_url, b_url = sys.argv[1].rstrip("/"), sys.argv[2].rstrip("/")
    for p in PROMPTS:
        (ta, ka, ca, pa), (tb, kb, cb, pb) = complete(a_url, p), complete(b_url, p)
        gaps = [abs(x - y) for x, y in zip(ca, cb)]
        gaps += [abs(x - y) for u, v in zip(pa, pb) for x, y in zip(u, v)]
        first = next((i for i, (x, y) in enumerate(zip(ka, kb)) if x != y), None)
        print(f"{p!r}: text equal {ta == tb}, first differing token {first}, "
              f"max logprob gap {max(gaps):.2e}")


if __name__ == "__main__":
    main()
