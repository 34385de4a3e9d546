// Register-blocked matmul for float dtypes. Each workgroup computes a {{BM}}x{{BN}} tile of C from
// {{BK}}-deep slices of A and B staged in workgroup memory (two buffers: the next slice is fetched into
// registers while the current one is multiplied, so there is one barrier per slice); each of the
// {{NT}} invocations owns a {{TM}}x{{TN}} micro-tile in registers (rows in groups of 4 spaced {{WGY4}}
// apart, columns likewise {{WGX4}}), built from vec4 reads of the staged slices. A and B are strided
// views; their loads are generated per layout mode (vec4 along k or along the row/column, or scalar).
// Edge tiles and the k tail are masked to zeros. Params: see matmul.rs.
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<{{A_ELEM}}>;
@group(0) @binding(2) var<storage, read> in1: array<{{B_ELEM}}>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;
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
    let m = p[0];
    let n = p[1];
    let splits = p[25];
    let z = wid.z + p[28] * splits;
    let split = z % splits;
    let base = bases(z / splits);
    let kbeg = split * p[26];
    let kend = min(p[2], kbeg + p[26]);
    let nt = (kend - kbeg + {{BK}}u - 1u) / {{BK}}u;
    let m0 = wid.y * {{BM}}u;
    let n0 = wid.x * {{BN}}u;
    let tx = tid % {{WGX}}u;
    let ty = tid / {{WGX}}u;
    let sam = p[5];
    let sak = p[6];
    let sbk = p[7];
    let sbn = p[8];
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
    let cbase = base.z + split * p[27];
    let som = p[22];
    let son = p[23];
{{WRITE}}
}
