// Scaled dot-product attention for short query lengths (decode): split-K over the keys. One
// workgroup of 128 invocations per (batch, key/value head, chunk of R query rows, split of the keys);
// the R rows are the query heads that share the key/value head (grouped-query attention) times the
// queries, so each key and value is read once for all of them.
//
// Invocation t is key slot t / 8 (16 slots) and column group cg = t % 8. Each step takes 16 keys, one
// per slot, and one loop iteration takes U steps whose loads are all issued first (bytes in flight)
// with one barrier for all: the 8 invocations of a slot read interleaved 4-element granules cg + 8n
// of its key and of its value row (8 lanes cover 128 contiguous bytes of f32), the partial dot
// products with the resident queries are summed over the slot's lanes with subgroup shuffles (sg
// variants: no barrier in the loop) or through workgroup memory, and each invocation
// keeps its own running max, sum and weighted value sum (online softmax) for its 4NV value columns.
// At the end the 16 slots are merged in workgroup memory and the rows written: final rows when there
// is one split, else (max, sum) and unnormalised rows, which combine.wgsl merges in a second dispatch
// or, in the folded variant (FOLD), the last split workgroup of the row chunk merges (decode_fold.wgsl).
// The first keys and values are requested before the queries, so the two loads overlap.
//
// Params: `AttnParams` (mod.rs); p.blocks counts row chunks per head.
{{BINDINGS}}
{{PARAMS}}
{{PRELUDE}}
{{LOADERS}}
{{STORE}}

const R: u32 = {{R}}u;
const RR: u32 = {{RR}}u;
const U: u32 = {{U}}u;
// Invocations per workgroup.
const WG: u32 = 128u;
// Query elements per invocation.
const QN: u32 = (R * DP4 * 4u + 127u) / 128u;
const DP4: u32 = {{DP4}}u;
const DV4: u32 = {{DV4}}u;
const EXACT_D: bool = {{EXACT_D}};
// Regions (vec4): the queries and the partial dot products while walking the keys; the slots'
// (max, sum) and their value sums at the end.
const QB: u32 = 0u;
const PB: u32 = R * DP4;
const MB: u32 = 0u;
const SB: u32 = 16u * R;
var<workgroup> sm: array<vec4<f32>, {{TOTAL}}>;
{{FOLD_DECLS}}

{{ROWS}}

@compute @workgroup_size(128)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {
    let g = wid.x + wid.y * nw.x;
    if (g >= p.groups) { return; }
{{ABLATE_EMPTY}}
    let hq = p.hq; let hkv = p.hkv; let tq = p.tq; let tk = p.tk; let d = p.d; let dv = p.dv;
    let scale = p.scale; let causal = p.causal == 1u;
    let nrc = p.blocks; let nsplit = p.splits;
    // Row chunks of one key/value head and split are neighbours, so the second reads hit L2.
    let rc = g % nrc;
    var r = g / nrc;
    let s = r % nsplit; r /= nsplit;
    let hk = r % hkv; let b = r / hkv;
    let group = hq / hkv;
    let kbeg = s * p.per_split;
    let kstop = min(kbeg + p.per_split, tk);
    // Row x of this chunk is query i of head hk * group + x / tq; rows past the group are idle.
    var lim: array<u32, R>;
    var kend = 0u;
    // Keys the chunk's rows see: the splits holding one are those that write partial rows.
    var kvis = 0u;
    for (var x = 0u; x < R; x++) {
        let gr = rc * R + x;
        lim[x] = 0u;
        if (gr < group * tq) {
            let vis = visible(gr % tq, tq, tk, causal);
            lim[x] = min(vis, kstop);
            kvis = max(kvis, vis);
        }
        kend = max(kend, lim[x]);
    }
    let nvis = min(nsplit, (kvis + p.per_split - 1u) / p.per_split);
{{PARTIAL}}
    if (kbeg >= kend) {
        // No row of the chunk sees a key of this split: partial rows of it are never read (the combine
        // reads only the splits holding a visible key); final rows see no key at all and are zeros.
        if (!partial && s == 0u) {
            for (var e = t; e < R * DV4; e += 128u) {
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

    let kbase = p.k_off + b * p.k_sb + hk * p.k_sh; let kst = p.k_st; let kse = p.k_se;
    let vbase = p.v_off + b * p.v_sb + hk * p.v_sh; let vst = p.v_st; let vse = p.v_se;
    let slot = t / 8u; let cg = t % 8u;
{{PREFETCH}}
    // The queries: all QN loads of an invocation first, then the stores.
    var qv: array<f32, QN>;
    for (var it = 0u; it < QN; it++) {
        let e = t + 128u * it;
        let x = e / (DP4 * 4u); let c = e % (DP4 * 4u);
        let gr = rc * R + x;
        qv[it] = 0.0;
        if (x < R && gr < group * tq && (EXACT_D || c < d)) {
            let h = hk * group + gr / tq;
            qv[it] = ld0(p.q_off + b * p.q_sb + h * p.q_sh + (gr % tq) * p.q_st + c * p.q_se) * scale;
        }
    }
    for (var it = 0u; it < QN; it++) {
        let e = t + 128u * it;
        if (e < R * DP4 * 4u) { sm[QB + e / 4u][e % 4u] = qv[it]; }
    }
    workgroupBarrier();
{{DECLARE}}
    var buf = 0u;
    for (var j0 = kbeg; j0 < kend{{ABLATE_LOOP}}; j0 += 16u * U) {
{{LOAD}}
{{PARTIAL_DOTS}}
{{LOOP_BARRIER}}
{{UPDATE}}
        buf = 1u - buf;
    }
    // Merge the 16 slots: every invocation rescales its sums to the rows' common max, then the
    // value sums are added up through workgroup memory, RR rows at a time.
    workgroupBarrier();
    if (cg == 0u) {
{{WRITE_ML}}
    }
    workgroupBarrier();
    var mx: array<f32, R>;
    var lsum: array<f32, R>;
    var bad: array<bool, R>;
{{MERGE_ML}}
{{ROUNDS}}
{{TAIL}}
}
