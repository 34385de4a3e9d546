// Inclusive prefix sums of the rows of a contiguous (rows, k) view, one invocation per row, into a
// 4-byte output of the same shape. Params: p[0] rows, p[1] k, p[2] input offset.
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<u32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;
{{PRELUDE}}
{{LOADERS}}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let row = gid.x + gid.y * nw.x * 64u;
    if (row >= p[0]) { return; }
    let k = p[1];
    var acc: {{CT}} = {{CT}}(0);
    for (var j = 0u; j < k; j++) {
        acc += {{CT}}(ld0(p[2] + row * k + j));
        dst[row * k + j] = bitcast<u32>(acc);
    }
}
