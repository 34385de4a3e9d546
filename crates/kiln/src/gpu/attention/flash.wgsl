// Scaled dot-product attention, flash-attention style (prefill). One workgroup of 128 invocations
// per (batch, query head, block of 64 queries, chunk of up to 128 value columns, split of the keys).
// It walks its keys in tiles of 32: the scores of the 64x32 tile are computed from query and key
// chunks of DC head columns staged in workgroup memory (the queries stay resident when DC == DP),
// masked, turned into probabilities with a running max and sum per query (online softmax) and
// multiplied into the 64 x DVC output block held in registers. Scores never leave the workgroup;
// causal tiles past a block's last visible key are never visited, nor tiles before a sliding window's
// first key of the block's first row. Scores are soft-capped (p.softcap) before they are masked.
//
// Invocation t owns rows rg + 16i (rg = t / 8, i < 4) of the block, keys kg + 8j (kg = t % 8, j < 4)
// of each tile and value columns 4(kg + 8n) .. +4 (n < NV) of its chunk: 4x4 scores and 4 x 4NV
// outputs, with every workgroup-memory read a vec4 that the 8 lanes of a row group share.
//
// q (b, hq, tq, d), k (b, hkv, tk, d), v (b, hkv, tk, dv): any strides. Output (b, hq, tq, dv)
// contiguous through store4 (final), or per split: (max, sum) pairs then unnormalised rows (partial,
// merged by combine.wgsl).
// Params: `AttnParams` (mod.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: {{Q_ARRAY}};
@group(0) @binding(2) var<storage, read> in1: {{K_ARRAY}};
@group(0) @binding(3) var<storage, read> in2: {{V_ARRAY}};
{{PARAMS}}
{{PRELUDE}}
{{LOADERS}}
{{STORE}}

const DC: u32 = {{DC}}u;
const NCH: u32 = {{NCH}}u;
const QRES: bool = {{QRES}};
const EXACT_D: bool = {{EXACT_D}};
const DVC: u32 = {{DVC}}u;
// vec4 strides of a staged q/k row, v row and probability row, and the region starts.
const CS: u32 = {{CS}}u;
const VS: u32 = {{VS}}u;
const PS: u32 = 9u;
const QB: u32 = {{QB}}u;
const KB: u32 = {{KB}}u;
const VB: u32 = {{VB}}u;
const PB: u32 = {{PB}}u;
const RB: u32 = {{RB}}u;
var<workgroup> sm: array<vec4<f32>, {{TOTAL}}>;

fn nan4(v: vec4<f32>) -> bool {
    return any((bitcast<vec4<u32>>(v) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u));
}

fn max4(v: vec4<f32>) -> f32 { return max(max(v.x, v.y), max(v.z, v.w)); }

