"""A GGUF file with every tensor dequantized to f32 by gguf-py (its reference dequantization) and
the metadata kept: llama.cpp run on it does kiln's arithmetic on the same weight values. Shared by
the reference scripts `real/make_reference.py` and `fixtures/make_llama_cpp_refs.py`."""
import gguf
import numpy as np


def dequantize_to_f32(src, dst):
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents())
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), f.types[0], sub_type=sub)
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, a.reshape([int(x) for x in reversed(t.shape.tolist())]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
