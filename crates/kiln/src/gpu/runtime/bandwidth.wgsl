// The memory-bandwidth probe: a plain copy of p.len 16-byte vectors, one per invocation.
@group(0) @binding(0) var<storage, read_write> dst: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> src: array<vec4<u32>>;
{{PARAMS}}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = gid.x + gid.y * nw.x * 256u;
    if (i < p.len) {
        dst[i] = src[i];
    }
}
