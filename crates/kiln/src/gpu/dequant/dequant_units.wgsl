// Dequantises a quantized tensor ({{QT}}) into {{OUT}} through the matrix-vector kernel's units
// (quant_word_units.wgsl: 32 consecutive values a unit): one invocation writes one output word.
// Params: `DequantParams` (mod.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> q: array<vec4<u32>>;
{{PARAMS}}
{{PRELUDE}}
{{UNITS}}
fn value(e: u32) -> f32 {
    // Row 0 and the unit's index in the whole tensor: blocks run on across rows.
    let w = load_{{F}}(0u, e / 32u, 0u, p.doff);
    let i = e % 32u;
    let r = i / 16u;
    return w.d[r] * q_{{F}}(w, r, (i % 16u) / 4u)[i % 4u] - w.m[r];
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let w = gid.x + gid.y * nw.x * 256u;
    let n = p.n;
    {{STORE}}
}
