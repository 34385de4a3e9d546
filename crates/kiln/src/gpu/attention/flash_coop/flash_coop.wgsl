// Scaled dot-product attention on cooperative matrices (tensor cores, Apple simdgroup matrices), for
// prefill with f16 or bf16 q/k/v: one pass over the keys (FlashAttention-2's loop order), no T x T
// matrix anywhere.
// One workgroup of {{NSG}} subgroups per (batch, query head, block of {{BQ}} queries). Subgroup `sg`
// owns {{R}} query rows ({{MT}} fragments of {{S}} rows; every key and value fragment it loads feeds
// {{MT}} products), {{LPR}} lanes per row, each taking a contiguous part of the row's keys and
// output columns (the lanes of a row are adjacent and agree on its maximum through a shuffle).
// Per tile of {{BK}} keys:
// 1. the workgroup stages the key and value tiles (`sk`, `sv`);
// 2. each subgroup computes its scores S = q k^T with cooperative products (queries from `sq`) and
//    stores them to its rows of `ss`;
// 3. the lanes of a row read it, take the tile's maximum and turn the scores into probabilities
//    P = 2^(s - m) in f16, written over the key tile (`sk`, which no subgroup reads any more);
// 4. O += P v in cooperative accumulators that stay in registers.
// The reference maximum `m` is lazy (FlashAttention-3): it moves only when a score passes it by more
// than 2^TH, so P stays below 2^TH (f16 holds it) and the accumulators are rescaled (through `ss`)
// only on those rare tiles, when some row of the workgroup needs it. The causal loop stops at the
// last key the block's last row sees, and starts at the tile of its first row's first key (a sliding
// window). Scores are soft-capped (p.softcap, in log2 units here) before they are masked. The
// cooperative ops stay in workgroup-uniform control flow (naga requires it).
// bf16 inputs are staged as f16 scaled by a power of two per query row, key row and value column
// (line maxima in `mx`, see pointwise/line_maxima.rs), undone on the scores and on the output.
// Non-finite values: a NaN or +Inf score a row can see makes the row NaN (as the reference's
// softmax); values that are not finite are staged as 0 and accounted per (row, column) by the lanes
// from memory, so masked keys never reach a row, as in the plain flash kernel.
// q (b, hq, tq, d), k (b, hkv, tk, d), v (b, hkv, tk, dv): any strides; output (b, hq, tq, dv)
// contiguous.
// Params: `CoopAttnParams` (flash_coop/mod.rs).
enable f16;
{{ENABLE}}

@group(0) @binding(0) var<storage, read_write> dst: {{DST}};
// f16: 4 halves per element; bf16: 4 values in two words.
@group(0) @binding(1) var<storage, read> qx: array<{{BUF}}>;
@group(0) @binding(2) var<storage, read> kx: array<{{BUF}}>;
@group(0) @binding(3) var<storage, read> vx: array<{{BUF}}>;
{{MX_BINDING}}
{{PARAMS}}

const S: u32 = {{S}}u;
const SG: u32 = {{SG}}u;
const WG: u32 = {{WG}}u;
const R: u32 = {{R}}u;
const BQ: u32 = {{BQ}}u;
const BK: u32 = {{BK}}u;
const D: u32 = {{D}}u;
const DV: u32 = {{DV}}u;
// Row strides of the staged tiles, in halves (f32 for `ss`).
const LQ: u32 = {{LQ}}u;
const LV: u32 = {{LV}}u;
const LP: u32 = {{LP}}u;
const LS: u32 = {{LS}}u;
// How far (log2) a score may pass the reference maximum before the row is rescaled.
const TH: f32 = 8.0;
// Lanes per query row, and the keys of a tile each of them takes.
const LPR: u32 = {{LPR}}u;
const KPL: u32 = BK / LPR;

// Every workgroup variable is a multiple of 16 bytes long: the driver orders them as it likes, and
// NVIDIA's cooperative loads from rows whose stride is a multiple of 16 bytes assume a 16-byte
// aligned start (docs/RELIABILITY.md, N6).
var<workgroup> sq: array<{{SE}}, {{SQ_N}}>;
var<workgroup> sk: array<{{SE}}, {{SK_N}}>;
var<workgroup> sv: array<{{SE}}, {{SV_N}}>;
var<workgroup> ss: array<{{SSE}}, {{SS_N}}>;
// Whether the value tile of an even / odd step holds a value that is not finite (words 0 and 1).
var<workgroup> vbad: array<atomic<u32>, 4>;
// Whether some row of the workgroup moved its reference maximum in an even / odd step.
var<workgroup> resc: array<u32, 4>;
{{SX_DECL}}

{{PRELUDE}}
{{EXTRA}}

{{LOADERS}}

// Stores 4 halves at half index i (a multiple of 4) of a staged tile; `ss` by f32 index.
{{PUTS}}

{{MASK}}
fn is_finite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u;
}

