// Batched matrix product C[b] = A[b] @ B[b] with 16x16 shared-memory tiles, one output per
// invocation, accumulating in the compute type (exact for integers). A and B are strided views;
// C is written through its strides. The kernel for integers and the fallback for floats.
// Params: `MatmulParams` (problem.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<u32>;
@group(0) @binding(2) var<storage, read> in1: array<u32>;
{{PARAMS}}
{{PRELUDE}}
{{LOADERS}}
{{BASES}}
var<workgroup> ta: array<array<{{CT}}, 16>, 16>;
var<workgroup> tb: array<array<{{CT}}, 16>, 16>;

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let m = p.m;
    let n = p.n;
    let kk = p.k;
    let base = bases(wid.z + p.first_batch);
    let row = wid.y * 16u + lid.y;
    let col = wid.x * 16u + lid.x;
    var acc = {{CT}}(0);
    for (var k0 = 0u; k0 < kk; k0 += 16u) {
        let ka = k0 + lid.x;
        var va = {{CT}}(0);
        if (row < m && ka < kk) { va = ld0(base.x + row * p.a_so + ka * p.a_sk); }
        ta[lid.y][lid.x] = va;
        let kb = k0 + lid.y;
        var vb = {{CT}}(0);
        if (kb < kk && col < n) { vb = ld1(base.y + kb * p.b_sk + col * p.b_so); }
        tb[lid.y][lid.x] = vb;
        workgroupBarrier();
        for (var j = 0u; j < 16u; j++) {
            acc += ta[lid.y][j] * tb[j][lid.x];
        }
        workgroupBarrier();
    }
    if (row < m && col < n) {
        dst[base.z + row * p.c_rs + col * p.c_cs] = bitcast<u32>(acc);
    }
}
