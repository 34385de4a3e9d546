// The decode step's dense matrix-vector product with its neighbours fused in:
// dst = scale * (pro(x) @ w^T) (+ addend), for few rows of x ({{MT}} per workgroup) and a dense
// (n, k) weight w ({{DT}}, 16-byte aligned rows), output {{DT}}. pro(x) is {{PRO}}.
// A workgroup is {{SETS}} sets of {{LN}} lanes; a set owns {{C}} weight rows (output columns) and its
// lanes take every {{LN}}th 16-byte unit ({{V}} values) of them, {{U}} units per loop step with all
// their loads issued first, so every weight byte is read once with wide, coalesced loads; each x
// unit loaded serves the C rows. The lanes of a set are summed by {{SUM}}.
// Grid: x = column blocks of {{SETS}} * {{C}}, y = row blocks of {{MT}}.
// Params: `DecodeParams` (dense.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<{{DST_ELEM}}>;
@group(0) @binding(1) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> w: array<vec4<u32>>;
{{EXTRA}}
{{PARAMS}}
{{PRELUDE}}
var<workgroup> red: array<f32, {{RED}}>;
{{HELPERS}}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>{{SG_ARGS}}) {
    let m = p.m;
    let n = p.n;
    let k = p.k;
    let units = k / {{V}}u;
    let lane = tid % {{LN}}u;
    let col0 = (wid.x * {{SETS}}u + tid / {{LN}}u) * {{C}}u;
    let m0 = wid.y * {{MT}}u;
{{SETUP}}
    for (var u = lane; u < units; u += {{U}}u * {{LN}}u) {
{{BODY}}
    }
{{REDUCE}}
    if (lane == 0u) {
{{FINISH}}
    }
}
