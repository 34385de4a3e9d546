// RMSNorm (p[3] == 1) or LayerNorm (p[3] == 0) over rows of a contiguous (rows, k) view, one
// workgroup per row, into f32. Weight and bias are strided vectors of length k.
// Params: p[0] rows, p[1] k, p[2] input offset, p[3] rms flag, p[4] eps (f32 bits), p[5] weight
// offset, p[6] weight stride, p[7] bias offset, p[8] bias stride, p[9] 1 if there is a bias.
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<u32>;
@group(0) @binding(2) var<storage, read> in1: array<u32>;
@group(0) @binding(3) var<storage, read> in2: array<u32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;
{{PRELUDE}}
{{LOADERS}}
var<workgroup> red: array<f32, 256>;

{{REDUCE_SUM}}
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {
    let lid = lid3.x;
    let row = wid.x + wid.y * nw.x;
    if (row >= p[0]) { return; }
    let k = p[1];
    let base = p[2] + row * k;
    let kf = f32(k);
    var mean = 0.0;
    if (p[3] == 0u) {
        var s = 0.0;
        for (var j = lid; j < k; j += 256u) { s += ld0(base + j); }
        mean = reduce_sum(lid, s) / kf;
    }
    var ss = 0.0;
    for (var j = lid; j < k; j += 256u) { let x = ld0(base + j) - mean; ss += x * x; }
    let r = 1.0 / sqrt(reduce_sum(lid, ss) / kf + bitcast<f32>(p[4]));
    for (var j = lid; j < k; j += 256u) {
        var y = (ld0(base + j) - mean) * r * ld1(p[5] + j * p[6]);
        if (p[9] == 1u) { y += ld2(p[7] + j * p[8]); }
        dst[row * k + j] = bitcast<u32>(y);
    }
}
