// Fills words: dst[w] = p[2 + w % p[1]] for w < p[0].
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let w = gid.x + gid.y * nw.x * 256u;
    if (w >= p[0]) { return; }
    dst[w] = p[2u + w % p[1]];
}
