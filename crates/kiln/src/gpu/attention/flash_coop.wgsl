// Scaled dot-product attention on cooperative matrices (tensor cores, Apple simdgroup matrices), for
// prefill with f16 or bf16 q/k/v. One workgroup of {{NSG}} subgroups per (batch, query head, block of
// {{BQ}} queries); subgroup `sg` owns {{S}} query rows. Two passes over the visible keys in tiles of
// {{BK}}: the first finds each row's softmax maximum and sum from the scores S = q k^T (computed
// with cooperative products from workgroup memory, stored to `ss` and read by the lanes that own
// the row), the second recomputes the scores, turns them into probabilities P = exp(s - max) / sum
// (f16, `sp`) and accumulates P v in cooperative accumulators that stay in registers across the
// whole pass (no rescaling, so no accumulator ever leaves them before the end).
// bf16 inputs are staged as f16 scaled by a power of two per query row, key row and value column
// (line maxima in `mx`, see pointwise/line_maxima.rs), undone on the scores and on the output.
// Non-finite values: a NaN or +Inf score a row can see makes the row NaN (as the reference's
// softmax); values that are not finite are staged as 0 and accounted per (row, column) by the lanes
// from memory, so masked keys never reach a row, as in the plain flash kernel.
// q (b, hq, tq, d), k (b, hkv, tk, d), v (b, hkv, tk, dv): any strides; output (b, hq, tq, dv)
// contiguous.
// Params: `CoopAttnParams` (flash_coop.rs).
enable f16;
{{ENABLE}}

@group(0) @binding(0) var<storage, read_write> dst: {{DST}};
@group(0) @binding(1) var<storage, read> qx: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> kx: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read> vx: array<vec2<u32>>;
{{MX_BINDING}}
{{PARAMS}}

const S: u32 = {{S}}u;
const SG: u32 = {{SG}}u;
const WG: u32 = {{WG}}u;
const BQ: u32 = {{BQ}}u;
const BK: u32 = {{BK}}u;
const D: u32 = {{D}}u;
const DV: u32 = {{DV}}u;
// Row strides of the staged tiles, in halves (f32 for `ss`).
const LQ: u32 = {{LQ}}u;
const LV: u32 = {{LV}}u;
const LP: u32 = {{LP}}u;
const LS: u32 = {{LS}}u;
// Lanes per query row and the score columns each of them takes.
const LPR: u32 = SG / S;
const CPL: u32 = BK / LPR;
// Output columns per lane in one S-wide accumulator.
const OPL: u32 = S / LPR;

var<workgroup> sq: array<{{SE}}, {{SQ_N}}>;
var<workgroup> sk: array<{{SE}}, {{SK_N}}>;
var<workgroup> sv: array<{{SE}}, {{SV_N}}>;
var<workgroup> sp: array<{{SE}}, {{SP_N}}>;
var<workgroup> ss: array<f32, {{SS_N}}>;
// Whether the value tile of an even / odd step holds a value that is not finite (words 0 and 1).
// Four words, not two: every workgroup variable of a cooperative kernel is a multiple of 16 bytes
// long. The driver orders workgroup variables as it likes, and NVIDIA's cooperative loads from rows
// whose stride is a multiple of 16 bytes assume a 16-byte aligned start: an 8-byte variable placed
// first shifted every staged tile by 8 bytes (4 halves) on the H100 (docs/RELIABILITY.md).
var<workgroup> vbad: array<atomic<u32>, 4>;

{{PRELUDE}}
{{EXTRA}}

// One element of q/k/v (16-bit, two per word) at element index e.
fn word_of(x: vec2<u32>, e: u32) -> u32 {
    return select(x.x, x.y, (e & 2u) != 0u);
}
{{LOADERS}}

// Stores 4 halves at half index i (a multiple of 4) of a staged tile.
{{PUTS}}

// Keys query i may see: all, or j <= i + tk - tq with causal masking.
fn visible(i: u32, tq: u32, tk: u32, causal: bool) -> u32 {
    if (!causal) { return tk; }
    return u32(clamp(i32(i) + 1 + i32(tk) - i32(tq), 0, i32(tk)));
}

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
    let scale = p.scale; let causal = p.causal == 1u;
    // The query block varies slowest, last blocks (the most keys under causal masking) first.
    let bh_n = p.b * hq;
    let qb = p.blocks - 1u - g / bh_n;
    let bh = g % bh_n;
    let h = bh % hq; let b = bh / hq; let hk = h / (hq / hkv);
    let q0 = qb * BQ;
    let kend = visible(min(q0 + BQ - 1u, tq - 1u), tq, tk, causal);
    let steps = (kend + BK - 1u) / BK;
    let qbase = p.q_off + b * p.q_sb + h * p.q_sh; let qst = p.q_st; let qse = p.q_se;
    let kbase = p.k_off + b * p.k_sb + hk * p.k_sh; let kst = p.k_st; let kse = p.k_se;
    let vbase = p.v_off + b * p.v_sb + hk * p.v_sh; let vst = p.v_st; let vse = p.v_se;
    let xq = p.xq + bh * tq;
    let xk = p.xk + (b * hkv + hk) * tk;
    let xv = p.xv + (b * hkv + hk) * dv;

    for (var i = li; i < {{SS_N}}u; i += WG) {
        ss[i] = 0.0;
    }
    if (li == 0u) {
        atomicStore(&vbad[0], 0u);
        atomicStore(&vbad[1], 0u);
    }
    for (var e = li; e < BQ * D / 4u; e += WG) {
        let row = e / (D / 4u);
        let c = 4u * (e % (D / 4u));
        var x = vec4<f32>(0.0);
        if (q0 + row < tq && c < d) {
            x = ld4_q(qbase + (q0 + row) * qst + c * qse, qse, d - c);
            {{SCALE_Q}}
        }
        put_q(row * LQ + c, vec4<f16>(x));
    }
    workgroupBarrier();
    let zero = {{ZERO}};
    let r = lane / LPR;
    let part = lane % LPR;
    let i = q0 + sg * S + r;
    var ivis = 0u;
    if (i < tq) {
        ivis = visible(i, tq, tk, causal);
    }
    let slot = sg * S * LS;
    let eq = {{EQ}};

