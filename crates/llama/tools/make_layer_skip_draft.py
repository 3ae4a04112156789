#!/usr/bin/env python3
"""A draft model for speculative decoding made from a model itself: its first N blocks, its
own embeddings, final norm and head (a "layer-skip" self-draft). It shares the vocabulary by
construction, so it is an honest stand-in where no same-vocabulary small model ships; its
proposals are worse than a trained draft's, which its acceptance rate shows.

Usage: VENV/bin/python crates/llama/tools/make_layer_skip_draft.py MODEL.gguf N OUT.gguf
"""
import sys

import gguf


def main():
    src, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(out, arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == f"{arch}.block_count":
            w.add_uint32(name, n)
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_array(name, field.contents())
        else:
            w.add_key_value(name, field.contents(), vtype)
    for t in r.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= n:
            continue
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
