// A fused row kernel (crate::fusion, see row.rs): one workgroup of {{WG}} invocations per row of
// the last axis. The row is cut into packs of 4 elements and invocation lid owns packs lid + u * WG:
// leaves are read a pack at a time by lp{i}(q) (one 16- or 8-byte load where the row allows), kept
// in registers x{i}_{u} when the row fits, else read again by each pass. Each reduction sums up
// pk{i} over the invocation's packs, then wred{i} combines the invocations (subgroup operations or a
// workgroup-memory tree); values constant along the row live in rv{i} (leaves constant along it in
// rz{i}); st(q) computes and writes the outputs of a pack. Params: `FusedParams` (spec.rs), with
// `len` the row length and each leaf's stride along the row at the end of `view`.
{{DECLS}}
{{PARAMS}}
{{PRELUDE}}
var<private> erow: u32;
{{PRIVATES}}
{{LOADERS}}
{{INDEXERS}}
{{FUNCS}}
{{HELPERS}}
var<workgroup> red: array<u32, {{RED}}>;
{{ROWFUNCS}}
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) lid: u32{{SG_ARGS}}) {
    let row = wid.x + wid.y * nw.x;
    let len = p.len;
    if (row >= p.n / len) {
        return;
    }
    let packs = (len + 3u) / 4u;
    erow = row * len;
{{BASES}}
{{BODY}}
    if (lid == 0u) {
{{ROWSTORES}}    }
}
