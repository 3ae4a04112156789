"""Tool calls through the official `openai` client against `tessera serve` on
Qwen2.5-Coder-0.5B-Instruct (argv[1]: base URL), whose template renders tools (Hermes
`<tool_call>` format): `required` and a named function (arguments constrained by the schema,
so they parse and validate), `auto`, streamed and not, and a `role: tool` round trip.
Exits non-zero on any mismatch."""

import json
import sys

import jsonschema
from openai import OpenAI

client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="none", max_retries=0, timeout=300)
schema = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
}
tools = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city.", "parameters": schema}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The local time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
]
ask = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]


def check_call(call, name=None):
    assert call.type == "function" and call.id.startswith("call_"), call
    if name:
        assert call.function.name == name, call
    args = json.loads(call.function.arguments)
    spec = next(t for t in tools if t["function"]["name"] == call.function.name)
    jsonschema.validate(args, spec["function"]["parameters"])
    return args


# required: some call, arguments valid.
r = client.chat.completions.create(model="m", messages=ask, tools=tools, tool_choice="required",
                                   temperature=0, max_tokens=80)
ch = r.choices[0]
assert ch.finish_reason == "tool_calls", ch
assert ch.message.tool_calls and ch.message.content in (None, ""), ch.message
check_call(ch.message.tool_calls[0])

# A named function, streamed: the call arrives as a tool_calls delta.
stream = client.chat.completions.create(
    model="m", messages=ask, tools=tools, temperature=0, max_tokens=80, stream=True,
    tool_choice={"type": "function", "function": {"name": "get_time"}})
calls, finish, text = [], None, ""
for chunk in stream:
    for c in chunk.choices:
        if c.delta.tool_calls:
            calls.extend(c.delta.tool_calls)
        if c.delta.content:
            text += c.delta.content
        if c.finish_reason:
            finish = c.finish_reason
assert finish == "tool_calls" and len(calls) >= 1, (finish, calls, text)
args = check_call(calls[0], "get_time")
assert "paris" in args["city"].lower(), args

# auto: the model decides; the greedy reply to a weather question is a call, parsed.
r = client.chat.completions.create(model="m", messages=ask, tools=tools, temperature=0, max_tokens=80)
ch = r.choices[0]
assert ch.finish_reason == "tool_calls", ch
call = ch.message.tool_calls[0]
args = check_call(call, "get_weather")

# auto, streamed: the same call, no call markup leaked as content.
stream = client.chat.completions.create(model="m", messages=ask, tools=tools, temperature=0,
                                        max_tokens=80, stream=True)
scalls, sfinish, stext = [], None, ""
for chunk in stream:
    for c in chunk.choices:
        if c.delta.tool_calls:
            scalls.extend(c.delta.tool_calls)
        if c.delta.content:
            stext += c.delta.content
        if c.finish_reason:
            sfinish = c.finish_reason
assert sfinish == "tool_calls" and "<tool_call>" not in stext, (sfinish, stext)
assert json.loads(scalls[0].function.arguments) == args, (scalls, args)

# The result goes back as role tool; the model answers in text, using it.
msgs = ask + [
    {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
    {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "unit": "celsius"})},
]
r = client.chat.completions.create(model="m", messages=msgs, tools=tools, temperature=0, max_tokens=60)
ch = r.choices[0]
assert ch.finish_reason in ("stop", "length") and ch.message.content, ch
assert "21" in ch.message.content, ch.message.content

# tool_choice none: plain text, no calls.
r = client.chat.completions.create(model="m", messages=ask, tools=tools, tool_choice="none",
                                   temperature=0, max_tokens=20)
assert not r.choices[0].message.tool_calls and r.choices[0].message.content, r

# An unknown named function is a 400 naming the field.
try:
    client.chat.completions.create(model="m", messages=ask, tools=tools, max_tokens=5,
                                   tool_choice={"type": "function", "function": {"name": "nope"}})
    raise SystemExit("an unknown tool was accepted")
except Exception as e:  # openai.BadRequestError
    assert getattr(e, "status_code", None) == 400 and "tool_choice.function.name" in str(e), e

print("tool calls: ok:", args, "|", ch.message.content[:60])
