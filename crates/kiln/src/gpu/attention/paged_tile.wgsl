// Decode attention through a block table, the `tile` variant (paged_decode.wgsl is the slot one):
// decode_tile.wgsl's chunk loop (lane groups read whole key rows in 16-byte words, a chunk's loads
// all requested at once, short code) over position j of sequence b at slot j % block_size of block
// table[b * table_len + j / block_size] of the pool. One query per sequence; one workgroup per
// (sequence, key/value head, chunk of R query heads sharing it, split of the positions); with several
// splits the (max, sum) and unnormalised rows go to combine.wgsl, and a split past the sequence's
// length writes an empty (-inf, 0) row there, as paged_decode.wgsl does.
//
// Params: `PagedParams` (paged_decode.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<u32>;
@group(0) @binding(2) var<storage, read> in1: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> in2: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> table: array<u32>;
@group(0) @binding(5) var<storage, read> lens: array<u32>;
{{PARAMS}}
{{PRELUDE}}
{{MASK}}
{{LOADERS}}
{{STORE}}

{{CONSTS}}

// NaN where a score was NaN or no key weighed anything, else o / l (paged_decode.wgsl's rule).
fn finish(o: vec4<f32>, l: f32, bad: bool) -> vec4<f32> {
    if (bad || l == 0.0) { return vec4<f32>(nan_f32()); }
    return o / l;
}

// The 16-byte word where position `j` of sequence `b`, head `hk`, starts in a pool from element `off`.
fn prow(b: u32, hk: u32, j: u32, off: u32) -> u32 {
    let bs = p.block_size;
    let blk = min(table[b * p.table_len + j / bs], p.pool_blocks - 1u);
    return (off + ((blk * p.hkv + hk) * bs + j % bs) * p.d) / 8u;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {
    let g = wid.x + wid.y * nw.x;
    if (g >= p.groups) { return; }
    let hq = p.hq; let hkv = p.hkv; let dv = p.dv;
    let nrc = p.blocks; let nsplit = p.splits; let partial = p.partial == 1u;
    let rc = g % nrc;
    var r = g / nrc;
    let s = r % nsplit; r /= nsplit;
    let hk = r % hkv; let b = r / hkv;
    let group = hq / hkv;
    let len = lens[b];
    // The split's positions, from the first the window leaves (mask.wgsl: the last p.window).
    let kbeg = max(s * p.per_split, first_key(0u, 1u, len, p.window));
    let kend = min(s * p.per_split + p.per_split, len);
    if (kbeg >= kend) {
        // The sequence ends before this split, or its window starts after it: an empty partial row
        // (only with splits; a sequence has at least one position in its window, so some split holds it).
        if (partial && t < R) {
            let x = rc * R + t;
            if (x < group) {
                let pr = (b * hq + hk * group + x) * nsplit + s;
                dst[2u * pr] = bitcast<u32>(-inf_f32());
                dst[2u * pr + 1u] = 0u;
            }
        }
        return;
    }
    // Every position of the split is visible to every row of the group.
    var limv = vec4<u32>(0u);
    var dead = vec4<bool>(true);
    for (var x = 0u; x < R; x++) {
        if (rc * R + x < group) { limv[x] = kend; dead[x] = false; }
    }
    let lg = t / LPK; let lane = t % LPK;
    let step = NG * KPG;
{{FIRST}}
    for (var e = t; e < R * DV4 * 4u; e += WG) {
        let x = e / (DV4 * 4u); let c = e % (DV4 * 4u);
        var qv = 0.0;
        if (rc * R + x < group) {
            let h = hk * group + rc * R + x;
            qv = ld0(p.q_off + b * p.q_ss + h * p.q_sh + c * p.q_se) * p.scale;
        }
        sm[QB + e / 4u][e % 4u] = qv;
    }
{{WALK}}
{{ROUNDS}}
}