{{S_DECL}}
    // Pass 1: the maximum and sum of each row's probabilities (this lane's columns).
    var m = -inf_f32();
    var l = 0.0;
    var bad = false;
    var nv = 0u;
    for (var t = 0u; t < steps; t++) {
        let j0 = t * BK;
        workgroupBarrier();
{{STAGE_K}}
        workgroupBarrier();
{{SCORES}}
        workgroupBarrier();
        for (var c = 0u; c < CPL; c++) {
            let col = part * CPL + c;
            let key = j0 + col;
            if (key < ivis) {
                let s = {{SCORE}};
                nv += 1u;
                if (is_nan(s) || s == inf_f32()) {
                    bad = true;
                } else if (s != -inf_f32()) {
                    if (s > m) {
                        l = l * exp(m - s);
                        m = s;
                    }
                    l += exp(s - m);
                }
            }
        }
    }
    // The lanes of a row merge their maxima and sums through `ss`.
    workgroupBarrier();
    ss[slot + lane * 4u] = m;
    ss[slot + lane * 4u + 1u] = l;
    ss[slot + lane * 4u + 2u] = select(0.0, 1.0, bad);
    ss[slot + lane * 4u + 3u] = f32(nv);
    workgroupBarrier();
    var mr = -inf_f32();
    for (var x = 0u; x < LPR; x++) {
        mr = max(mr, ss[slot + (r * LPR + x) * 4u]);
    }
    var lr = 0.0;
    var nvr = 0.0;
    for (var x = 0u; x < LPR; x++) {
        let o = slot + (r * LPR + x) * 4u;
        if (ss[o] != -inf_f32()) {
            lr += ss[o + 1u] * exp(ss[o] - mr);
        }
        bad = bad || ss[o + 2u] != 0.0;
        nvr += ss[o + 3u];
    }
    // Every visible score -Inf: the reference's softmax is 0/0.
    bad = bad || (nvr > 0.0 && lr == 0.0);
    let inv_l = select(0.0, 1.0 / lr, lr > 0.0);

    // Pass 2: P v into accumulators that stay in registers.
{{O_DECL}}
    var nanb = array<u32, {{PW}}>();
    var pinf = array<u32, {{PW}}>();
    var ninf = array<u32, {{PW}}>();
    for (var t = 0u; t < steps; t++) {
        let j0 = t * BK;
        workgroupBarrier();
        if (li == 0u) {
            atomicStore(&vbad[(t + 1u) & 1u], 0u);
        }
{{STAGE_K}}
{{STAGE_V}}
        workgroupBarrier();
{{SCORES}}
        workgroupBarrier();
        for (var c4 = 0u; c4 < CPL; c4 += 4u) {
            var pv = vec4<f32>(0.0);
            for (var c = 0u; c < 4u; c++) {
                let col = part * CPL + c4 + c;
                let key = j0 + col;
                if (key < ivis && !bad) {
                    let s = {{SCORE}};
                    if (s != -inf_f32()) {
                        pv[c] = exp(s - mr) * inv_l;
                    }
                }
            }
            put_p(sg * S * LP + r * LP + part * CPL + c4, vec4<f16>(pv));
        }
        workgroupBarrier();
{{PV}}
        if (atomicLoad(&vbad[t & 1u]) != 0u) {
            // Values that are not finite, for the keys this row sees, kept per output column.
            for (var col = 0u; col < BK; col++) {
                let key = j0 + col;
                if (key < ivis) {
                    let pk = {{P_AT}};
                    for (var w = 0u; w < DV / S; w++) {
                        for (var cc = 0u; cc < OPL; cc++) {
                            let oc = w * S + part * OPL + cc;
                            if (oc < dv) {
                                let x = ld1_v(vbase + key * vst + oc * vse);
                                if (!is_finite(x)) {
                                    let bit = 1u << ((w * OPL + cc) & 31u);
                                    let wd = (w * OPL + cc) >> 5u;
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
        }
    }
    let orow = (bh * tq + i) * dv;
{{EPILOGUE}}
}
