// Sums the partial products of a split-K matmul: dst[i] = sum over s of part[s * len + i], f32.
// Params: p[0] len, p[1] splits.
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = gid.x + gid.y * nw.x * 256u;
    let len = p[0];
    if (i >= len) { return; }
    var acc = 0.0;
    for (var s = 0u; s < p[1]; s++) {
        acc += part[s * len + i];
    }
    dst[i] = bitcast<u32>(acc);
}
