// x (m, k) @ w^T for a quantized (n, k) weight w ({{QT}}) and few rows m of x ({{XDT}}), the
// weight read once per block of {{MT}} rows and dequantised in registers (quant_units.wgsl). A
// workgroup is {{SETS}} sets of {{LN}} lanes; a set owns {{C}} weight rows (output columns) and its
// lanes take every {{LN}}th unit of them, so a step of a set reads consecutive 16-byte vectors of
// each row (all C rows' loads issued before any is used), and each x value loaded serves the C
// rows. The lanes of a set are summed by {{SUM}}. Grid: x = column blocks of
// {{SETS}} * {{C}}, y = row blocks of {{MT}}. Output {{ODT}}.
// Params: p[0] m, p[1] n, p[2] k, p[3] word offset of the scales (doff), p[4] x's offset in values
// (a multiple of 16); with an addend (a bias or residual added before the store): p[5] its row
// stride (0 for a bias), p[6] its offset, in elements (even for 16-bit outputs).
@group(0) @binding(0) var<storage, read_write> dst: array<{{DST_ELEM}}>;
@group(0) @binding(1) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> q: array<vec4<u32>>;
{{ADDEND}}
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;
{{PRELUDE}}
{{UNITS}}
var<workgroup> red: array<f32, {{RED}}>;

// Values i * 4.. i * 4 + 4 of x from value e (a multiple of 16) on.
{{XLOAD}}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>{{SG_ARGS}}) {
    let m = p[0];
    let n = p[1];
    let k = p[2];
    let doff = p[3];
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
