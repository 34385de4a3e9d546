// The integer-dot product of quant_i8.wgsl (x's runs, the packed integers and idot of
// quant_int8.wgsl) as a stream: a grid of few workgroups, each making x's runs once ({{XFROM}}), whose
// sets of {{LN}} lanes (one subgroup each, summed by subgroupAdd alone) walk groups of {{C}} weight
// rows {{SETS}} * the grid apart (p.sets). Loading a step ahead (`prefetch` in quant_i8.rs), a lane requests its next unit's
// words (raw_{{F}}) before it works on the current one (dec_{{F}}, the integer dots), and its first
// ones before the workgroup makes x's runs, so the loads stay in flight while the arithmetic and the
// prologue run; else it requests each unit's words when it works on it. Format {{QT}}, output
// {{ODT}}, {{MT}} rows of x per workgroup (grid y). Params: `QuantI8Params` (quant_i8.rs).
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
    let m0 = wid.y * {{MT}}u;
    let units = k / {{UV}}u;
    let runs = k / 16u;
    // Steps of a lane over one group's rows; the set's group g, and its step s in it.
    let spl = (units + {{LN}}u - 1u) / {{LN}}u;
    var g = wid.x * {{SETS}}u + tid / {{LN}}u;
    var s = 0u;
{{FIRST}}
{{SETUP}}
    loop {
        if (g * {{C}}u >= n) {
            break;
        }
        let col0 = g * {{C}}u;
        let u = lane + s * {{LN}}u;
{{ROWS}}
        s += 1u;
        if (s == spl) {
            s = 0u;
            g += p.sets;
        }
{{NEXT}}
        if (u < units) {
            let t0 = pos_{{F}}(u) / 16u;
{{BODY}}
        }
        if (s == 0u) {
{{REDUCE}}
            if (lane == 0u) {
{{FINISH}}
            }
{{RESET}}
        }
    }
}
