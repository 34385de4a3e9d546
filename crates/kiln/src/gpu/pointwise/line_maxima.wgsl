// The largest finite |x| of every line of a bf16 operand of a cooperative-matrix kernel (a row of A
// or a column of B along K in a matmul), as the bits of a non-negative f32, maxed atomically into `mx` (zeroed before).
// Positive floats order as their bits, so the maximum needs no float compare; Inf and NaN are left
// out (they pass through the product unscaled). The matmul scales each line by a power of two from it
// so that bf16 values, whose range f16 lacks, are staged as f16 without overflow (line_maxima.rs).
// Invocation t takes one block of up to 64 elements of one line of one batch entry; `p[7] == 1`
// makes consecutive invocations take consecutive lines (coalesced when lines are contiguous), else
// consecutive blocks of one line (K contiguous). The `x4` variant reads K-contiguous lines 8 values
// (16 bytes) at a time: offset, line stride, batch strides and K are multiples of 8.
// Params: p[0] lines, p[1] K, p[2] offset, p[3] line stride, p[4] k stride, p[5] first slot in `mx`,
// p[6] blocks per line, p[7] line order, p[8] batch rank (<= 4), p[9..13] batch dims,
// p[13..17] batch strides, p[17] invocations.
@group(0) @binding(0) var<storage, read_write> mx: array<atomic<u32>>;
@group(0) @binding(1) var<storage, read> x: {{X}};
@group(1) @binding(0) var<storage, read> p: array<u32, 32>;

const BLOCK: u32 = 64u;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let t = gid.x + gid.y * nw.x * 256u;
    if (t >= p[17]) {
        return;
    }
    let lines = p[0];
    let blocks = p[6];
    var line: u32;
    var blk: u32;
    var z: u32;
    if (p[7] == 1u) {
        line = t % lines;
        blk = (t / lines) % blocks;
        z = t / lines / blocks;
    } else {
        blk = t % blocks;
        line = (t / blocks) % lines;
        z = t / blocks / lines;
    }
    var base = p[2];
    var rem = z;
    for (var d = p[8]; d > 0u; d--) {
        let i = d - 1u;
        base += (rem % p[9u + i]) * p[13u + i];
        rem /= p[9u + i];
    }
    let e0 = base + line * p[3];
    let k1 = min((blk + 1u) * BLOCK, p[1]);
    var m = 0u;
{{SCAN}}    if (m > 0u) {
        atomicMax(&mx[p[5] + z * lines + line], m);
    }
}
