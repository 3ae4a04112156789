#!/usr/bin/env python3
"""llama.cpp's tokenization of a vocabulary fixture's test strings under another pre-tokenizer:
the vocabulary-only GGUF VOCAB (gzipped, from testdata/vocab) copied with `tokenizer.ggml.pre`
set to PRE, then every string of VOCAB's .inp file tokenized as llama.cpp's
test-tokenizer-0 does (no special tokens added or parsed), one line of ids per string, in the
.out format. For pre-tokenizers with no vocabulary fixture of their own (gpt-4o): the ids
depend on the words the pre-tokenizer splits, so any byte-level BPE vocabulary checks it.
Usage: make_pre_refs.py testdata/vocab/ggml-vocab-qwen2.gguf.gz gpt-4o OUT.out
"""
import gzip, os, sys, tempfile
import gguf
from llama_cpp import Llama

src, pre, out = sys.argv[1], sys.argv[2], sys.argv[3]
tmp = tempfile.mkdtemp()
plain = os.path.join(tmp, "vocab.gguf")
with gzip.open(src) as f, open(plain, "wb") as g:
    g.write(f.read())
rd = gguf.GGUFReader(plain)
arch = rd.fields["general.architecture"].contents()
w = gguf.GGUFWriter(os.path.join(tmp, "pre.gguf"), arch)
for name, field in rd.fields.items():
    if name.startswith("GGUF.") or name == "general.architecture":
        continue
    value = pre if name == "tokenizer.ggml.pre" else field.contents()
    vtype = field.types[0]
    if vtype == gguf.GGUFValueType.ARRAY:
        w.add_key_value(name, value, vtype, sub_type=field.types[-1])
    else:
        w.add_key_value(name, value, vtype)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

llm = Llama(model_path=os.path.join(tmp, "pre.gguf"), vocab_only=True, verbose=False)
inp = open(src[: -len(".gz")] + ".inp", encoding="utf-8").read()
cases = inp.split("\n__ggml_vocab_test__\n")  # as crates/vocab/tests/fixtures.rs reads it
if cases and cases[-1] == "":
    cases.pop()
with open(out, "w") as f:
    for text in cases:
        ids = llm.tokenize(text.encode(), add_bos=False, special=False)
        f.write("".join(f" {i}" for i in ids) + "\n")
print(len(cases), "strings")
