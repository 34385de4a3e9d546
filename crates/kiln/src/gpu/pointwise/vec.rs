//! The vectorised elementwise path (`vec.wgsl`): each invocation computes four output
//! words (4 to 16 elements, `lanes`), loading its inputs with 16-byte vector loads. Memory-bound ops
//! need the bytes in flight that this gives; the scalar kernel (`pointwise.wgsl`) stays the general
//! fallback (i64/u64, views whose rows are not whole vectors, misaligned offsets, index ops).
//!
//! Input variants: `c` contiguous (rank 1), `v` strided with a unit inner stride, both read into a
//! private cache; `s` one scalar; `b` broadcast along the inner dim (inner stride 0), one element per
//! invocation. `v` and `b` need the inner dim to be a multiple of `lanes`, so one invocation never
//! crosses a row; cached inputs need offsets and outer strides that keep vector loads aligned.

use super::strided::params_wgsl;
use crate::gpu::runtime::params::Block;
use crate::gpu::runtime::wgsl::{self, ct, loader, PRELUDE};
use crate::DType;

const TEMPLATE: &str = include_str!("vec.wgsl");

/// Whether the vectorised path may be used (`KILN_EW_VEC=0` turns it off, for comparisons).
pub(crate) fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::settings::EW_VEC.is_not_zero())
}

/// Output elements per invocation for output dtype `out`.
pub(crate) fn lanes(out: DType) -> usize {
    4 * wgsl::per_word(out)
}

/// The variant of each input, or `None` when the vectorised path does not apply.
/// `inputs` holds each input's (dtype, offset, collapsed strides, buffer size in bytes).
pub(crate) fn plan(out: DType, dims: &[usize], inputs: &[(DType, usize, &[usize], u64)]) -> Option<String> {
    let wide = |d: DType| matches!(d, DType::I64 | DType::U64);
    if wide(out) || inputs.iter().any(|i| wide(i.0)) {
        return None;
    }
    let l = lanes(out);
    let rank = dims.len();
    let inner = dims[rank - 1];
    let mut variants = String::new();
    for &(_, off, strides, size) in inputs {
        let v = if strides.iter().all(|&s| s == 0) {
            's'
        } else if strides[rank - 1] == 1 {
            let aligned = off.is_multiple_of(l)
                && size.is_multiple_of(16)
                && strides[..rank - 1].iter().all(|s| s.is_multiple_of(l));
            match (aligned, rank) {
                (false, _) => return None,
                (true, 1) => 'c',
                (true, _) if inner.is_multiple_of(l) => 'v',
                _ => return None,
            }
        } else if strides[rank - 1] == 0 && inner.is_multiple_of(l) {
            'b'
        } else {
            return None;
        };
        variants.push(v);
    }
    Some(variants)
}

/// The WGSL of a vectorised elementwise kernel (see [`super::source`] for `body`).
pub(crate) fn source(variants: &str, inputs: &[DType], out: DType, body: &str, funcs: &str) -> String {
    source_with(variants, inputs, out, body, funcs, None)
}

