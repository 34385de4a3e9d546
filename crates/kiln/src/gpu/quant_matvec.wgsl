// x (m, k) f32 @ w^T for a quantized (n, k) weight w ({{QT}}), for few rows m: the weight is read
// once per block of {{MT}} rows (16-byte loads) and dequantised in registers. A workgroup owns 8 weight rows (output
// columns), 32 lanes each; a lane takes every 32nd unit of 32 values of its row (a warp reads whole
// runs of blocks), dots it with the {{MT}} rows of x (vec4 loads) and the 32 lanes are summed
// through workgroup memory. Grid: x = n / 8 column blocks, y = row blocks of {{MT}}.
// Params: p[0] m, p[1] n, p[2] k, p[3] word offset of the scales (doff), p[4] x's offset in vec4s.
@group(0) @binding(0) var<storage, read_write> dst: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> q: array<vec4<u32>>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;
{{FORMATS}}
var<workgroup> red: array<f32, {{RED}}>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let m = p[0];
    let n = p[1];
    let k = p[2];
    let doff = p[3];
    let lane = tid % 32u;
    let col = wid.x * 8u + tid / 32u;
    let row = min(col, n - 1u);
    let m0 = wid.y * {{MT}}u;
    let units = k / 32u;
    let k4 = k / 4u;
{{SETUP}}
    for (var u = lane; u < units; u += 32u) {
        let b = row * (units / {{UPB}}u) + u / {{UPB}}u;
        let s = u % {{UPB}}u;
        let sc = ws_{{F}}(b, s, doff);
        let xo = u * 8u;
{{BODY}}
    }
{{STASH}}
    workgroupBarrier();
    for (var h = 16u; h > 0u; h >>= 1u) {
        if (lane < h) {
{{REDUCE}}
        }
        workgroupBarrier();
    }
    if (lane == 0u && col < n) {
{{FINISH}}
    }
}
