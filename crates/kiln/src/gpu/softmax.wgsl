// Softmax / log-softmax over rows of a contiguous (rows, k) view, one workgroup per row, into f32.
// Params: p[0] rows, p[1] k, p[2] input offset, p[3] 1 for log-softmax.
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<u32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;
{{PRELUDE}}
{{LOADERS}}
var<workgroup> red: array<f32, 256>;

fn reduce_max(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            let a = red[lid];
            let b = red[lid + s];
            red[lid] = select(max(a, b), a + b, is_nan(a) || is_nan(b));
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

{{REDUCE_SUM}}
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {
    let lid = lid3.x;
    let row = wid.x + wid.y * nw.x;
    if (row >= p[0]) { return; }
    let k = p[1];
    let base = p[2] + row * k;
    var m = -inf_f32();
    for (var j = lid; j < k; j += 256u) {
        let x = ld0(base + j);
        m = select(max(m, x), x + m, is_nan(x) || is_nan(m));
    }
    m = reduce_max(lid, m);
    var s = 0.0;
    for (var j = lid; j < k; j += 256u) { s += exp(ld0(base + j) - m); }
    s = reduce_sum(lid, s);
    let ls = log(s);
    for (var j = lid; j < k; j += 256u) {
        let x = ld0(base + j) - m;
        var y = exp(x) / s;
        if (p[3] == 1u) { y = x - ls; }
        dst[row * k + j] = bitcast<u32>(y);
    }
}
