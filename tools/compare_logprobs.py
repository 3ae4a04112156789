#!/usr/bin/env python3
"""Greedy completions and top-3 log-probabilities of two OpenAI-compatible servers side by side
(`tessera serve` and llama-server on the same GGUF file), to check that Tessera computes what
llama.cpp computes on a quantization type the reference sets do not cover.

    python3 tools/compare_logprobs.py http://127.0.0.1:8181 http://127.0.0.1:8182

For each prompt: whether the texts are equal, the first token that differs, and the largest gap
between the two servers' log-probability differences at a position (each of the top 3 minus
the chosen token's: logit differences, free of how each server sums the softmax
normalizer). Equal logits leave gaps of about 1e-5 (the servers' own rounding); different
arithmetic shows up as gaps of 1e-3 and more. llama-server folds a token that ends inside a UTF-8 character into the next
one in its `logprobs`, so a row can show a differing token with equal texts; gaps are taken
over the positions before the first differing token, where the two lists still line up. Standard library only.
"""

import json
import sys
import urllib.request

# The last prompt is over 64 tokens in these vocabularies, so its prompt pass takes llama.cpp's
# tiled flash attention (64+ query rows) and the batched matrix kernels.
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a land far away,",
           "The history of the printing press begins in the fifteenth century, when Johannes "
           "Gutenberg combined movable metal type, oil-based inks and a wooden press adapted from "
           "those used to make wine. Within fifty years printers were at work in more than two "
           "hundred cities across Europe, and the price of books fell so far that students, "
           "merchants and craftsmen could own them. Historians still argue about how much of "
           "the Reformation, the scientific revolution and the rise of vernacular literature "
           "followed from this one machine. In this essay I will argue that"]


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
        first = next((i for i, (x, y) in enumerate(zip(ka, kb)) if x != y), None)
        # Past a differing token the lists no longer line up: compare the positions before it.
        end = len(ka) if first is None else first
        # Differences within a position (each top log-probability minus the chosen one's): the
        # log-softmax normalizer cancels, so they compare logits. llama-server sums the
        # normalizer in f32 from the largest term down, which drops the tail of large
        # vocabularies (Gemma-3: a shift of 0.2 on every token of a position); Tessera sums
        # in f64.
        gaps = [abs((x - c) - (y - d)) for u, v, c, d in zip(pa[:end], pb[:end], ca, cb)
                for x, y in zip(u, v)]
        gap = f"{max(gaps):.2e}" if gaps else "n/a"
        note = ""
        if first is not None and ta == tb:
            note = " (same text, tokens split differently there: llama-server's UTF-8 folding)"
        print(f"{p[:40]!r}: text equal {ta == tb}, first differing token {first}, "
              f"max logprob gap before it {gap}{note}")


if __name__ == "__main__":
    main()
