"""The official `openai` client's embeddings against `tessera serve --embedding --pooling mean`
on SmolLM2-135M-Instruct (argv[1]: base URL): one vector per input in order, of the model's
width and unit norm; a paraphrase nearer than unrelated text; base64 equal to floats; token
ids equal to their text; bad input answered with a 400. Exits non-zero on any mismatch."""

import sys

import numpy as np
import openai

client = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none", max_retries=0, timeout=300)
texts = [
    "The cat sat on the mat.",
    "A cat was sitting on the mat.",
    "Quarterly revenue rose five percent on strong cloud sales.",
    "The weather is sunny and warm today.",
]
r = client.embeddings.create(model="m", input=texts)
assert [d.index for d in r.data] == [0, 1, 2, 3], r.data
E = np.array([d.embedding for d in r.data], dtype=np.float64)
assert E.shape == (4, 576), E.shape
assert np.allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-5), np.linalg.norm(E, axis=1)
assert r.usage.prompt_tokens > 20 and r.usage.total_tokens == r.usage.prompt_tokens, r.usage
cos = E @ E.T
assert cos[0, 1] > cos[0, 2] and cos[0, 1] > cos[0, 3], cos
assert cos[0, 1] > cos[1, 2] and cos[0, 1] > cos[1, 3], cos

# One input alone gives the vector it got among others.
one = client.embeddings.create(model="m", input=texts[2]).data[0].embedding
assert np.dot(one, E[2]) > 0.99999, np.dot(one, E[2])

# base64 (the client's default when numpy is present is float; ask explicitly).
b = client.embeddings.create(model="m", input=texts[:2], encoding_format="base64")
raw = client.with_raw_response.embeddings.create(model="m", input=texts[:1], encoding_format="base64")
import base64, json
payload = json.loads(raw.text)
v = np.frombuffer(base64.b64decode(payload["data"][0]["embedding"]), dtype="<f4")
assert np.allclose(v, E[0], atol=1e-6), (v[:4], E[0][:4])

# Token ids in, same vector out.
import urllib.request
req = urllib.request.Request(sys.argv[1] + "/tokenize", data=json.dumps({"content": texts[0]}).encode(),
                             headers={"Content-Type": "application/json"})
ids = json.loads(urllib.request.urlopen(req).read())["tokens"]
t = client.embeddings.create(model="m", input=[ids]).data[0].embedding
assert np.dot(t, E[0]) > 0.99999

for bad in ({"input": ""}, {"input": [[]]}, {"input": [1.5]}, {"input": {"a": 1}}, {"input": [999999]}):
    try:
        client.embeddings.create(model="m", **bad)
    except openai.BadRequestError as e:
        assert e.body and e.body.get("message"), e.body
    else:
        raise AssertionError(f"{bad} was accepted")
try:
    client.embeddings.create(model="m", input="x", dimensions=64)
except openai.BadRequestError as e:
    assert "dimensions" in str(e), e
else:
    raise AssertionError("dimensions=64 was accepted")
print("ok")
