//! How each dtype lives in a WGSL kernel. Every buffer is `array<u32>`: 4-byte types are one element
//! per word, f16/bf16/i16/u16 two, u8/i8/bool four, i64/u64 one element in two words (low word
//! first). Kernels read
//! any element with a generated `ldN(e)` function into a compute type (`f32` for floats, `i32` for
//! signed, `u32` for unsigned and bool) and write whole words, so no two invocations ever write the
//! same word. f64 is refused: Metal has no f64, and SHADER_F64 on Vulkan lacks the transcendentals.

use crate::{DType, Error, Layout, Result};

/// The WGSL type a dtype computes in.
pub(crate) fn ct(dt: DType) -> &'static str {
    match dt {
        DType::F32 | DType::F16 | DType::BF16 | DType::F64 => "f32",
        DType::I32 | DType::I64 | DType::I8 | DType::I16 => "i32",
        DType::U32 | DType::U8 | DType::Bool | DType::U16 | DType::U64 => "u32",
    }
}

/// Elements per 32-bit word when writing (`i64` writes one element as two words: 1 here).
pub(crate) fn per_word(dt: DType) -> usize {
    match dt {
        DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
        DType::U8 | DType::Bool | DType::I8 => 4,
        _ => 1,
    }
}

/// Bytes a buffer of `n` elements of `dt` needs (whole words).
pub(crate) fn buffer_bytes(dt: DType, n: usize) -> u64 {
    ((n * dt.size_in_bytes()).div_ceil(4) * 4) as u64
}

/// Whether every element index of the view `l` (offset plus the largest step along each dim) fits
/// in a kernel's u32 index arithmetic. Views of no element are not asked about.
pub(crate) fn indexable(l: &Layout) -> bool {
    l.offset() as u64 + l.dims().iter().zip(l.strides()).map(|(&d, &s)| (d as u64 - 1) * s as u64).sum::<u64>()
        < u32::MAX as u64
}

/// A rank-4 view as parameter words: its offset, then its four strides.
pub(crate) fn view_words(l: &Layout) -> [u32; 5] {
    let s = l.strides();
    [l.offset() as u32, s[0] as u32, s[1] as u32, s[2] as u32, s[3] as u32]
}

/// Refuses dtypes the GPU backend cannot store.
pub(crate) fn check_dtype(op: &'static str, dt: DType) -> Result<()> {
    if dt == DType::F64 {
        return Err(Error::dtype(op, dt, "the GPU backend has no f64 (Metal has none, and SHADER_F64 lacks exp/log/sin on Vulkan); cast to f32 first"));
    }
    Ok(())
}

/// `fn {name}(e: u32) -> CT` reading element `e` of `array<u32>` `buf` as `dt`.
pub(crate) fn loader(name: &str, buf: &str, dt: DType) -> String {
    let body = match dt {
        DType::F32 | DType::F64 => format!("return bitcast<f32>({buf}[e]);"),
        DType::I32 => format!("return bitcast<i32>({buf}[e]);"),
        DType::U32 => format!("return {buf}[e];"),
        DType::F16 => format!("return unpack2x16float({buf}[e >> 1u])[e & 1u];"),
        DType::BF16 => {
            format!("let w = {buf}[e >> 1u]; return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (e & 1u) == 1u));")
        }
        DType::U8 | DType::Bool => format!("return ({buf}[e >> 2u] >> (8u * (e & 3u))) & 0xffu;"),
        DType::I64 => format!("return bitcast<i32>({buf}[2u * e]);"),
        // Sign extension: the byte (half word) moved to the top, then an arithmetic shift down.
        DType::I8 => format!("return bitcast<i32>({buf}[e >> 2u] << (24u - 8u * (e & 3u))) >> 24u;"),
        DType::I16 => format!("return bitcast<i32>({buf}[e >> 1u] << (16u - 16u * (e & 1u))) >> 16u;"),
        DType::U16 => format!("return ({buf}[e >> 1u] >> (16u * (e & 1u))) & 0xffffu;"),
        // The low word, like i64 (ops that need all 64 bits read both words themselves).
        DType::U64 => format!("return {buf}[2u * e];"),
    };
    format!("fn {name}(e: u32) -> {} {{ {body} }}\n", ct(dt))
}