{{EMU}}
@compute @workgroup_size({{WG}})
fn main(
    @builtin(local_invocation_index) li: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nw: vec3<u32>,
    {{SG_PARAM}}
) {
    {{SG_LET}}
    let g = wid.x + wid.y * nw.x;
    if (g >= p.groups) {
        return;
    }
    let hq = p.hq; let hkv = p.hkv; let tq = p.tq; let tk = p.tk; let d = p.d; let dv = p.dv;
    let causal = p.causal == 1u;
    // Scores in log2 units: P = 2^(s c - m).
    let cs = p.scale * 1.4426950408889634;
    // The query block varies slowest, last blocks (the most keys under causal masking) first.
    let bh_n = p.b * hq;
    let qb = p.blocks - 1u - g / bh_n;
    let bh = g % bh_n;
    let h = bh % hq; let b = bh / hq; let hk = h / (hq / hkv);
    let q0 = qb * BQ;
    let kend = visible(min(q0 + BQ - 1u, tq - 1u), tq, tk, causal);
    let steps = (kend + BK - 1u) / BK;
    // No row of the block sees a key before the tile of its first row's first key.
    let first = min(first_key(q0, tq, tk, p.window) / BK, steps);
    let capc = p.softcap * 1.4426950408889634;
    let icapc = p.softcap_inv * 0.6931471805599453;
    let qbase = p.q_off + b * p.q_sb + h * p.q_sh; let qst = p.q_st; let qse = p.q_se;
    let kbase = p.k_off + b * p.k_sb + hk * p.k_sh; let kst = p.k_st; let kse = p.k_se;
    let vbase = p.v_off + b * p.v_sb + hk * p.v_sh; let vst = p.v_st; let vse = p.v_se;
    let xq = p.xq + bh * tq;
    let xk = p.xk + (b * hkv + hk) * tk;
    let xv = p.xv + (b * hkv + hk) * dv;

    for (var e = li; e < {{SS_N}}u; e += WG) {
        ss[e] = {{SSE}}();
    }
    if (li == 0u) {
        atomicStore(&vbad[0], 0u);
        atomicStore(&vbad[1], 0u);
        resc[0] = 0u;
        resc[1] = 0u;
    }
{{STAGE_Q}}
    workgroupBarrier();
    let zero = {{ZERO}};
    // This lane's query row, its part of the row, and the keys the row sees.
    let row = lane / LPR;
    let part = lane % LPR;
    let i = q0 + sg * R + row;
    var ivis = 0u;
    var ilo = 0u;
    if (i < tq) {
        ivis = visible(i, tq, tk, causal);
        ilo = first_key(i, tq, tk, p.window);
    }
    let slot = sg * R * LS;
    let srow = slot + row * LS;
    let prow = sg * R * LP + row * LP;
    let k0 = part * KPL;
    let eq = {{EQ}};

{{S_DECL}}
{{O_DECL}}
    var m = -inf_f32();
    var l = 0.0;
    var bad = false;
    var nanb = array<u32, {{PW}}>();
    var pinf = array<u32, {{PW}}>();
    var ninf = array<u32, {{PW}}>();
    // The key and value tiles are read into registers one tile ahead: tile t + 1's reads are in
    // flight while tile t is multiplied.
{{FETCH_DECL}}
    {
        let jn = first * BK;
{{FETCH}}
    }
    for (var t = first; t < steps; t++) {
        let j0 = t * BK;
        workgroupBarrier();
        if (li == 0u) {
            atomicStore(&vbad[(t + 1u) & 1u], 0u);
            resc[(t + 1u) & 1u] = 0u;
        }
{{PUT_KV}}
        workgroupBarrier();
        if (t + 1u < steps) {
            let jn = j0 + BK;
{{FETCH}}
        }
{{SCORES}}
        workgroupBarrier();
        // This lane's scores of the tile, read once; their maximum (a NaN or +Inf score marks the
        // row).
        var mt = -inf_f32();
{{READ_S}}
{{PASS_MAX}}
{{ROW_MAX}}
        var alpha = 1.0;
        if (mt > m + TH) {
            if (m != -inf_f32()) {
                alpha = exp2(m - mt);
                resc[t & 1u] = 1u;
            }
            m = mt;
        }
        l *= alpha;
        // The probabilities, over the key tile.
{{PASS_P}}
        // A barrier: P is complete, and whether any row moved its maximum is known to all.
        if (workgroupUniformLoad(&resc[t & 1u]) != 0u) {
{{RESCALE}}
        }
{{PV}}
        if (atomicLoad(&vbad[t & 1u]) != 0u) {
            // Values that are not finite, for the keys this row sees, kept per output column.
            for (var col = 0u; col < BK; col++) {
                let key = j0 + col;
                if (key >= ilo && key < ivis) {
                    let pk = {{P_AT}};
                    for (var oc = 0u; oc < dv; oc++) {
                        let x = ld1_v(vbase + key * vst + oc * vse);
                        if (!is_finite(x)) {
                            let bit = 1u << (oc & 31u);
                            let wd = oc >> 5u;
                            if (is_nan(x) || pk == 0.0) {
                                nanb[wd] |= bit;
                            } else if (x > 0.0) {
                                pinf[wd] |= bit;
                            } else {
                                ninf[wd] |= bit;
                            }
                        }
                    }
                }
            }
        }
    }
{{ROW_SUM}}
    // Every visible score -Inf: the reference's softmax is 0/0.
    bad = bad || (ivis > 0u && l == 0.0);
    let inv_l = select(0.0, 1.0 / l, l > 0.0);
    let orow = (bh * tq + i) * dv;
{{EPILOGUE}}
}
