#!/usr/bin/env python3
"""What the `gguf` package reads from a GGUF file, in the JSON shape of `tessera gguf --json`,
for the CLI's agreement test. Usage: gguf_dump_json.py FILE.gguf OUT.json"""
import json, sys
from gguf import GGUFReader, GGUFValueType as V

r = GGUFReader(sys.argv[1])
md = []
for name, f in r.fields.items():
    if name.startswith("GGUF."):
        continue
    t = f.types[0]
    if t == V.ARRAY:
        ty = f"ARRAY[{f.types[1].name}]" if len(f.types) > 1 else "ARRAY[?]"
    else:
        ty = t.name
    v = f.contents()
    if hasattr(v, "tolist"):
        v = v.tolist()
    md.append({"key": name, "type": ty, "value": v})
tensors = [{"name": t.name, "type": t.tensor_type.name, "shape": [int(x) for x in t.shape],
            "offset": int(t.data_offset), "n_bytes": int(t.n_bytes)} for t in r.tensors]
json.dump({"version": int(r.fields["GGUF.version"].contents()), "alignment": r.alignment,
           "data_offset": r.data_offset, "metadata": md, "tensors": tensors}, open(sys.argv[2], "w"))
