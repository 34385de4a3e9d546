// Dequantises a quantized tensor ({{QT}}) into {{OUT}}: one invocation writes one output word.
// Params: `DequantParams` (mod.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> q: array<vec4<u32>>;
{{PARAMS}}
{{PRELUDE}}
{{FORMATS}}
fn value(e: u32) -> f32 {
    let b = e / {{BS}}u;
    let i = e % {{BS}}u;
    let s = i / 32u;
    let l = i % 32u;
    let g = l / 16u;
    return wq_{{F}}(ld_{{F}}(b, s, g), s, g, (l / 4u) & 3u, ws_{{F}}(b, s, p.doff))[l & 3u];
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let w = gid.x + gid.y * nw.x * 256u;
    let n = p.n;
    {{STORE}}
}
