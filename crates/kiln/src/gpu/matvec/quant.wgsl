// x (m, k) @ w^T for a quantized (n, k) weight w ({{QT}}) and few rows m of x ({{XDT}}), the
// weight read once per block of {{MT}} rows and dequantised in registers (quant_units.wgsl, quant_word_*.wgsl). A
// workgroup is {{SETS}} sets of {{LN}} lanes; a set owns {{C}} weight rows (output columns) and its
// lanes take every {{LN}}th unit of them, so a step of a set reads consecutive 16-byte vectors of
// each row (all C rows' loads issued before any is used), and each x value loaded serves the C
// rows. The lanes of a set are summed by {{SUM}}. Grid: x = column blocks of
// {{SETS}} * {{C}}, y = row blocks of {{MT}}. Output {{ODT}}.
// Params: `QuantMatvecParams` (quant.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<{{DST_ELEM}}>;
@group(0) @binding(1) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> q: array<vec4<u32>>;
{{ADDEND}}
{{PARAMS}}
{{PRELUDE}}
{{UNITS}}
var<workgroup> red: array<f32, {{RED}}>;

// Values i * 4.. i * 4 + 4 of x from value e (a multiple of 16) on.
{{XLOAD}}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>{{SG_ARGS}}) {
    let m = p.m;
    let n = p.n;
    let k = p.k;
    let doff = p.doff;
    let lane = tid % {{LN}}u;
    let col0 = (wid.x * {{SETS}}u + tid / {{LN}}u) * {{C}}u;
    let m0 = wid.y * {{MT}}u;
    let units = k / {{UV}}u;
{{SETUP}}
    for (var u = lane; u < units; u += {{LN}}u) {
        let pos = pos_{{F}}(u);
{{BODY}}
    }
{{REDUCE}}
    if (lane == 0u) {
{{FINISH}}
    }
}
