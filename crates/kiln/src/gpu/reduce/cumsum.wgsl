// Inclusive prefix sums of the rows of a contiguous (rows, k) view into f32, as a block scan: a
// segment of T lanes (p[4], a power of two up to 256) scans one block of T * E elements of a row,
// each lane E consecutive elements, the lanes' totals scanned in workgroup memory. Rows longer than
// one block take three dispatches: the block totals (mode 1), their scan (this kernel again, on the
// totals), and every block scanned again from the scanned totals of the blocks before it (mode 2).
// Params: p[0] segments (rows * blocks), p[1] k, p[2] input offset, p[3] blocks per row, p[4] T,
// p[5] mode: 0 scan, 1 block totals, 2 scan plus the inclusive scan of the block totals in in1.
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<u32>;
@group(0) @binding(2) var<storage, read> in1: array<u32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;
{{PRELUDE}}
{{LOADERS}}
const E: u32 = {{E}}u;
var<workgroup> tot: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {
    let t = p[4];
    let seg = (wid.x + wid.y * nw.x) * (256u / t) + lid / t;
    let lane = lid % t;
    let live = seg < p[0];
    let k = p[1];
    let row = seg / p[3];
    let blk = seg % p[3];
    let j0 = (blk * t + lane) * E;
    var xs: array<f32, E>;
    var run = 0.0;
    for (var e = 0u; e < E; e++) {
        if (live && j0 + e < k) { run += ld0(p[2] + row * k + j0 + e); }
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
    if (p[5] == 1u) {
        if (lane == t - 1u) { dst[seg] = bitcast<u32>(tot[lid]); }
        return;
    }
    var before = 0.0;
    if (lane > 0u) { before = tot[lid - 1u]; }
    if (p[5] == 2u && blk > 0u) { before += bitcast<f32>(in1[row * p[3] + blk - 1u]); }
    for (var e = 0u; e < E; e++) {
        if (j0 + e < k) { dst[row * k + j0 + e] = bitcast<u32>(before + xs[e]); }
    }
}
