// Decode attention in the FlashDecoding style (the `lanes` variant; decode.wgsl is the `slots` one).
// One workgroup per (batch, key/value head, chunk of R query rows, split of the keys), R rows being
// the query heads that share the key/value head times the queries, so each key and value is read
// once for all of them. The workgroup is NSEG segments of W lanes, each segment inside one subgroup
// (W divides the subgroup size); segment g takes the blocks of W keys g, g + NSEG, ... of the split.
//
// Per block, with no barrier and no cross-lane sum per key:
// 1. scores: lane j owns key j0 + j; it reads the key's whole row in 16-byte loads (8 f16/bf16 or 4
//    f32 values) and takes its dot products with the R pre-scaled queries, held in workgroup memory
//    and read as broadcasts;
// 2. softmax: one butterfly max over the segment per 4 rows and block (lazy rescale: the running
//    max moves once per W keys); each lane keeps its own part of the running sum, summed at the end;
// 3. P.V: lane c owns value columns 4c + 4Wq (q < NQ); the block's W value rows are read coalesced
//    (each row once, by all lanes), and key i's probabilities are broadcast with subgroupShuffle.
// The block's key and value loads are all issued before the arithmetic. At the end the segments'
// (max, sum, value sums) are merged through workgroup memory and the rows written as decode.wgsl
// writes them: final rows, partial rows for combine.wgsl, or (FOLD) partial rows that the last
// split workgroup of the row chunk merges (decode_fold.wgsl).
//
// Params: `AttnParams` (mod.rs); p.blocks counts row chunks per head.
{{BINDINGS}}
{{PARAMS}}
{{PRELUDE}}
{{LOADERS}}
{{STORE}}

const R: u32 = {{R}}u;
const W: u32 = {{W}}u;
const NSEG: u32 = {{NSEG}}u;
const WG: u32 = {{WG}}u;
const DP4: u32 = {{DP4}}u;
const DV4: u32 = {{DV4}}u;
const NP: u32 = {{NP}}u;
// Regions (vec4): the queries while walking the keys; then each segment's (max, sum, NaN flag) per
// pack of 4 rows, and its scaled value sums.
const QB: u32 = 0u;
const MB: u32 = 0u;
const SB: u32 = 3u * NSEG * NP;
var<workgroup> sm: array<vec4<f32>, {{TOTAL}}>;
{{FOLD_DECLS}}

{{ROWS}}

fn nan4v(x: vec4<f32>) -> vec4<bool> { return (bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u); }

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>, @builtin(subgroup_invocation_id) sgi: u32) {
    let g = wid.x + wid.y * nw.x;
    if (g >= p.groups) { return; }
    let hq = p.hq; let hkv = p.hkv; let tq = p.tq; let tk = p.tk; let dv = p.dv;
    let scale = p.scale; let causal = p.causal == 1u;
    let nrc = p.blocks; let nsplit = p.splits;
    let rc = g % nrc;
    var r = g / nrc;
    let s = r % nsplit; r /= nsplit;
    let hk = r % hkv; let b = r / hkv;
    let group = hq / hkv;
    let kbeg = s * p.per_split;
    let kstop = min(kbeg + p.per_split, tk);
    // Row x of this chunk is query i of head hk * group + x / tq; rows past the group see no key.
    var lim: array<u32, {{NR}}>;
    var kend = 0u;
    var kvis = 0u;
    for (var x = 0u; x < {{NR}}u; x++) {
        let gr = rc * R + x;
        lim[x] = 0u;
        if (x < R && gr < group * tq) {
            let vis = visible(gr % tq, tq, tk, causal);
            lim[x] = min(vis, kstop);
            kvis = max(kvis, vis);
        }
        kend = max(kend, lim[x]);
    }
    let nvis = min(nsplit, (kvis + p.per_split - 1u) / p.per_split);
{{PARTIAL}}
    if (kbeg >= kend) {
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
    let kbase = p.k_off + b * p.k_sb + hk * p.k_sh; let kst = p.k_st;
    let vbase = p.v_off + b * p.v_sb + hk * p.v_sh; let vst = p.v_st;
    for (var e = t; e < R * DP4 * 4u; e += WG) {
        let x = e / (DP4 * 4u); let c = e % (DP4 * 4u);
        let gr = rc * R + x;
        var qv = 0.0;
        if (gr < group * tq) {
            let h = hk * group + gr / tq;
            qv = ld0(p.q_off + b * p.q_sb + h * p.q_sh + (gr % tq) * p.q_st + c * p.q_se) * scale;
        }
        sm[QB + e / 4u][e % 4u] = qv;
    }
    workgroupBarrier();
    let seg = t / W; let lane = sgi % W; let sbase = sgi - lane;
{{LIMITS}}
{{DECLARE}}
    // The same number of iterations in every segment (blocks past the split's end are all masked),
    // so the shuffles stay in uniform control flow.
    let iters = ((kend - kbeg + W - 1u) / W + NSEG - 1u) / NSEG;
    for (var it = 0u; it < iters; it++) {
        let j0 = kbeg + (it * NSEG + seg) * W;
        let key = j0 + lane;
{{LOADS}}
{{SCORES}}
{{SOFTMAX}}
{{PV}}
    }
{{SEG_SUMS}}
    workgroupBarrier();
    var mx: array<f32, R>;
    var lsum: array<f32, R>;
    var bad: array<bool, R>;
{{MERGE}}
    workgroupBarrier();
    for (var e = t; e < R * DV4; e += WG) {
        let x = e / DV4; let c4 = e % DV4;
        let gr = rc * R + x;
        let c = 4u * c4;
        if (gr < group * tq && c < dv) {
            var o = vec4<f32>(0.0);
            for (var k = 0u; k < NSEG; k++) { o += sm[SB + (k * R + x) * DV4 + c4]; }
            let h = hk * group + gr / tq; let i = gr % tq;
            let grow = (b * hq + h) * tq + i;
            let n = min(4u, dv - c);
            if (partial) {
{{PUT}}
            } else {
                store4(grow * dv + c, finish(o, lsum[x], bad[x], visible(i, tq, tk, causal)), n);
            }
        }
    }
{{TAIL}}
}
