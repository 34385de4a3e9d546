// Batched matrix product C[b] = A[b] @ B[b] with 16x16 shared-memory tiles. A and B are strided views
// (transposed operands need no copy); C is contiguous (batch, M, N) in the 4-byte compute type.
// Params: p[0] M, p[1] N, p[2] K, p[3] A offset, p[4] B offset, p[5] A row stride, p[6] A k stride,
// p[7] B k stride, p[8] B col stride, p[9] batch rank (<= 4), p[10..14] batch dims,
// p[14..18] A batch strides, p[18..22] B batch strides.
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<u32>;
@group(0) @binding(2) var<storage, read> in1: array<u32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;
{{PRELUDE}}
{{LOADERS}}
var<workgroup> ta: array<array<{{CT}}, 16>, 16>;
var<workgroup> tb: array<array<{{CT}}, 16>, 16>;

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let m = p[0];
    let n = p[1];
    let kk = p[2];
    var a_base = p[3];
    var b_base = p[4];
    var rem = wid.z;
    for (var d = p[9]; d > 0u; d--) {
        let i = d - 1u;
        let idx = rem % p[10u + i];
        rem /= p[10u + i];
        a_base += idx * p[14u + i];
        b_base += idx * p[18u + i];
    }
    let row = wid.y * 16u + lid.y;
    let col = wid.x * 16u + lid.x;
    var acc = {{CT}}(0);
    for (var k0 = 0u; k0 < kk; k0 += 16u) {
        let ka = k0 + lid.x;
        var va = {{CT}}(0);
        if (row < m && ka < kk) { va = ld0(a_base + row * p[5] + ka * p[6]); }
        ta[lid.y][lid.x] = va;
        let kb = k0 + lid.y;
        var vb = {{CT}}(0);
        if (kb < kk && col < n) { vb = ld1(b_base + kb * p[7] + col * p[8]); }
        tb[lid.y][lid.x] = vb;
        workgroupBarrier();
        for (var j = 0u; j < 16u; j++) {
            acc += ta[lid.y][j] * tb[j][lid.x];
        }
        workgroupBarrier();
    }
    if (row < m && col < n) {
        dst[wid.z * m * n + row * n + col] = bitcast<u32>(acc);
    }
}
