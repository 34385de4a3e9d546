// Writes the elements of a source view into a destination view of the same shape, moving raw bits.
// Elements narrower than a word are merged into their word with atomics, so neighbouring elements
// written by other invocations are kept. The unit variant moves whole units (a word, two or four
// words: elements of 4 or 8 bytes, or aligned pieces of rows contiguous in both views) with plain
// stores; dims, strides and offsets are then counted in units.
// Params: p[0] n, p[1] rank, p[2..10] dims, p[10..18] source strides, p[18..26] destination strides,
// p[34] source offset, p[35] destination offset.
@group(0) @binding(0) var<storage, read_write> dst: array<{{DST}}>;
@group(0) @binding(1) var<storage, read> src: array<{{SRC}}>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;

fn at(e: u32, s: u32, o: u32) -> u32 {
    var rem = e;
    var off = p[o];
    for (var d = p[1]; d > 0u; d--) {
        let k = d - 1u;
        off += (rem % p[2u + k]) * p[s + k];
        rem /= p[2u + k];
    }
    return off;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let e = gid.x + gid.y * nw.x * 256u;
    if (e >= p[0]) { return; }
    let s = at(e, 10u, 34u);
    let d = at(e, 18u, 35u);
    {{BODY}}
}
