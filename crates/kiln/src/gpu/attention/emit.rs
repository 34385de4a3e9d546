//! Emitter pieces the attention kernels share: the row rules (rows.wgsl), line builders, the output stores, the q/k/v granule
//! loaders, whether a view can be read in granules, and the dispatch of one kernel.

use crate::gpu::runtime::wgsl::{self, loader};
use crate::gpu::runtime::GpuStorage;
use crate::{DType, Layout, Result};
use std::fmt::Write;

/// Which keys a query sees and its scores' soft cap, for every attention kernel (`{{MASK}}`).
pub(super) const MASK: &str = include_str!("mask.wgsl");
/// The attention-row rules the split decode kernels share (`{{ROWS}}`: [`MASK`], a finished row, the
/// running merge of split rows).
pub(super) const ROWS: &str = concat!(include_str!("mask.wgsl"), include_str!("rows.wgsl"));

/// `fn store4(e, v, n)`: elements `e..e + n` (n <= 4) of the final output, in `out` (f16/bf16 packed:
/// `e` and `n` even) and `fn put_raw(e, v, n)`: the same as f32 words.
pub(super) fn store_fns(out: DType) -> String {
    let raw = "fn put_raw(e: u32, v: vec4<f32>, n: u32) { for (var k = 0u; k < n; k++) { dst[e + k] = bitcast<u32>(v[k]); } }\n";
    let store = match out {
        DType::F16 => "fn store4(e: u32, v: vec4<f32>, n: u32) { dst[e >> 1u] = pack2x16float(v.xy); \
                       if (n > 2u) { dst[(e >> 1u) + 1u] = pack2x16float(v.zw); } }"
            .to_string(),
        DType::BF16 => {
            "fn store4(e: u32, v: vec4<f32>, n: u32) { dst[e >> 1u] = bf16_bits(v.x) | (bf16_bits(v.y) << 16u); \
                        if (n > 2u) { dst[(e >> 1u) + 1u] = bf16_bits(v.z) | (bf16_bits(v.w) << 16u); } }"
                .to_string()
        }
        _ => "fn store4(e: u32, v: vec4<f32>, n: u32) { put_raw(e, v, n); }".to_string(),
    };
    format!("{raw}{store}\n")
}

/// Appends one formatted line per item of `it`.
pub(super) fn lines<I: IntoIterator>(it: I, f: impl Fn(I::Item) -> String) -> String {
    it.into_iter().fold(String::new(), |mut s, x| {
        let _ = writeln!(s, "{}", f(x));
        s
    })
}

pub(super) const XYZW: [&str; 4] = ["x", "y", "z", "w"];

/// `fn ldq4(row, c, se, n)`, `ldk4`, `ldv4`: the 4-element granule at column `c` of the query / key /
/// value row starting at element `row` (columns past `n` read as 0), from bindings 1, 2, 3, and the
/// array types of those bindings. A binding marked in `vec` is read as whole aligned granules (unit
/// last stride, rows at multiples of 4 elements, `n` a multiple of 4); the others element by element
/// (then `ld0`, `ld1`, `ld2` exist too).
pub(super) fn granule_loaders(dt: DType, vec: [bool; 3]) -> (String, [&'static str; 3]) {
    let (vec_ty, body) = match dt {
        DType::F16 => ("array<vec2<u32>>", "return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));"),
        DType::BF16 => (
            "array<vec2<u32>>",
            "return vec4<f32>(bitcast<f32>(w.x << 16u), bitcast<f32>(w.x & 0xffff0000u), \
             bitcast<f32>(w.y << 16u), bitcast<f32>(w.y & 0xffff0000u));",
        ),
        _ => ("array<vec4<u32>>", "return bitcast<vec4<f32>>(w);"),
    };
    let mut s = String::new();
    let mut types = ["array<u32>"; 3];
    for (i, f) in ["ldq4", "ldk4", "ldv4"].into_iter().enumerate() {
        if vec[i] {
            types[i] = vec_ty;
            let _ = writeln!(
                s,
                "fn {f}(row: u32, c: u32, se: u32, n: u32) -> vec4<f32> {{ if (c >= n) {{ return vec4<f32>(0.0); }} \
                 let w = in{i}[(row + c) >> 2u]; {body} }}"
            );
        } else {
            s += &loader(&format!("ld{i}"), &format!("in{i}"), dt);
            let _ = writeln!(
                s,
                "fn {f}(row: u32, c: u32, se: u32, n: u32) -> vec4<f32> {{ var o = vec4<f32>(0.0); \
                 for (var k = 0u; k < 4u; k++) {{ if (c + k < n) {{ o[k] = ld{i}(row + (c + k) * se); }} }} return o; }}"
            );
        }
    }
    (s, types)
}

/// Whether a view can be read in aligned 4-element granules (`granule_loaders`).
pub(super) fn granular(s: &GpuStorage, l: &Layout) -> bool {
    granular_by(s, l, 4)
}

/// Whether a view can be read in aligned `n`-element granules: unit last stride, rows of a
/// multiple of `n` elements starting at multiples of `n`, and a buffer of whole 16-byte words.
pub(super) fn granular_by(s: &GpuStorage, l: &Layout, n: usize) -> bool {
    let st = l.strides();
    let e = l.dims()[3];
    (st[3] == 1 || e <= 1)
        && e.is_multiple_of(n)
        && [l.offset(), st[0], st[1], st[2]].iter().all(|x| x.is_multiple_of(n))
        && s.buffer.size().is_multiple_of(16)
}

/// Records `groups` workgroups of `wg` invocations of kernel `key` (folded past the grid limit):
/// binding 0 read-write, the others read-only.
pub(super) fn dispatch(
    ctx: &GpuStorage,
    key: String,
    src: impl FnOnce() -> String,
    bufs: &[&wgpu::Buffer],
    params: &[u32],
    groups: usize,
    wg: usize,
) -> Result<()> {
    dispatch_rw(ctx, key, src, 1, bufs, params, groups, wg)
}

/// [`dispatch`] of a kernel whose first `outputs` bindings are read-write.
#[allow(clippy::too_many_arguments)]
pub(super) fn dispatch_rw(
    ctx: &GpuStorage,
    key: String,
    src: impl FnOnce() -> String,
    outputs: usize,
    bufs: &[&wgpu::Buffer],
    params: &[u32],
    groups: usize,
    wg: usize,
) -> Result<()> {
    let ctx = &ctx.ctx;
    let kernel = ctx.pipelines.get_with(ctx, &key, outputs, bufs.len() - outputs, src)?;
    let grid = wgsl::grid(groups * wg, wg, ctx.limits.max_compute_workgroups_per_dimension);
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, &kernel, bufs, params, grid)
}
