"""The official `anthropic` client against `tessera serve` on Qwen2.5-Coder-0.5B-Instruct
(argv[1]: base URL): a message, the same message streamed, stop sequences, a system prompt,
tool_use (forced with tool_choice any, and a named tool streamed), a tool_result round trip,
and an error in Anthropic's shape. Exits non-zero on any mismatch."""

import sys

import anthropic
import jsonschema

client = anthropic.Anthropic(base_url=sys.argv[1], api_key="none", max_retries=0, timeout=300)
ask = [{"role": "user", "content": "What is the capital of France?"}]

m = client.messages.create(model="m", max_tokens=16, messages=ask, extra_body={"temperature": 0})
assert m.type == "message" and m.role == "assistant", m
assert m.content[0].type == "text" and m.content[0].text, m
assert m.stop_reason in ("end_turn", "max_tokens"), m
assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0, m.usage
text = m.content[0].text

with client.messages.stream(model="m", max_tokens=16, messages=ask, extra_body={"temperature": 0}) as s:
    streamed = "".join(s.text_stream)
    final = s.get_final_message()
assert streamed == text, (streamed, text)
assert final.stop_reason == m.stop_reason and final.content[0].text == text, final

if "Paris" in text:
    m2 = client.messages.create(model="m", max_tokens=16, messages=ask, extra_body={"temperature": 0},
                                stop_sequences=["Paris"])
    assert m2.stop_reason == "stop_sequence" and m2.stop_sequence == "Paris", m2
    assert "Paris" not in m2.content[0].text, m2

m3 = client.messages.create(model="m", max_tokens=8, messages=ask, extra_body={"temperature": 0},
                            system="Answer in French.")
assert m3.content[0].text and m3.content[0].text != text, (m3, text)

schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
tools = [{"name": "get_weather", "description": "The current weather in a city.", "input_schema": schema}]
weather = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]
m4 = client.messages.create(model="m", max_tokens=64, messages=weather, tools=tools,
                            tool_choice={"type": "any"}, extra_body={"temperature": 0})
assert m4.stop_reason == "tool_use", m4
use = next(b for b in m4.content if b.type == "tool_use")
assert use.name == "get_weather" and use.id.startswith("toolu_"), use
jsonschema.validate(use.input, schema)

with client.messages.stream(model="m", max_tokens=64, messages=weather, tools=tools, extra_body={"temperature": 0},
                            tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}) as s:
    final = s.get_final_message()
suse = next(b for b in final.content if b.type == "tool_use")
assert final.stop_reason == "tool_use" and suse.input == use.input, (final, use)

m5 = client.messages.create(model="m", max_tokens=48, extra_body={"temperature": 0}, tools=tools, messages=weather + [
    {"role": "assistant", "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": '{"temperature": 21, "unit": "celsius"}'}]},
])
answer = "".join(b.text for b in m5.content if b.type == "text")
assert m5.stop_reason in ("end_turn", "max_tokens") and "21" in answer, m5

try:
    client.messages.create(model="m", max_tokens=8, messages=[{"role": "system", "content": "x"}])
    raise SystemExit("a bad role was accepted")
except anthropic.BadRequestError as e:
    assert e.body["type"] == "error" and e.body["error"]["type"] == "invalid_request_error", e.body
    assert "messages[0].role" in e.body["error"]["message"], e.body

print("anthropic: ok:", repr(text), "|", use.input, "|", answer[:40])
