#!/usr/bin/env python3
"""Writes a GGUF file with the `gguf` package's GGUFWriter: every value type, arrays, and
tensors of several types and shapes. The Rust test `python_writer` builds the same content with
GgufWriter and expects the same bytes. Usage: write_ref.py OUT.gguf [ALIGNMENT]"""
import sys
import numpy as np
from gguf import GGUFWriter, GGUFValueType as V, GGMLQuantizationType as T

out = sys.argv[1]
align = int(sys.argv[2]) if len(sys.argv) > 2 else None
w = GGUFWriter(out, arch="test")
if align is not None:
    w.add_custom_alignment(align)
w.add_uint8("t.u8", 200)
w.add_int8("t.i8", -100)
w.add_uint16("t.u16", 60000)
w.add_int16("t.i16", -30000)
w.add_uint32("t.u32", 4000000000)
w.add_int32("t.i32", -2000000000)
w.add_float32("t.f32", 0.1)
w.add_bool("t.bool", True)
w.add_string("t.str", "héllo GGUF")
w.add_uint64("t.u64", 2**63 + 5)
w.add_int64("t.i64", -(2**62))
w.add_float64("t.f64", 2.718281828459045)
w.add_array("t.arr.i32", [1, -2, 3])
w.add_array("t.arr.f32", [0.5, -1.25])
w.add_array("t.arr.str", ["a", "", "ccc"])
w.add_key_value("t.arr.bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
w.add_key_value("t.arr.u8", [1, 2, 255], V.ARRAY, sub_type=V.UINT8)
w.add_key_value("t.arr.f64", [1.5], V.ARRAY, sub_type=V.FLOAT64)
rng = np.random.default_rng(7)
w.add_tensor("a.f32", rng.standard_normal((3, 5)).astype(np.float32))
w.add_tensor("b.f16", rng.standard_normal((7,)).astype(np.float16))
w.add_tensor("c.i32", np.arange(12, dtype=np.int32).reshape(2, 2, 3))
q = rng.integers(0, 256, size=(2, 18 * 2), dtype=np.uint8)
w.add_tensor("d.q4_0", q, raw_shape=(2, 36), raw_dtype=T.Q4_0)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
