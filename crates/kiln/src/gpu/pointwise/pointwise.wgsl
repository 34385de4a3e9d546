// Elementwise kernels: unary, binary, comparison, where, cast, copy. One invocation writes one output
// word. Inputs are views: element e of input i is at at_i(e), specialised per input as contiguous,
// scalar (all strides 0) or general strided.
// Params: p[0] n, p[1] rank, p[2..10] dims, p[10 + 8i .. 18 + 8i] strides of input i (i < 3),
// p[34 + i] offset of input i, p[37..] op constants.
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
{{INPUTS}}
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;
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
    let n = p[0];
    {{STORE}}
}
