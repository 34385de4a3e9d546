// RMSNorm (p[3] == 1) or LayerNorm (p[3] == 0) over the rows of a contiguous (rows, k) view: one
// workgroup of {{W}} invocations per row. A row is read in packs of 4 * PW elements: one 16-byte
// load per pack where rows start on 16 bytes, else four words or four elements. With NP > 0 packs
// per invocation the row is read once into registers and stays there from the statistics (an
// exact two-pass mean and variance) to the output; longer rows are read twice (per-invocation
// Welford statistics merged across the workgroup, then the output pass). Weight and bias are
// vectors of length k read like the row (16-byte packs or words of contiguous copies; strided
// elements in the element mode).
// Params: p[0] rows, p[1] k, p[2] input offset (in packs, words or elements by mode), p[3] rms
// flag, p[4] eps (f32 bits), p[5] weight offset, p[6] weight stride, p[7] bias offset, p[8] bias
// stride, p[9] 1 if there is a bias.
@group(0) @binding(0) var<storage, read_write> dst: array<{{DST}}>;
@group(0) @binding(1) var<storage, read> in0: array<{{SRC}}>;
@group(0) @binding(2) var<storage, read> in1: array<{{SRC}}>;
@group(0) @binding(3) var<storage, read> in2: array<{{SRC}}>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;
{{PRELUDE}}
{{HELPERS}}

@compute @workgroup_size({{W}})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>{{SG_ARGS}}) {
    let row = wid.x + wid.y * nw.x;
    if (row >= p[0]) { return; }
    let k = p[1];
    let kf = f32(k);
    let eps = bitcast<f32>(p[4]);
    let rms = p[3] == 1u;
{{BODY}}
}
