// Stores one new position per sequence into a paged KV pool `(blocks, h, block_size, e)`: row i of
// the source `(b, h, 1, e)` (any strides) goes to flat slot slots[i] (block slots[i] / block_size,
// position slots[i] % block_size), all sequences in one dispatch. Invocation w writes one u32 word
// of the pool: PACK elements (1 for f32, 2 for f16/bf16: rows of even length at even offsets).
//
// Params: `WriteParams` (paged_write.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<u32>;
@group(0) @binding(2) var<storage, read> slots: array<u32>;
{{PARAMS}}
{{PRELUDE}}
{{LOADER}}

const PACK: u32 = {{PACK}}u;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let w = gid.x + gid.y * nw.x * 256u;
    if (w >= p.words) { return; }
    let h = p.h; let e = p.e; let bs = p.block_size;
    let pe = e / PACK;
    let c = (w % pe) * PACK;
    let hh = (w / pe) % h;
    let i = w / (pe * h);
    let slot = slots[i];
    let at = p.pool_off + (((slot / bs) * h + hh) * bs + slot % bs) * e + c;
    let src = p.src_off + i * p.src_ss + hh * p.src_sh + c * p.src_se;
{{STORE}}
}