{{ROWS}}
@compute @workgroup_size(128)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {
    let g = wid.x + wid.y * nw.x;
    if (g >= p.groups) { return; }
    let hq = p.hq; let hkv = p.hkv; let tq = p.tq; let tk = p.tk; let d = p.d; let dv = p.dv;
    let scale = p.scale; let causal = p.causal == 1u;
    let nqb = p.blocks; let ndv = p.vchunks; let nsplit = p.splits; let partial = p.partial == 1u;
    // The query block varies slowest, last blocks (the most keys under causal masking) first.
    let inner = p.b * hq * nsplit * ndv;
    let qb = nqb - 1u - g / inner;
    var r = g % inner;
    let dvc = r % ndv; r /= ndv;
    let s = r % nsplit; let bh = r / nsplit;
    let h = bh % hq; let b = bh / hq; let hk = h / (hq / hkv);
    let q0 = qb * 64u;
    let kbeg = s * p.per_split;
    let kstop = min(kbeg + p.per_split, tk);
    let kend = min(kstop, visible(min(q0 + 63u, tq - 1u), tq, tk, causal));
    // With a sliding window, no row of the block sees a key before its first row's first key.
    let kfrom = max(kbeg, first_key(q0, tq, tk, p.window));
    if (kfrom >= kend) {
        // No row of the block sees a key of this split. A split's partial rows are then never read
        // (the combine reads only the splits holding a key the row sees); final rows see no key at all
        // and are zeros, written here like every other output element.
        if (!partial) {
            for (var e = t; e < 16u * DVC; e += 128u) {
                let row = q0 + e / (DVC / 4u); let c = dvc * DVC + 4u * (e % (DVC / 4u));
                if (row < tq && c < dv) { store4((bh * tq + row) * dv + c, vec4<f32>(0.0), min(4u, dv - c)); }
            }
        }
        return;
    }
    // Tiles from j0 on need masking: some key is past the first row's limit or the split's end; and
    // tiles before the last row's first key (a sliding window).
    let lim_first = min(visible(q0, tq, tk, causal), kstop);
    let lo_last = first_key(min(q0 + 63u, tq - 1u), tq, tk, p.window);

    let qbase = p.q_off + b * p.q_sb + h * p.q_sh; let qst = p.q_st; let qse = p.q_se;
    let kbase = p.k_off + b * p.k_sb + hk * p.k_sh; let kst = p.k_st; let kse = p.k_se;
    let vbase = p.v_off + b * p.v_sb + hk * p.v_sh; let vst = p.v_st; let vse = p.v_se;
    let col0 = dvc * DVC;
    let rg = t / 8u; let kg = t % 8u;
{{DECLARE}}
    if (QRES) {
        for (var e = t; e < 16u * DC; e += 128u) {
            let row = e / (DC / 4u); let c4 = e % (DC / 4u);
            var x = vec4<f32>(0.0);
            if (q0 + row < tq && (EXACT_D || 4u * c4 < d)) { x = ldq4(qbase + (q0 + row) * qst, 4u * c4, qse, d) * scale; }
            sm[QB + row * CS + c4] = x;
        }
    }
    for (var j0 = kfrom; j0 < kend; j0 += 32u) {
        var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
        for (var ch = 0u; ch < NCH; ch++) {
            workgroupBarrier();
            let cb = ch * DC;
            if (!QRES) {
                for (var e = t; e < 16u * DC; e += 128u) {
                    let row = e / (DC / 4u); let c4 = e % (DC / 4u); let c = cb + 4u * c4;
                    var x = vec4<f32>(0.0);
                    if (q0 + row < tq && (EXACT_D || c < d)) { x = ldq4(qbase + (q0 + row) * qst, c, qse, d) * scale; }
                    sm[QB + row * CS + c4] = x;
                }
            }
            for (var e = t; e < 8u * DC; e += 128u) {
                let key = e / (DC / 4u); let c4 = e % (DC / 4u); let c = cb + 4u * c4;
                var x = vec4<f32>(0.0);
                if (j0 + key < kstop && (EXACT_D || c < d)) { x = ldk4(kbase + (j0 + key) * kst, c, kse, d); }
                sm[KB + key * CS + c4] = x;
            }
            workgroupBarrier();
            for (var c4 = 0u; c4 < DC / 4u; c4++) {
{{S_BODY}}
            }
        }
        // This tile's values, loaded now so the loads overlap the softmax; stored after the barrier.
{{V_LOAD}}
        let masked = j0 + 32u > lim_first || j0 < lo_last;
{{SOFTMAX_A}}
        workgroupBarrier();
{{SOFTMAX_B}}
{{V_STORE}}
        workgroupBarrier();
        if (masked) {
            // A probability of exactly 0 is a masked key: skip it so a NaN value there stays out.
            for (var j4 = 0u; j4 < 8u; j4++) {
{{O_BODY_MASKED}}
            }
        } else {
            for (var j4 = 0u; j4 < 8u; j4++) {
{{O_BODY}}
            }
        }
    }
    // Each invocation summed the probabilities of its own keys: add up the 8 of each row.
{{SUM_L}}
    workgroupBarrier();
{{OUTPUT}}
}
