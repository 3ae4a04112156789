"""The official `openai` client against a running `tessera serve` (argv[1]: base URL, argv[2]:
API key): models, non-streaming and streaming chat, completions, and JSON-schema output
that must parse and validate. Exits non-zero on any mismatch."""

import json
import sys

import jsonschema
from openai import OpenAI

base, key = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=120)

models = client.models.list()
assert len(models.data) == 1, models

msgs = [{"role": "user", "content": "What is the capital of France?"}]
r = client.chat.completions.create(model="m", messages=msgs, max_tokens=12, temperature=0)
text = r.choices[0].message.content
assert r.choices[0].finish_reason in ("stop", "length"), r
assert r.usage.completion_tokens >= 1 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, r.usage

# Streaming gives the same greedy text, then usage.
parts, finish, usage = [], None, None
stream = client.chat.completions.create(
    model="m", messages=msgs, max_tokens=12, temperature=0, stream=True,
    stream_options={"include_usage": True},
)
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage
    for c in chunk.choices:
        if c.delta.content:
            parts.append(c.delta.content)
        if c.finish_reason:
            finish = c.finish_reason
assert "".join(parts) == text, ("".join(parts), text)
assert finish == r.choices[0].finish_reason and usage is not None, (finish, usage)

c = client.completions.create(model="m", prompt="The capital of France is", max_tokens=6, temperature=0)
assert c.choices[0].text.startswith(" Paris"), c

if len(sys.argv) > 3 and sys.argv[3] == "json":
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    r = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Invent a person. Reply in JSON."}],
        max_tokens=120,
        temperature=0.7,
        seed=3,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
    )
    obj = json.loads(r.choices[0].message.content)
    jsonschema.validate(obj, schema)
    r = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "List two colors as JSON."}],
        max_tokens=60,
        temperature=0,
        response_format={"type": "json_object"},
    )
    out = r.choices[0].message.content
    assert out.lstrip().startswith("{"), out
    if r.choices[0].finish_reason == "stop":  # an object whenever the reply ends by itself
        assert isinstance(json.loads(out), dict), out

print("openai client: ok")
