// index_select / embedding / gather moving raw bits in units of UNIT (one 32-bit word, two words for
// 8-byte elements, or four words for 16-byte aligned rows), so NaN payloads and i64 values are kept
// exactly. The ids are read on the device (i64 as its two words: the low word, and the high word
// checked to be 0); an id outside 0..dim writes zeros: never a read outside the source.
// ROWS (index_select): out unit w is unit i of row (o, id[j]), w = (o * nid + j) * inner + i.
//   Params: `RowsParams` (mod.rs).
// GATHER (gather, one unit per element): the element of output e with its axis index replaced.
//   Params: `GatherParams` (mod.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<{{UNIT}}>;
@group(0) @binding(1) var<storage, read> src: array<{{UNIT}}>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
{{PARAMS}}

// Id j as u32; anything out of range (negative, a nonzero high word) maps to 0xffffffff.
fn id_at(j: u32) -> u32 {
    {{ID}}
}

fn source_unit(w: u32) -> u32 {
    {{BODY}}
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let w = gid.x + gid.y * nw.x * 256u;
    if (w >= p.units) { return; }
    let s = source_unit(w);
    if (s == 0xffffffffu) {
        dst[w] = {{UNIT}}();
        return;
    }
    dst[w] = src[s];
}