/// `fn bits{i}(e: u32) -> u32`, the raw 16 bits of f16 element `e` of input `i`, for a body that calls
/// it: `unpack2x16float` may drop the sign of a NaN (NVIDIA's does), so what needs the bits reads them.
pub(crate) fn bits_loader(i: usize, buf: &str, dt: DType, body: &str) -> String {
    let name = format!("bits{i}");
    if dt == DType::F16 && body.contains(&format!("{name}(")) {
        loader(&name, buf, DType::U16)
    } else {
        String::new()
    }
}

/// Helper functions every kernel may use.
pub(crate) const PRELUDE: &str = r#"
fn nan_f32() -> f32 { return bitcast<f32>(0x7fc00000u); }
fn inf_f32() -> f32 { return bitcast<f32>(0x7f800000u); }
fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn bf16_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if (is_nan(v)) { return ((b >> 16u) & 0x8000u) | 0x7fc0u; } // a quiet NaN keeping its sign, as on the CPU
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}
"#;

/// Statements that compute and store output word `w` (elements from `value(e)`) for `dt`, given the
/// element count `n`. Returns the statements and the number of invocations needed.
pub(crate) fn store_word(dt: DType, n: usize) -> (String, usize) {
    let s = match dt {
        DType::F32 => "if (w >= n) { return; } dst[w] = bitcast<u32>(value(w));".to_string(),
        DType::I32 => "if (w >= n) { return; } dst[w] = bitcast<u32>(value(w));".to_string(),
        DType::U32 => "if (w >= n) { return; } dst[w] = value(w);".to_string(),
        DType::I64 | DType::U64 => {
            "if (w >= n) { return; } let v = wide(w); dst[2u * w] = v.x; dst[2u * w + 1u] = v.y;".to_string()
        }
        DType::F16 | DType::BF16 => {
            let pack = if dt == DType::F16 {
                "pack2x16float(vec2<f32>(a, b))"
            } else {
                "bf16_bits(a) | (bf16_bits(b) << 16u)"
            };
            format!(
                "let e = 2u * w; if (e >= n) {{ return; }} let a = value(e); var b = 0.0; \
                 if (e + 1u < n) {{ b = value(e + 1u); }} dst[w] = {pack};"
            )
        }
        DType::U8 | DType::Bool => "let e = 4u * w; if (e >= n) { return; } var word = 0u; \
             for (var j = 0u; j < 4u; j++) { if (e + j < n) { word |= (value(e + j) & 0xffu) << (8u * j); } } \
             dst[w] = word;"
            .to_string(),
        DType::I8 => "let e = 4u * w; if (e >= n) { return; } var word = 0u; \
             for (var j = 0u; j < 4u; j++) { if (e + j < n) { word |= (bitcast<u32>(value(e + j)) & 0xffu) << (8u * j); } } \
             dst[w] = word;"
            .to_string(),
        DType::I16 | DType::U16 => format!(
            "let e = 2u * w; if (e >= n) {{ return; }} var word = {c}(value(e)) & 0xffffu; \
             if (e + 1u < n) {{ word |= ({c}(value(e + 1u)) & 0xffffu) << 16u; }} dst[w] = word;",
            c = if dt == DType::I16 { "bitcast<u32>" } else { "" }
        ),
        DType::F64 => unreachable!("f64 is refused before kernels are built"),
    };
    (s, n.div_ceil(per_word(dt)))
}

/// The default `wide(e)` of an i64 output: `value(e)` sign-extended.
pub(crate) const WIDE_SIGN_EXTEND: &str = "fn wide(e: u32) -> vec2<u32> { let v = value(e); \
     return vec2<u32>(bitcast<u32>(v), select(0u, 0xffffffffu, v < 0)); }";

/// The default `wide(e)` of a u64 output: `value(e)` zero-extended (u32 compute type).
pub(crate) const WIDE_ZERO_EXTEND: &str = "fn wide(e: u32) -> vec2<u32> { return vec2<u32>(value(e), 0u); }";

