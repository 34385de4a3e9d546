// The largest finite |x| of every line of a bf16 operand of a cooperative-matrix kernel (a row of A
// or a column of B along K in a matmul), as the bits of a non-negative f32, maxed atomically into `mx` (zeroed before).
// Positive floats order as their bits, so the maximum needs no float compare; Inf and NaN are left
// out (they pass through the product unscaled). The matmul scales each line by a power of two from it
// so that bf16 values, whose range f16 lacks, are staged as f16 without overflow (line_maxima.rs).
// Invocation t takes one block of up to 64 elements of one line of one batch entry; `p.line_fast == 1`
// makes consecutive invocations take consecutive lines (coalesced when lines are contiguous), else
// consecutive blocks of one line (K contiguous). The `x4` variant reads K-contiguous lines 8 values
// (16 bytes) at a time: offset, line stride, batch strides and K are multiples of 8.
// Params: `LineParams` (line_maxima.rs).
@group(0) @binding(0) var<storage, read_write> mx: array<atomic<u32>>;
@group(0) @binding(1) var<storage, read> x: {{X}};
{{PARAMS}}

const BLOCK: u32 = 64u;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let t = gid.x + gid.y * nw.x * 256u;
    if (t >= p.count) {
        return;
    }
    let lines = p.lines;
    let blocks = p.blocks;
    var line: u32;
    var blk: u32;
    var z: u32;
    if (p.line_fast == 1u) {
        line = t % lines;
        blk = (t / lines) % blocks;
        z = t / lines / blocks;
    } else {
        blk = t % blocks;
        line = (t / blocks) % lines;
        z = t / blocks / lines;
    }
    var base = p.offset;
    var rem = z;
    for (var d = p.rank; d > 0u; d--) {
        let i = d - 1u;
        base += (rem % p.dims[i]) * p.strides[i];
        rem /= p.dims[i];
    }
    let e0 = base + line * p.line_stride;
    let k1 = min((blk + 1u) * BLOCK, p.k);
    var m = 0u;
{{SCAN}}    if (m > 0u) {
        atomicMax(&mx[p.first + z * lines + line], m);
    }
}
