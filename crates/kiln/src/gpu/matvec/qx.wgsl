// The rows of x ({{XDT}}) through the prologue ({{PRO}}), as the integer-dot products read them
// (qrun.wgsl): run t of row r at xq[2 (r * runs + t)] (his) and + 1 (los), its scale and sum at
// xs[r * runs + t]. For products whose x does not fit the workgroup memory of quant_i8.wgsl.
// Grid: x = blocks of 64 runs, y = rows. Params: `QxParams` (qx.rs).
@group(0) @binding(0) var<storage, read_write> xq: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> xs: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> x: array<vec4<u32>>;
{{NORM_BINDING}}
{{PARAMS}}
var<workgroup> red: array<f32, 64>;

{{XLOAD}}
{{QRUN}}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let runs = p.k / 16u;
    let row = wid.y;
    let xb = p.x_off + row * p.x_stride;
{{SCALE}}
    let t = wid.x * 64u + lid;
    if (t >= runs) {
        return;
    }
    let e = t * 16u;
    let r = qrun(xin(xb, e, 0u) * scale, xin(xb, e, 1u) * scale, xin(xb, e, 2u) * scale, xin(xb, e, 3u) * scale);
    let o = row * runs + t;
    xq[2u * o] = r.hi;
    xq[2u * o + 1u] = r.lo;
    xs[o] = r.s;
}
