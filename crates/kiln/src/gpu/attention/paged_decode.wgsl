// Decode attention through a block table (paged KV cache, as vLLM's PagedAttention): one query per
// sequence, keys and values in a pool of fixed-size blocks `(blocks, hkv, block_size, d)`; position
// j of sequence b is slot j % block_size of block table[b * max_blocks + j / block_size]. Split-K
// over each sequence's positions as decode.wgsl: one workgroup of 128 invocations per (sequence,
// key/value head, chunk of R query heads sharing it, split of the positions); with several splits
// the (max, sum) and unnormalised rows go to combine.wgsl.
//
// A tile of 32 positions takes three phases and two barriers:
//   1. invocation t is key slot t / 8 (16 slots, two keys each) and lane cg = t % 8: it dots the
//      resident (pre-scaled) queries with granules cg + 8n of its keys; the R rows' partial dots
//      go to workgroup memory as one vec4 per (key, lane);
//   2. the 32 first invocations sum the 8 lanes of a key: its R scores (a vec4, one per row);
//   3. every invocation takes the tile's max per row (all the same, so the running max needs no
//      merge), and value group grp = t / DV4 adds p * v for keys grp, grp + G, .. to its value
//      granule t % DV4 (G groups of DV4 lanes), keeping its own part of the row sums.
// At the end the G groups' value sums and row sums are added up in workgroup memory.
//
// Params: `PagedParams` (paged_decode.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<u32>;
@group(0) @binding(2) var<storage, read> in1: {{KV_ARRAY}};
@group(0) @binding(3) var<storage, read> in2: {{KV_ARRAY}};
@group(0) @binding(4) var<storage, read> table: array<u32>;
@group(0) @binding(5) var<storage, read> lens: array<u32>;
{{PARAMS}}
{{PRELUDE}}
{{MASK}}
{{LOADERS}}
{{STORE}}

const R: u32 = {{R}}u;
const DP4: u32 = {{DP4}}u;
const NK: u32 = DP4 / 8u;
const DV4: u32 = {{DV4}}u;
const G: u32 = 128u / DV4;
const QN: u32 = (R * DP4 * 4u + 127u) / 128u;
// Regions (vec4): queries, partial dots, scores while walking; value and row sums at the end.
const QB: u32 = 0u;
const PB: u32 = R * DP4;
const SB: u32 = PB + 256u;
const OB: u32 = 0u;
const LB: u32 = G * R * DV4;
var<workgroup> sm: array<vec4<f32>, {{TOTAL}}>;

fn finish(o: vec4<f32>, l: f32, bad: bool) -> vec4<f32> {
    if (bad || l == 0.0) { return vec4<f32>(nan_f32()); }
    return o / l;
}

// The first element of position `j`'s row in a pool of rows of `e` elements starting at `off`.
fn pool_row(b: u32, hk: u32, j: u32, e: u32, off: u32) -> u32 {
    let bs = p.block_size;
    let blk = min(table[b * p.table_len + j / bs], p.pool_blocks - 1u);
    return off + ((blk * p.hkv + hk) * bs + j % bs) * e;
}

