// The folded decode kernel's merge of the split partial rows (spliced into decode.wgsl, FOLD): the
// split workgroups of one row chunk (batch, key/value head, chunk of R rows) that hold a key the
// chunk sees each write their (max, sum) and unnormalised value rows to `part`, then storageBarrier()
// (a device-scope release: OpControlBarrier with Device memory scope in SPIR-V) and take a ticket
// from the chunk's counter; the one that draws the last ticket (after a second storageBarrier(),
// the acquire) merges all the splits' rows into the final output as combine.wgsl would, and sets the
// counter back to 0, so the counter buffer is all zeros again for the next dispatch.
//
// `part` (vec4): (max, sum, 0, 0) of row x of split s of chunk ch at (ch * nsplit + s) * R + x, its
// value sums from p.part_start + ((ch * nsplit + s) * R + x) * DV4. Invocation t merges (row, column
// quad) pairs t, t + WG, ..., loading MS splits at a time so their loads are in flight together.

var<workgroup> ticket: u32;

// `Acc` and `fold` (the running merge): rows.wgsl.

const MS: u32 = {{MS}}u;

fn merge_splits(t: u32, ch: u32, rc: u32, b: u32, hk: u32, nvis: u32) {
    let group = p.hq / p.hkv; let tq = p.tq; let dv = p.dv; let nsplit = p.splits;
    for (var e = t; e < R * DV4; e += WG) {
        let x = e / DV4; let c4 = e % DV4; let c = 4u * c4;
        let gr = rc * R + x;
        if (gr < group * tq && c < dv) {
            let i = gr % tq;
            let vis = visible(i, tq, p.tk, p.causal == 1u);
            // Only the splits holding a key this row sees.
            let ns = min(nvis, (vis + p.per_split - 1u) / p.per_split);
            var a = Acc(-inf_f32(), 0.0, vec4<f32>(0.0), false);
            for (var s0 = 0u; s0 < ns; s0 += MS) {
{{MERGE_LOADS}}
            }
            var out = a.o / a.l;
            if (a.bad) {
                out = vec4<f32>(nan_f32());
            } else if (a.l == 0.0) {
                out = select(vec4<f32>(0.0), vec4<f32>(nan_f32()), vis > 0u);
            }
            let h = hk * group + gr / tq;
            store4(((b * p.hq + h) * tq + i) * dv + c, out, min(4u, dv - c));
        }
    }
}
