// Fills words: dst[w] = p.pattern[w % p.period] for w < p.len.
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
{{PARAMS}}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let w = gid.x + gid.y * nw.x * 256u;
    if (w >= p.len) { return; }
    dst[w] = p.pattern[w % p.period];
}
