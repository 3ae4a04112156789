"""OpenAI's Responses API through the official `openai` client against `tessera serve` on
Qwen2.5-Coder-0.5B-Instruct (argv[1]: base URL): text, instructions, the same text streamed
as events, a required function call, a function_call_output round trip, stored responses
(previous_response_id continues one; retrieve, delete; store=False keeps nothing; metadata
echoed), and an unknown previous_response_id refused by name. Exits non-zero on any
mismatch."""

import json
import sys

import jsonschema
import openai
from openai import OpenAI

client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="none", max_retries=0, timeout=300)

r = client.responses.create(model="m", input="What is the capital of France?",
                            max_output_tokens=16, temperature=0)
assert r.status in ("completed", "incomplete") and r.output_text, r
assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0, r.usage
text = r.output_text

events, streamed, final = [], "", None
for ev in client.responses.create(model="m", input="What is the capital of France?",
                                  max_output_tokens=16, temperature=0, stream=True):
    events.append(ev.type)
    if ev.type == "response.output_text.delta":
        streamed += ev.delta
    if ev.type in ("response.completed", "response.incomplete"):
        final = ev.response
assert events[0] == "response.created" and final is not None, events
assert streamed == text and final.output_text == text, (streamed, text)

r2 = client.responses.create(model="m", input="What is the capital of France?", max_output_tokens=8,
                             instructions="Answer in French.", temperature=0)
assert r2.output_text and r2.output_text != text, (r2.output_text, text)

schema = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
          "required": ["city", "unit"]}
tools = [{"type": "function", "name": "get_weather", "description": "The current weather in a city.", "parameters": schema}]
ask = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]
r3 = client.responses.create(model="m", input=ask, tools=tools, tool_choice="required",
                             max_output_tokens=64, temperature=0)
call = next(o for o in r3.output if o.type == "function_call")
assert call.name == "get_weather" and call.call_id, call
args = json.loads(call.arguments)
jsonschema.validate(args, schema)

r4 = client.responses.create(model="m", tools=tools, max_output_tokens=48, temperature=0, input=ask + [
    {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
    {"type": "function_call_output", "call_id": call.call_id, "output": json.dumps({"temperature": 21, "unit": "celsius"})},
])
assert "21" in r4.output_text, r4

# Stored responses: the first one is kept (store defaults to true) and continues.
got = client.responses.retrieve(r.id)
assert got.id == r.id and got.output_text == text and got.store is True, got
nxt = client.responses.create(model="m", previous_response_id=r.id, input="And of Germany?",
                              max_output_tokens=8, temperature=0, metadata={"run": "ci"})
assert nxt.previous_response_id == r.id and nxt.metadata == {"run": "ci"}, nxt
# The earlier question and answer are in the prompt.
assert nxt.usage.input_tokens > r.usage.input_tokens + r.usage.output_tokens, (nxt.usage, r.usage)
client.responses.delete(nxt.id)
try:
    client.responses.retrieve(nxt.id)
    raise SystemExit("a deleted response was found")
except openai.NotFoundError:
    pass
unstored = client.responses.create(model="m", input="hi", max_output_tokens=2, store=False)
assert unstored.store is False
try:
    client.responses.retrieve(unstored.id)
    raise SystemExit("store=False was stored")
except openai.NotFoundError:
    pass

try:
    client.responses.create(model="m", input="hi", previous_response_id="resp_x", max_output_tokens=4)
    raise SystemExit("an unknown previous_response_id was accepted")
except openai.BadRequestError as e:
    assert "previous_response_id" in str(e), e

print("responses: ok:", repr(text), "|", args, "|", r4.output_text[:40])
