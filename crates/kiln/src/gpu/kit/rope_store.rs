//! Where a rotated q/k/v pair goes (`rope_store.wgsl`), for the kernels that rotate a stacked q/k/v
//! row and append k and v to the caches: `kv/` (`rope_kv.wgsl`, after the product) and `matvec/`
//! (the quantized product's own finish, `quant_i8.rs`).

use crate::gpu::runtime::wgsl::loader;
use crate::DType;

const ROPE_STORE: &str = include_str!("rope_store.wgsl");

/// `rope_store` (`rope_store.wgsl`) with what it calls for `dt` (f32, f16 or bf16): the cos/sin
/// loaders `ldc`/`lds` over `cs`/`sn`, and the pair stores `st_q`/`st_k`/`st_v` into `q_buf`, `kc`
/// and `vc` (`array<u32>` bindings all). Params: `d`, `nh`, `nkv`, `pos`, `len`, `k_off`, `v_off`,
/// `cos_off`, `sin_off`.
pub(crate) fn rope_store(dt: DType, q_buf: &str) -> String {
    let mut out = loader("ldc", "cs", dt);
    out += &loader("lds", "sn", dt);
    for (name, buf) in [("st_q", q_buf), ("st_k", "kc"), ("st_v", "vc")] {
        let body = match dt {
            DType::F16 => format!("{buf}[e / 2u] = pack2x16float(vec2<f32>(a, b));"),
            DType::BF16 => format!("{buf}[e / 2u] = bf16_bits(a) | (bf16_bits(b) << 16u);"),
            _ => format!("{buf}[e] = bitcast<u32>(a); {buf}[e + 1u] = bitcast<u32>(b);"),
        };
        out += &format!("fn {name}(e: u32, a: f32, b: f32) {{ {body} }}\n");
    }
    out + ROPE_STORE
}