/// A WGSL literal of `v` in compute type `ct`, as bits in a parameter word.
pub(crate) fn param_bits(ct: &str, v: f64) -> u32 {
    match ct {
        "f32" => (v as f32).to_bits(),
        "i32" => (v as i32) as u32,
        _ => v as u32,
    }
}

/// Workgroup grid for `threads` invocations of `wg`-sized workgroups, folding into y past `max`
/// (kernels index workgroups as `x + y * num_workgroups.x`). The fold keeps x as even as possible, so
/// at most `y - 1` surplus workgroups are launched: 262144 groups run as 52429 x 5, not 65535 x 5
/// (65531 empty workgroups cost a large copy about 7% on an H200).
pub(crate) fn grid(threads: usize, wg: usize, max: u32) -> [u32; 3] {
    let groups = threads.div_ceil(wg) as u64;
    if groups <= max as u64 {
        [groups as u32, 1, 1]
    } else {
        let y = groups.div_ceil(max as u64);
        [groups.div_ceil(y) as u32, y as u32, 1]
    }
}

/// Dtypes read a 16-byte pack at a time by the `VEC` variants.
pub(crate) fn vec_dtype(dt: DType) -> bool {
    matches!(dt, DType::F32 | DType::I32 | DType::U32 | DType::F16 | DType::BF16)
}

/// Elements in a 16-byte pack of `dt`.
pub(crate) fn pack_elems(dt: DType) -> usize {
    4 * per_word(dt)
}

/// `loader(name, .., dt)` reading words through `rd(i)` (inputs bound as `array<vec4<u32>>`).
pub(crate) fn pack_loader(name: &str, dt: DType) -> String {
    let text = loader(name, "\u{1}", dt);
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("\u{1}[") {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 2..];
        let end = tail.find(']').expect("loader indexes with brackets");
        out.push_str(&format!("rd({})", &tail[..end]));
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The vec4 values (in element order) of the 16-byte pack `w` of `dt`, in its compute type.
pub(crate) fn expand(dt: DType, w: &str) -> Vec<String> {
    let bf = |a: &str, b: &str| {
        format!(
            "vec4<f32>(bitcast<f32>({w}.{a} << 16u), bitcast<f32>({w}.{a} & 0xffff0000u), \
             bitcast<f32>({w}.{b} << 16u), bitcast<f32>({w}.{b} & 0xffff0000u))"
        )
    };
    match dt {
        DType::F32 => vec![format!("bitcast<vec4<f32>>({w})")],
        DType::I32 => vec![format!("bitcast<vec4<i32>>({w})")],
        DType::U32 => vec![w.to_string()],
        DType::F16 => vec![
            format!("vec4<f32>(unpack2x16float({w}.x), unpack2x16float({w}.y))"),
            format!("vec4<f32>(unpack2x16float({w}.z), unpack2x16float({w}.w))"),
        ],
        DType::BF16 => vec![bf("x", "y"), bf("z", "w")],
        _ => unreachable!("{dt} is not read in packs"),
    }
}

#[cfg(test)]
mod tests {
    use super::grid;

    #[test]
    fn grid_covers_every_group_with_few_surplus() {
        for (threads, wg, max) in [
            (0usize, 256usize, 65535u32),
            (1, 256, 65535),
            (64 << 20, 256, 65535),
            (65535 * 256 + 1, 256, 65535),
            (43, 1, 7),
            (49, 1, 7),
            (48, 1, 7),
        ] {
            let groups = threads.div_ceil(wg) as u64;
            let [x, y, z] = grid(threads, wg, max);
            let launched = x as u64 * y as u64 * z as u64;
            assert!(x <= max && y <= max && z == 1, "{threads} {wg} {max}: {x}x{y}");
            assert!(launched >= groups && launched - groups < y as u64, "{threads} {wg} {max}: {x}x{y} for {groups}");
        }
        assert_eq!(grid(64 << 20, 256, 65535), [52429, 5, 1]);
    }
}
