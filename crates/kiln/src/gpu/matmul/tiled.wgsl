// Register-blocked matmul for float dtypes. Each workgroup computes a {{BM}}x{{BN}} tile of C from
// {{BK}}-deep slices of A and B staged in workgroup memory (two buffers: the next slice is fetched into
// registers while the current one is multiplied, so there is one barrier per slice); each of the
// {{NT}} invocations owns a {{TM}}x{{TN}} micro-tile in registers (rows in groups of 4 spaced {{WGY4}}
// apart, columns likewise {{WGX4}}), built from vec4 reads of the staged slices. A and B are strided
// views; their loads are generated per layout mode (vec4 along k or along the row/column, or scalar).
// Edge tiles and the k tail are masked to zeros. Params: `MatmulParams` (problem.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<{{A_ELEM}}>;
@group(0) @binding(2) var<storage, read> in1: array<{{B_ELEM}}>;
{{PARAMS}}
{{PRELUDE}}
{{LOADERS}}
{{BASES}}
var<workgroup> ta0: array<array<vec4<f32>, {{BM4}}>, {{BK}}>;
var<workgroup> ta1: array<array<vec4<f32>, {{BM4}}>, {{BK}}>;
var<workgroup> tb0: array<array<vec4<f32>, {{BN4}}>, {{BK}}>;
var<workgroup> tb1: array<array<vec4<f32>, {{BN4}}>, {{BK}}>;

const I4 = vec4<u32>(0u, 1u, 2u, 3u);

@compute @workgroup_size({{NT}})
fn main(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let m = p.m;
    let n = p.n;
    let splits = p.splits;
    let z = wid.z + p.first_batch * splits;
    let split = z % splits;
    let base = bases(z / splits);
    let kbeg = split * p.kchunk;
    let kend = min(p.k, kbeg + p.kchunk);
    let nt = (kend - kbeg + {{BK}}u - 1u) / {{BK}}u;
    let m0 = wid.y * {{BM}}u;
    let n0 = wid.x * {{BN}}u;
    let tx = tid % {{WGX}}u;
    let ty = tid / {{WGX}}u;
    let sam = p.a_so;
    let sak = p.a_sk;
    let sbk = p.b_sk;
    let sbn = p.b_so;
{{SETUP}}
    var kt = kbeg;
{{LOAD}}
{{STORE0}}
    workgroupBarrier();
    var t = 0u;
    loop {
        let more1 = t + 1u < nt;
        if (more1) {
            kt += {{BK}}u;
{{LOAD}}
        }
{{COMPUTE0}}
        if (more1) {
{{STORE1}}
        }
        workgroupBarrier();
        if (!more1) { break; }
        let more2 = t + 2u < nt;
        if (more2) {
            kt += {{BK}}u;
{{LOAD}}
        }
{{COMPUTE1}}
        if (more2) {
{{STORE0}}
        }
        workgroupBarrier();
        if (!more2) { break; }
        t += 2u;
    }
    let cbase = base.z + split * p.part_len;
    let som = p.c_rs;
    let son = p.c_cs;
{{WRITE}}
}
