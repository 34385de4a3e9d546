// A fused elementwise kernel (crate::fusion): one invocation computes 4 consecutive elements of
// every output and writes whole words. Leaves are read through at{i}(e) (contiguous, one element, or
// general strides over the merged dims) or, when contiguous and aligned, as one 16- or 8-byte unit
// per invocation into c{i}.
// Params: `FusedParams` (spec.rs); `len` is unused.
{{DECLS}}
{{PARAMS}}
{{PRELUDE}}
{{CACHES}}
{{LOADERS}}
{{INDEXERS}}
{{FUNCS}}
{{HELPERS}}
{{PRIVATES}}
fn compute(e: u32, j: u32) {
{{BODY}}}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let t = gid.x + gid.y * nw.x * 256u;
    let n = p.n;
    let e0 = 4u * t;
    if (e0 >= n) {
        return;
    }
{{FILLS}}
    for (var j = 0u; j < 4u; j++) {
        if (e0 + j < n) {
            compute(e0 + j, j);
        }
    }
{{STORES}}}
