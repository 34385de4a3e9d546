// x (m, k) @ w^T for a quantized (n, k) weight w ({{QT}}) and few rows m of x, on 4-way integer dot
// products: x as 16-bit fixed point per run of 16 values (qrun.wgsl: two planes of signed bytes, a
// scale and the run's sum; {{XFROM}}), the weight's integers packed four to a word
// (quant_int8.wgsl), and run r's dot d[r] dx (256 sum(u hi) + sum(u lo)) - (d[r] o + m[r]) dx sum(q),
// exact in integers up to the f32 scaling. A workgroup is {{SETS}} sets of {{LN}} lanes; a set owns
// {{C}} weight rows (output columns) and its lanes take every {{LN}}th unit of them (all C rows'
// loads issued before any is used); each x run read serves the C rows. The lanes of a set are summed
// by {{SUM}}. Grid: x = column blocks of {{SETS}} * {{C}}, y = row blocks of {{MT}}. Output {{ODT}}.
// Params: `QuantI8Params` (quant_i8.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<{{DST_ELEM}}>;
{{BINDINGS}}
{{PARAMS}}
{{PRELUDE}}
{{UNITS}}
var<workgroup> red: array<f32, {{RED}}>;
{{XLOCAL}}

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
    let runs = k / 16u;
{{SETUP}}
    for (var u = lane; u < units; u += {{LN}}u) {
        let t0 = pos_{{F}}(u) / 16u;
{{BODY}}
    }
{{REDUCE}}
    if (lane == 0u) {
{{FINISH}}
    }
}
