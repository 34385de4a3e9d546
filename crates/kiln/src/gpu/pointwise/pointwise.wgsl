// Elementwise kernels: unary, binary, comparison, where, cast, copy. One invocation writes one output
// word. Inputs are views: element e of input i is at at_i(e), specialised per input as contiguous,
// scalar (all strides 0) or general strided.
// Params: `Strided` (mod.rs); op constants in p.op.
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
{{INPUTS}}
{{PARAMS}}
{{PRELUDE}}
{{LOADERS}}
{{INDEXERS}}
{{FUNCS}}
fn value(e: u32) -> {{OUT_CT}} {
    {{BODY}}
}
{{WIDE}}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let w = gid.x + gid.y * nw.x * 256u;
    let n = p.n;
    {{STORE}}
}
