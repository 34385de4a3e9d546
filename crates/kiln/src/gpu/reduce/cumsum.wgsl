// Inclusive prefix sums of the rows of a contiguous (rows, k) view into f32, as a block scan: a
// segment of T lanes (p.lanes, a power of two up to 256) scans one block of T * E elements of a row,
// each lane E consecutive elements, the lanes' totals scanned in workgroup memory. Rows longer than
// one block take three dispatches: the block totals (mode 1), their scan (this kernel again, on the
// totals), and every block scanned again from the scanned totals of the blocks before it (mode 2).
// Params: `ScanParams` (mod.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<u32>;
@group(0) @binding(2) var<storage, read> in1: array<u32>;
{{PARAMS}}
{{PRELUDE}}
{{LOADERS}}
const E: u32 = {{E}}u;
var<workgroup> tot: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {
    let t = p.lanes;
    let seg = (wid.x + wid.y * nw.x) * (256u / t) + lid / t;
    let lane = lid % t;
    let live = seg < p.segments;
    let k = p.k;
    let row = seg / p.blocks;
    let blk = seg % p.blocks;
    let j0 = (blk * t + lane) * E;
    var xs: array<f32, E>;
    var run = 0.0;
    for (var e = 0u; e < E; e++) {
        if (live && j0 + e < k) { run += ld0(p.off + row * k + j0 + e); }
        xs[e] = run;
    }
    // Inclusive scan of the lane totals within the segment (Hillis-Steele).
    tot[lid] = run;
    workgroupBarrier();
    for (var d = 1u; d < t; d = d << 1u) {
        var add = 0.0;
        if (lane >= d) { add = tot[lid - d]; }
        workgroupBarrier();
        tot[lid] += add;
        workgroupBarrier();
    }
    if (!live) { return; }
    if (p.mode == 1u) {
        if (lane == t - 1u) { dst[seg] = bitcast<u32>(tot[lid]); }
        return;
    }
    var before = 0.0;
    if (lane > 0u) { before = tot[lid - 1u]; }
    if (p.mode == 2u && blk > 0u) { before += bitcast<f32>(in1[row * p.blocks + blk - 1u]); }
    for (var e = 0u; e < E; e++) {
        if (j0 + e < k) { dst[row * k + j0 + e] = bitcast<u32>(before + xs[e]); }
    }
}