/// [`source`] of an op with constants `op` (read by `body` as `p.op`).
pub(crate) fn source_with(
    variants: &str,
    inputs: &[DType],
    out: DType,
    body: &str,
    funcs: &str,
    op: Option<&Block>,
) -> String {
    let l = lanes(out);
    let (mut decls, mut caches, mut loaders, mut indexers, mut fill) =
        (String::new(), String::new(), String::new(), String::new(), String::new());
    for (i, (v, &dt)) in variants.chars().zip(inputs).enumerate() {
        let binding = i + 1;
        let q = wgsl::per_word(dt);
        let words = l / q;
        let cached = matches!(v, 'c' | 'v');
        let elem = if cached && words >= 4 {
            "vec4<u32>"
        } else if cached && words == 2 {
            "vec2<u32>"
        } else {
            "u32"
        };
        decls += &format!("@group(0) @binding({binding}) var<storage, read> in{i}: array<{elem}>;\n");
        if !cached {
            loaders += &loader(&format!("ld{i}"), &format!("in{i}"), dt);
            loaders += &crate::gpu::runtime::wgsl::bits_loader(i, &format!("in{i}"), dt, body);
            let at = if v == 's' {
                format!("p.offsets[{i}u]")
            } else {
                caches += &format!("var<private> b{i}: u32;\n");
                fill += &format!("b{i} = strided({i}u, e0);\n    ");
                format!("b{i}")
            };
            indexers += &format!("fn at{i}(e: u32) -> u32 {{ return {at}; }}\n");
            continue;
        }
        caches += &format!("var<private> c{i}: array<u32, {words}>;\n");
        loaders += &loader(&format!("ld{i}"), &format!("c{i}"), dt);
        loaders += &crate::gpu::runtime::wgsl::bits_loader(i, &format!("c{i}"), dt, body);
        indexers += &format!("fn at{i}(e: u32) -> u32 {{ return e; }}\n");
        let base = if v == 'c' { format!("p.offsets[{i}u] + e0") } else { format!("strided({i}u, e0)") };
        fill += &format!("let w{i} = ({base}) / {q}u;\n    ");
        match words {
            1 => fill += &format!("c{i}[0] = in{i}[w{i}];\n    "),
            2 => fill += &format!("let v{i} = in{i}[w{i} / 2u]; c{i}[0] = v{i}.x; c{i}[1] = v{i}.y;\n    "),
            _ => {
                for j in 0..words / 4 {
                    fill += &format!("let v{i}_{j} = in{i}[w{i} / 4u + {j}u]; ");
                    for (k, c) in ["x", "y", "z", "w"].iter().enumerate() {
                        fill += &format!("c{i}[{}] = v{i}_{j}.{c}; ", 4 * j + k);
                    }
                    fill += "\n    ";
                }
            }
        }
    }
    let words: Vec<String> = (0..4).map(|k| word(out, k)).collect();
    crate::gpu::runtime::kernels::render(
        TEMPLATE,
        &[
            ("LANES", &l.to_string()),
            ("INPUTS", &decls),
            ("PARAMS", &params_wgsl(op)),
            ("PRELUDE", PRELUDE),
            ("CACHES", &caches),
            ("LOADERS", &loaders),
            ("INDEXERS", &indexers),
            ("FUNCS", funcs),
            ("OUT_CT", ct(out)),
            ("BODY", body),
            ("FILL", fill.trim_end()),
            ("WORDS", &words.join(", ")),
        ],
    )
}

/// The WGSL expression of output word `k` (lanes `k * per_word ..`) of an `out` result.
fn word(out: DType, k: usize) -> String {
    let v = |j: usize| format!("value({j}u)");
    match out {
        DType::F32 | DType::I32 => format!("bitcast<u32>({})", v(k)),
        DType::F16 => format!("pack2x16float(vec2<f32>({}, {}))", v(2 * k), v(2 * k + 1)),
        DType::BF16 => format!("bf16_bits({}) | (bf16_bits({}) << 16u)", v(2 * k), v(2 * k + 1)),
        DType::U8 | DType::Bool => {
            (0..4).map(|j| format!("(({} & 0xffu) << {}u)", v(4 * k + j), 8 * j)).collect::<Vec<_>>().join(" | ")
        }
        DType::I8 => (0..4)
            .map(|j| format!("((bitcast<u32>({}) & 0xffu) << {}u)", v(4 * k + j), 8 * j))
            .collect::<Vec<_>>()
            .join(" | "),
        DType::I16 => {
            format!("(bitcast<u32>({}) & 0xffffu) | (bitcast<u32>({}) << 16u)", v(2 * k), v(2 * k + 1))
        }
        DType::U16 => format!("({} & 0xffffu) | ({} << 16u)", v(2 * k), v(2 * k + 1)),
        _ => v(k),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_follow_alignment_and_rows() {
        let f = DType::F32;
        // Contiguous and scalar inputs.
        assert_eq!(plan(f, &[10], &[(f, 0, &[1], 64), (f, 0, &[0], 64)]).as_deref(), Some("cs"));
        // A misaligned offset or a buffer that is not whole vectors falls back.
        assert_eq!(plan(f, &[10], &[(f, 2, &[1], 64)]), None);
        assert_eq!(plan(f, &[10], &[(f, 0, &[1], 60)]), None);
        // Row broadcast: rows that are whole vectors, else fall back.
        assert_eq!(plan(f, &[3, 8], &[(f, 0, &[8, 1], 128), (f, 0, &[0, 1], 64)]).as_deref(), Some("vv"));
        assert_eq!(plan(f, &[3, 6], &[(f, 0, &[6, 1], 128), (f, 0, &[0, 1], 64)]), None);
        // Column broadcast, and f16 output (8 lanes).
        assert_eq!(plan(f, &[3, 8], &[(f, 0, &[8, 1], 128), (f, 0, &[1, 0], 64)]).as_deref(), Some("vb"));
        assert_eq!(plan(DType::F16, &[3, 4], &[(f, 0, &[4, 1], 64)]), None);
        // i64 and transposed views never vectorise.
        assert_eq!(plan(DType::I64, &[8], &[(DType::I64, 0, &[1], 64)]), None);
        assert_eq!(plan(f, &[4, 4], &[(f, 0, &[1, 4], 64)]), None);
    }
}
