// Vectorised elementwise kernels: one invocation computes {{LANES}} consecutive output elements, written
// as one 16-byte vector of output words. An input is either cached (its lanes read with 16-, 8- or
// 4-byte loads into the private array c{i}, then `ldN(lane)` unpacks lane `lane`) or read element by
// element from its buffer at a fixed index (a scalar, or a value broadcast along the lanes).
// Params: `Strided` (mod.rs), p.n counting vectors; op constants in p.op.
@group(0) @binding(0) var<storage, read_write> dst: array<vec4<u32>>;
{{INPUTS}}
{{PARAMS}}
{{PRELUDE}}
{{CACHES}}
{{LOADERS}}
{{INDEXERS}}
{{FUNCS}}
fn value(e: u32) -> {{OUT_CT}} {
    {{BODY}}
}

/// Element offset of output element `e` in input `i`'s buffer (general strides).
fn strided(i: u32, e: u32) -> u32 {
    var rem = e;
    var off = p.offsets[i];
    for (var d = p.rank; d > 0u; d--) {
        let k = d - 1u;
        off += (rem % p.dims[k]) * p.strides[8u * i + k];
        rem /= p.dims[k];
    }
    return off;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let w = gid.x + gid.y * nw.x * 256u;
    if (w >= p.n) {
        return;
    }
    let e0 = w * {{LANES}}u;
    {{FILL}}
    dst[w] = vec4<u32>({{WORDS}});
}
