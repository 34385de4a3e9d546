// Decode attention, the `tile` variant (decode.wgsl is `slots`, decode_lanes.wgsl is `lanes`): short
// code and one round of loads per chunk of keys, for the latency of a decode step. One workgroup of
// WG invocations per (batch, key/value head, chunk of R query rows, split of the keys), as the other
// variants, and the same partial rows, so the fold (decode_fold.wgsl) and combine.wgsl serve it.
//
// A key row of d half values is read by LPK consecutive lanes (a lane group), CH 16-byte words (8
// values) per lane; the WG / LPK = NG lane groups take NG keys at a time. A chunk is KPG keys per
// group, NG * KPG keys: every key and value word of the chunk is requested at once (and the next
// chunk's before this one's arithmetic), then each lane takes its words' dot products with the
// pre-scaled queries (rows packed in a vec4), the lane group sums them with subgroup shuffles, and
// each group runs its own online softmax and value sums (the lane's 8 CH value columns per row).
// At the end the groups' (max, sum, NaN flag) and value sums are merged in workgroup memory, RR rows
// a round, and the rows written: final rows, or partial rows for the fold or the combine kernel.
// Its loop body is short (loops over few named registers, where the other variants unroll 16 slots
// or 32 lanes); on an H200 it reads long contexts' keys and values at 1.6 TB/s against `slots`' 1.0,
// and costs the same at short ones, where a dispatch and the split merge dominate
// (docs/PERFORMANCE.md, the eighth session). The chunk loop and the merge of the lane groups are
// tile_walk.wgsl, the constants tile_consts.wgsl (shared with paged_tile.wgsl).
//
// Params: `AttnParams` (mod.rs); p.blocks counts row chunks per head.
{{BINDINGS}}
{{PARAMS}}
{{PRELUDE}}
{{LOADERS}}
{{STORE}}

{{CONSTS}}
{{FOLD_DECLS}}

{{ROWS}}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {
    let g = wid.x + wid.y * nw.x;
    if (g >= p.groups) { return; }
    let hq = p.hq; let hkv = p.hkv; let tq = p.tq; let tk = p.tk; let dv = p.dv;
    let causal = p.causal == 1u;
    let nrc = p.blocks; let nsplit = p.splits;
    let rc = g % nrc;
    var r = g / nrc;
    let s = r % nsplit; r /= nsplit;
    let hk = r % hkv; let b = r / hkv;
    let group = hq / hkv;
    let kbeg = s * p.per_split;
    let kstop = min(kbeg + p.per_split, tk);
    // Row x of this chunk is query i of head hk * group + x / tq; rows past the group see no key.
    var limv = vec4<u32>(0u);
    var dead = vec4<bool>(true);
    var kend = 0u;
    var kvis = 0u;
    for (var x = 0u; x < R; x++) {
        let gr = rc * R + x;
        if (gr < group * tq) {
            dead[x] = false;
            let vis = visible(gr % tq, tq, tk, causal);
            limv[x] = min(vis, kstop);
            kvis = max(kvis, vis);
        }
        kend = max(kend, limv[x]);
    }
    let nvis = min(nsplit, (kvis + p.per_split - 1u) / p.per_split);
{{PARTIAL}}
    if (kbeg >= kend) {
        // No row of the chunk sees a key of this split (see decode.wgsl).
        if (!partial && s == 0u) {
            for (var e = t; e < R * DV4; e += WG) {
                let x = e / DV4; let c = 4u * (e % DV4);
                let gr = rc * R + x;
                if (gr < group * tq && c < dv) {
                    let h = hk * group + gr / tq;
                    store4(((b * hq + h) * tq + gr % tq) * dv + c, vec4<f32>(0.0), min(4u, dv - c));
                }
            }
        }
        return;
    }
    let lg = t / LPK; let lane = t % LPK;
    // Words (8 values) of this lane's first column in the key and value rows.
    let kw0 = (p.k_off + b * p.k_sb + hk * p.k_sh) / 8u + lane; let kst = p.k_st / 8u;
    let vw0 = (p.v_off + b * p.v_sb + hk * p.v_sh) / 8u + lane; let vst = p.v_st / 8u;
    let step = NG * KPG;
    // The first chunk's words, requested before the queries.
{{FIRST}}
    for (var e = t; e < R * DV4 * 4u; e += WG) {
        let x = e / (DV4 * 4u); let c = e % (DV4 * 4u);
        let gr = rc * R + x;
        var qv = 0.0;
        if (gr < group * tq) {
            let h = hk * group + gr / tq;
            qv = ld0(p.q_off + b * p.q_sb + h * p.q_sh + (gr % tq) * p.q_st + c * p.q_se) * p.scale;
        }
        sm[QB + e / 4u][e % 4u] = qv;
    }
{{WALK}}
{{ROUNDS}}
{{TAIL}}
}
