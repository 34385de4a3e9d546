// Decode attention, the `short` variant: one query row (tq = 1) over a short context (up to KMAX
// keys), one workgroup of WG invocations per (batch, query head), no key split, so no partial rows,
// no fold and no combine. Where `tile` walks chunks of keys with an online softmax and merges lane
// groups and splits, this one takes the three phases of attention one after the other, each over
// every key at once:
//   1. scores: an invocation owns keys t, t + WG, ..: it reads the whole f16/bf16 key row in DW
//      16-byte words (its first key's words requested before the query is loaded), dots it with the
//      pre-scaled query in workgroup memory, caps it (mask.wgsl) and keeps it in `sc`;
//   2. the row's max (subgroupMax, then across subgroups), weights exp(s - max) in `sc` and their sum;
//   3. values: an invocation owns word w = t % DW of the value rows (8 columns) for the keys kr,
//      kr + NR, .. (kr = t / DW, NR ranges), U rows requested at once (the first U before phase 2),
//      so a subgroup reads whole consecutive rows; the NR ranges' sums meet in workgroup memory.
//      With TOUCH, one 4-byte word of each of those first U words is requested at the very start,
//      beside the first key row, so that the value rows are on their way from memory (into the
//      caches) while the scores and the softmax run: a word a row costs one register, where the
//      whole words (U of 16 bytes) would take the kernel past its registers.
// The row's output is written once (finish, rows.wgsl: NaN when a score is NaN). A key whose weight
// underflowed to 0 still adds 0 * v (a NaN value poisons the row, as on the CPU); the keys past tk
// that fill a range's last batch add nothing.
//
// Params: `AttnParams` (mod.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<u32>;
@group(0) @binding(2) var<storage, read> in1: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> in2: array<vec4<u32>>;
{{PARAMS}}
{{PRELUDE}}
{{LOADERS}}
{{STORE}}
{{ROWS}}

const WG: u32 = {{WG}}u;
const DW: u32 = {{DW}}u;
const NR: u32 = {{NR}}u;
const U: u32 = {{U}}u;
const KMAX: u32 = {{KMAX}}u;
// Subgroup partials: the max, the NaN flag and the weights' sum of each subgroup (4 lanes or more).
const NSG: u32 = WG / 4u;
var<workgroup> qs: array<vec4<f32>, {{DV4}}>;
var<workgroup> sc: array<f32, KMAX>;
var<workgroup> part: array<f32, {{PARTS}}>;
var<workgroup> sums: array<vec4<f32>, {{SUMS}}>;

{{CVT}}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>, @builtin(subgroup_invocation_id) sgi: u32,
        @builtin(subgroup_size) sgs: u32) {
    let g = wid.x + wid.y * nw.x;
    if (g >= p.groups) { return; }
    let tk = p.tk; let d = p.d; let dv = p.dv;
    let h = g % p.hq; let b = g / p.hq;
    let hk = h / (p.hq / p.hkv);
    let kw0 = (p.k_off + b * p.k_sb + hk * p.k_sh) / 8u; let kst = p.k_st / 8u;
    let vw0 = (p.v_off + b * p.v_sb + hk * p.v_sh) / 8u; let vst = p.v_st / 8u;
    // This invocation's first key row, requested before the query (tk >= 1).
    var kr0 = kw0 + min(t, tk - 1u) * kst;
{{KFIRST}}
    // Phase 3's place: word w of the value rows kr, kr + NR, ..
    let w = t % DW; let kr = t / DW;
    let vb = vw0 + w;
{{VTOUCH}}
    for (var e = t; e < d; e += WG) {
        qs[e / 4u][e % 4u] = ld0(p.q_off + b * p.q_sb + h * p.q_sh + e * p.q_se) * p.scale;
    }
    workgroupBarrier();
    // 1. Scores.
    var mloc = -inf_f32(); var badl = false;
    for (var j = t; j < tk; j += WG) {
        if (j != t) {
            kr0 = kw0 + j * kst;
{{KNEXT}}
        }
        var s = 0.0;
{{DOT}}
        s = soft_cap1(s, p.softcap, p.softcap_inv);
        sc[j] = s;
        badl = badl || is_nan(s);
        mloc = max(mloc, select(-inf_f32(), s, s > -inf_f32()));
    }
    // The first batch of value rows, requested before the max.
{{VFIRST}}
    // 2. The max and NaN flag across subgroups, then the weights and their sum.
    let sgm = subgroupMax(mloc); let sgb = subgroupMax(select(0.0, 1.0, badl));
    if (sgi == 0u) { part[t / sgs] = sgm; part[NSG + t / sgs] = sgb; }
    workgroupBarrier();
    let nsg = WG / sgs;
    var mx = -inf_f32(); var bad = false;
    for (var i = 0u; i < nsg; i++) { mx = max(mx, part[i]); bad = bad || part[NSG + i] > 0.0; }
    var lloc = 0.0;
    for (var j = t; j < tk; j += WG) {
        let s = sc[j];
        let pj = select(0.0, exp(s - mx), s > -inf_f32());
        sc[j] = pj;
        lloc += pj;
    }
    let sgl = subgroupAdd(lloc);
    if (sgi == 0u) { part[2u * NSG + t / sgs] = sgl; }
    workgroupBarrier();
    // 3. Value sums: 8 columns of this invocation's key range.
    var oa = vec4<f32>(0.0); var ob = vec4<f32>(0.0);
    if (kr < NR) {
        var j0 = kr;
        loop {
{{VSUM}}
            j0 += NR * U;
            if (j0 >= tk) { break; }
{{VNEXT}}
        }
        sums[2u * t] = oa; sums[2u * t + 1u] = ob;
    }
    workgroupBarrier();
    var l = 0.0;
    for (var i = 0u; i < nsg; i++) { l += part[2u * NSG + i]; }
{{VTOUCHED}}
    let grow = b * p.hq + h;
    for (var e = t; e < dv / 4u; e += WG) {
        let wd = e / 2u; let hf = e % 2u;
        var o = vec4<f32>(0.0);
        for (var r = 0u; r < NR; r++) { o += sums[2u * (r * DW + wd) + hf]; }
        store4(grow * dv + 4u * e, finish(o, l, bad, tk), 4u);
    }
}
