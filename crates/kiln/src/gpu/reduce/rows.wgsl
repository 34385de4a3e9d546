// Row reductions over a contiguous (rows, k) view. A segment of T lanes (T = p.lanes, a power of two up
// to 256) reduces one chunk of one row, so a workgroup holds 256 / T segments: short rows share a
// workgroup and long rows are split into chunks whose results a second dispatch reduces again.
// The input is bound as 16-byte packs; the VEC variant reads whole packs where rows start on one,
// the other reads element by element (both coalesced: consecutive lanes, consecutive addresses).
// Params: `RowsParams` (mod.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<vec4<u32>>;
{{PARAMS}}
{{PRELUDE}}
fn rd(i: u32) -> u32 { return src[i >> 2u][i & 3u]; }
{{LOADERS}}
{{COMBINE}}
var<workgroup> sv: array<{{CT}}, 256>;
var<workgroup> si: array<u32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>{{SG_ARGS}}) {
    let t = p.lanes;
    let g = {{LANE}};
    let seg = (wid.x + wid.y * nw.x) * (256u / t) + g / t;
    let lane = g % t;
    var a = Acc({{IDENT}}, 0xffffffffu);
    if (seg < p.segments) {
        let k = p.k;
        let start = (seg % p.chunks) * p.chunk;
        let len = min(p.chunk, k - start);
        let base = p.off + (seg / p.chunks) * k + start;
{{BODY}}
    }
{{REDUCE}}
    if (seg < p.segments && lane == 0u) {
{{WRITE}}
    }
}
