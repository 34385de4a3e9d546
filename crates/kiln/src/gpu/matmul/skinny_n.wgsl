// Matmul for few output rows with B read along n (x @ W with W stored (K, N)): each invocation owns
// 4 consecutive columns of {{MT}} rows and reads its B vectors straight from memory (a warp reads
// whole contiguous row segments), four consecutive k at a time, {{U}} such groups per loop step with
// all their loads issued first (bytes in flight; one vector load of A per row where A allows). A
// workgroup is {{CL}} column lanes x {{KL}} k lanes ({{CL}} x 4 columns, {{U}} x 4 x {{KL}} k per step);
// the k lanes are summed through workgroup memory at the end. The default shape (64 x 4) splits K
// over workgroups (grid y) to fill the GPU; the wide-k shape (8 x 32) covers few columns per
// workgroup, so a matrix-vector product fills the GPU with little or no split. Row blocks of {{MT}}
// vary fastest in grid x so that the blocks reading one slice of B run together. Params: `MatmulParams` (problem.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<{{A_ELEM}}>;
@group(0) @binding(2) var<storage, read> in1: array<{{B_ELEM}}>;
{{PARAMS}}
{{PRELUDE}}
{{LOADERS}}
{{BASES}}
var<workgroup> red: array<vec4<f32>, 256>;

const I4 = vec4<u32>(0u, 1u, 2u, 3u);
const CL: u32 = {{CL}}u;
const KL: u32 = {{KL}}u;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let m = p.m;
    let n = p.n;
    let nl = tid % CL;
    let kl = tid / CL;
    let m0 = (wid.x % p.mblocks) * {{MT}}u;
    let n0 = (wid.x / p.mblocks) * (4u * CL) + nl * 4u;
    let base = bases(wid.z + p.first_batch);
    let kbeg = wid.y * p.kchunk;
    let kend = min(p.k, kbeg + p.kchunk);
    let sam = p.a_so;
    let sak = p.a_sk;
    let sbk = p.b_sk;
    let sbn = p.b_so;
    let bcol = base.y + n0 * sbn;
{{SETUP}}
    for (var k = kbeg + 4u * kl; k < kend; k += {{U}}u * 4u * KL) {
{{BODY}}
    }
    let cbase = base.z + wid.y * p.part_len;
    let som = p.c_rs;
    let son = p.c_cs;
{{FINISH}}
}
