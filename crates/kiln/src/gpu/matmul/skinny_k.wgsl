// Matmul for few output rows with B read along k (x @ W^T with W stored (N, K), as `linear` does):
// a workgroup is 8 groups of 32 k lanes; each group owns 4 columns of {{MT}} rows and its lanes read
// consecutive 4-element pieces of those columns (contiguous runs of 128 k), so every B element is
// read once, coalesced. The 32 lanes are summed through workgroup memory at the end. K is split over
// workgroups (grid y) when the grid is small; row blocks vary fastest in grid x. Params: `MatmulParams` (problem.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<{{A_ELEM}}>;
@group(0) @binding(2) var<storage, read> in1: array<{{B_ELEM}}>;
{{PARAMS}}
{{PRELUDE}}
{{LOADERS}}
{{BASES}}
var<workgroup> red: array<vec4<f32>, 256>;

const I4 = vec4<u32>(0u, 1u, 2u, 3u);

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let m = p.m;
    let n = p.n;
    let kl = tid & 31u;
    let m0 = (wid.x % p.mblocks) * {{MT}}u;
    let n0 = (wid.x / p.mblocks) * 32u + (tid >> 5u) * 4u;
    let base = bases(wid.z + p.first_batch);
    let kbeg = wid.y * p.kchunk;
    let kend = min(p.k, kbeg + p.kchunk);
    let sam = p.a_so;
    let sak = p.a_sk;
    let sbk = p.b_sk;
    let sbn = p.b_so;
{{SETUP}}
    for (var k = kbeg + 4u * kl; k < kend; k += 128u) {
        let ok = vec4<u32>(k) + I4 < vec4<u32>(kend);
{{BODY}}
    }
    let cbase = base.z + wid.y * p.part_len;
    let som = p.c_rs;
    let son = p.c_cs;
{{FINISH}}
}
