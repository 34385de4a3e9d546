// Sums the partial products of a split-K matmul: dst[i] = sum over s of part[s * len + i], f32.
// A workgroup is 256 / L consecutive outputs x L split lanes (L = p.lanes, a power of two up to 8):
// lane l adds splits l, l + L, ... four at a time (their loads in flight together), then the L lane
// sums of each output are added in workgroup memory. Few outputs with many splits (a matrix-vector
// product split 64 ways) would otherwise leave one invocation per output walking all splits in turn.
// Params: `SplitkParams` (mod.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> part: array<f32>;
{{PARAMS}}

var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {
    let len = p.len;
    let splits = p.splits;
    let lanes = p.lanes;
    let cols = 256u / lanes;
    let c = t % cols;
    let l = t / cols;
    let i = (wid.x + wid.y * nw.x) * cols + c;
    var a = vec4<f32>(0.0);
    if (i < len) {
        var s = l;
        while (s + 3u * lanes < splits) {
            a += vec4<f32>(part[s * len + i], part[(s + lanes) * len + i], part[(s + 2u * lanes) * len + i],
                           part[(s + 3u * lanes) * len + i]);
            s += 4u * lanes;
        }
        while (s < splits) {
            a.x += part[s * len + i];
            s += lanes;
        }
    }
    red[t] = (a.x + a.y) + (a.z + a.w);
    workgroupBarrier();
    if (l == 0u && i < len) {
        var acc = red[c];
        for (var k = 1u; k < lanes; k++) {
            acc += red[k * cols + c];
        }
        dst[i] = bitcast<u32>(acc);
    }
}
