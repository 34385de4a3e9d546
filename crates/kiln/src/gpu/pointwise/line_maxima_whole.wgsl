// The largest finite |x| of every K-contiguous line of a bf16 operand, as the bits of a non-negative
// f32, written (not maxed) into `mx`: each line is reduced inside one workgroup, so `mx` needs no
// zeroing first and the pass is one dispatch (line_maxima.wgsl maxes blocks atomically into a zeroed
// buffer: two). `p.threads` invocations (a power of two up to 256) take a line, 256 / threads lines
// a workgroup; each reads the line 8 values (16 bytes) at a time, then the line's invocations reduce
// in workgroup memory. Offset, line stride, batch strides and K are multiples of 8.
// The `scaled` variant also writes the lines as the cooperative matmul stages them, once: each value
// times its line's power of two (`line_exp`), rounded to f16, into `a16`, line after line (line
// `idx` at `idx * K`), so the product's workgroups read f16 and convert nothing.
// Params: `WholeParams` (line_maxima.rs).
@group(0) @binding(0) var<storage, read_write> mx: array<u32>;
{{A16}}@group(0) @binding({{XB}}) var<storage, read> x: array<vec4<u32>>;
{{PARAMS}}
{{LINE_EXP}}
var<workgroup> red: array<u32, 256>;

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) li: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nw: vec3<u32>,
) {
    let t = p.threads;
    let lane = li % t;
    let idx = (wid.x + wid.y * nw.x) * (256u / t) + li / t;
    let words = p.k >> 3u;
    var w0 = 0u;
    var m = 0u;
    if (idx < p.count) {
        let line = idx % p.lines;
        var base = p.offset;
        var rem = idx / p.lines;
        for (var d = p.rank; d > 0u; d--) {
            let i = d - 1u;
            base += (rem % p.dims[i]) * p.strides[i];
            rem /= p.dims[i];
        }
        w0 = (base + line * p.line_stride) >> 3u;
        let inf = vec4<u32>(0x7f800000u);
        for (var w = lane; w < words; w += t) {
            let v = x[w0 + w];
            let hi = v & vec4<u32>(0x7fff0000u);
            let lo = (v << vec4<u32>(16u)) & vec4<u32>(0x7fffffffu);
            let h = select(vec4<u32>(0u), hi, hi < inf);
            let l = select(vec4<u32>(0u), lo, lo < inf);
            let b = max(h, l);
            m = max(m, max(max(b.x, b.y), max(b.z, b.w)));
        }
    }
    red[li] = m;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (s < t && lane < s) {
            red[li] = max(red[li], red[li + s]);
        }
        workgroupBarrier();
    }
    if (lane == 0u && idx < p.count) {
        mx[p.first + idx] = red[li];
    }
{{SCALED}}}
