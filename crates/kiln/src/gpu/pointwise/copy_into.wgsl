// Writes the elements of a source view into a destination view of the same shape, moving raw bits.
// Elements narrower than a word are merged into their word with atomics, so neighbouring elements
// written by other invocations are kept. The unit variant moves whole units (a word, two or four
// words: elements of 4 or 8 bytes, or aligned pieces of rows contiguous in both views) with plain
// stores; dims, strides and offsets are then counted in units.
// Params: `Strided` (mod.rs): input 0 is the source, input 1 the destination.
@group(0) @binding(0) var<storage, read_write> dst: array<{{DST}}>;
@group(0) @binding(1) var<storage, read> src: array<{{SRC}}>;
{{PARAMS}}

fn at(e: u32, i: u32) -> u32 {
    var rem = e;
    var off = p.offsets[i];
    for (var d = p.rank; d > 0u; d--) {
        let k = d - 1u;
        off += (rem % p.dims[k]) * p.strides[8u * i + k];
        rem /= p.dims[k];
    }
    return off;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let e = gid.x + gid.y * nw.x * 256u;
    if (e >= p.n) { return; }
    let s = at(e, 0u);
    let d = at(e, 1u);
    {{BODY}}
}