@compute @workgroup_size(128)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {
    let g = wid.x + wid.y * nw.x;
    if (g >= p.groups) { return; }
    let hq = p.hq; let hkv = p.hkv; let d = p.d; let dv = p.dv;
    let scale = p.scale;
    let nrc = p.blocks; let nsplit = p.splits; let partial = p.partial == 1u;
    let rc = g % nrc;
    var r = g / nrc;
    let s = r % nsplit; r /= nsplit;
    let hk = r % hkv; let b = r / hkv;
    let group = hq / hkv;
    let len = lens[b];
    // The split's positions, from the first the window leaves (mask.wgsl: the last p.window).
    let kbeg = max(s * p.per_split, first_key(0u, 1u, len, p.window));
    let kstop = min(s * p.per_split + p.per_split, len);
    if (kbeg >= kstop) {
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
    // The queries of the R rows, scaled, zero past d and past the group.
    var qv: array<f32, QN>;
    for (var it = 0u; it < QN; it++) {
        let e = t + 128u * it;
        let x = e / (DP4 * 4u); let c = e % (DP4 * 4u);
        qv[it] = 0.0;
        if (x < R && rc * R + x < group && c < d) {
            let h = hk * group + rc * R + x;
            qv[it] = ld0(p.q_off + b * p.q_ss + h * p.q_sh + c * p.q_se) * scale;
        }
    }
    for (var it = 0u; it < QN; it++) {
        let e = t + 128u * it;
        if (e < R * DP4 * 4u) { sm[QB + e / 4u][e % 4u] = qv[it]; }
    }
    workgroupBarrier();
    let slot = t / 8u; let cg = t % 8u;
    let grp = t / DV4; let cq = t % DV4;
    let koff = p.k_off; let voff = p.v_off;
    var m = vec4<f32>(-inf_f32());
    var lp = vec4<f32>(0.0);
    var bad = vec4<bool>(false);
{{DECLARE}}
    for (var j0 = kbeg; j0 < kstop; j0 += 32u) {
        // 1. Partial dots of keys j0 + slot and j0 + 16 + slot (past the split: its last key).
        for (var u = 0u; u < 2u; u++) {
            let key = min(j0 + 16u * u + slot, kstop - 1u);
            let row = pool_row(b, hk, key, d, koff);
            var pd = vec4<f32>(0.0);
            for (var n = 0u; n < NK; n++) {
                let c4 = cg + 8u * n;
                let kx = ldk4(row, 4u * c4, 1u, d);
{{PARTIAL_DOT}}
            }
            sm[PB + (16u * u + slot) * 8u + cg] = pd;
        }
        workgroupBarrier();
        // 2. The scores of the tile's 32 keys.
        if (t < 32u) {
            var sc = vec4<f32>(0.0);
            for (var k = 0u; k < 8u; k++) { sc += sm[PB + t * 8u + k]; }
            sm[SB + t] = soft_cap(sc, p.softcap, p.softcap_inv);
        }
        workgroupBarrier();
        // 3. Online softmax: the tile's max per row, then this group's keys into its value granule.
        let nk = min(32u, kstop - j0);
        var mt = vec4<f32>(-inf_f32());
        for (var j = 0u; j < nk; j++) {
            let sc = sm[SB + j];
            bad = bad | ((bitcast<vec4<u32>>(sc) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u));
            mt = max(mt, select(vec4<f32>(-inf_f32()), sc, sc > vec4<f32>(-inf_f32())));
        }
        let mn = max(m, mt);
        let a = select(vec4<f32>(1.0), exp(m - mn), mn > vec4<f32>(-inf_f32()));
        m = mn;
        lp *= a;
{{RESCALE}}
        if (grp < G) {
            for (var j = grp; j < nk; j += G) {
                let sc = sm[SB + j];
                let s2 = select(vec4<f32>(-inf_f32()), sc, sc > vec4<f32>(-inf_f32()));
                let pr = select(vec4<f32>(0.0), exp(s2 - mn), s2 > vec4<f32>(-inf_f32()));
                lp += pr;
                let v = ldv4(pool_row(b, hk, j0 + j, dv, voff), 4u * cq, 1u, dv);
{{ACCUMULATE}}
            }
        }
    }
    // Merge the G groups: value sums and row sums through workgroup memory.
    workgroupBarrier();
    if (grp < G) {
{{WRITE_O}}
        if (cq == 0u) { sm[LB + grp] = lp; }
    }
    workgroupBarrier();
    for (var e = t; e < R * DV4; e += 128u) {
        let x = e / DV4; let c4 = e % DV4; let c = 4u * c4;
        if (rc * R + x < group && c < dv) {
            var o = vec4<f32>(0.0);
            var l = 0.0;
            for (var k = 0u; k < G; k++) { o += sm[OB + (k * R + x) * DV4 + c4]; l += sm[LB + k][x]; }
            let row = b * hq + hk * group + rc * R + x;
            let n = min(4u, dv - c);
            if (partial) {
                let pr = row * nsplit + s;
                if (c4 == 0u) { dst[2u * pr] = bitcast<u32>(select(m[x], nan_f32(), bad[x])); dst[2u * pr + 1u] = bitcast<u32>(l); }
                put_raw(p.part_start + pr * dv + c, o, n);
            } else {
                store4(row * dv + c, finish(o, l, bad[x]), n);
            }
        }
    }
}
