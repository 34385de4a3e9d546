// A fused row kernel (crate::fusion): one workgroup per row of the last axis. Each reduction is a
// pass over the row (its operand recomputed from the leaves by red{i}) and a workgroup tree; values
// constant along the row live in rv{i}; the last pass writes the outputs (4-byte words; packed
// dtypes are converted after). Params as in flat.wgsl, with p[2] the row length.
{{DECLS}}
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;
{{PRELUDE}}
{{LOADERS}}
{{INDEXERS}}
{{FUNCS}}
{{HELPERS}}
var<workgroup> red: array<u32, {{WG}}>;
var<private> erow: u32;
{{PRIVATES}}
{{ROWFUNCS}}
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.x + wid.y * nw.x;
    let len = p[2];
    if (row >= p[0] / len) {
        return;
    }
    erow = row * len;
{{PHASES}}
    for (var d = lid; d < len; d += {{WG}}u) {
        {{FULL}}
    }
    if (lid == 0u) {
{{ROWSTORES}}    }
}
