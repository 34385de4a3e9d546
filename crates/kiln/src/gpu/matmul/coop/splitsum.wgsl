// Sums the planes of a split-K cooperative product (launch.rs) into its f16 or bf16 result, two
// outputs a word: word i = outputs 2i and 2i + 1, each the f32 sum over the splits s of
// part[s * p.len + i] (pairs of f32), rounded once. Four planes' loads are in flight together.
// Params: `SplitSumParams` (launch.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> part: array<vec2<f32>>;
{{PARAMS}}
{{PRELUDE}}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {
    let i = (wid.x + wid.y * nw.x) * 256u + t;
    let len = p.len;
    if (i >= len) { return; }
    var a = vec2<f32>(0.0);
    var s = 0u;
    while (s + 4u <= p.splits) {
        a += (part[s * len + i] + part[(s + 1u) * len + i]) + (part[(s + 2u) * len + i] + part[(s + 3u) * len + i]);
        s += 4u;
    }
    while (s < p.splits) {
        a += part[s * len + i];
        s += 1u;
    }
    dst[i] = {{PACK}};
}
