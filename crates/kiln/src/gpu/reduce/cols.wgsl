// Reductions over the middle axis of a contiguous (outer, k, inner) view: k rows of `inner`
// contiguous columns. A workgroup covers CW column packs x 256 / CW row lanes (consecutive
// invocations on consecutive columns, so every load is coalesced) over one range of rows; the rows
// are split into S ranges across workgroups so that wide and tall shapes alike fill the GPU, and a
// second dispatch reduces the S partial results (laid out as (outer, S, inner)).
// The VEC variant reads 16-byte packs of columns (inner and the offset whole packs).
// Params: `ColsParams` (mod.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<vec4<u32>>;
{{PARAMS}}
{{PRELUDE}}
fn rd(i: u32) -> u32 { return src[i >> 2u][i & 3u]; }
{{LOADERS}}
{{COMBINE}}
{{SHARED}}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {
    let cw = p.cw;
    let cl = lid % cw;
    let rl = lid / cw;
    let nrl = 256u / cw;
    let w = wid.x + wid.y * nw.x;
    let ns = p.ranges;
    let tiles = p.tiles;
    let sp = w % ns;
    let o = w / (ns * tiles);
    let cp = ((w / ns) % tiles) * cw + cl;
    let k = p.k;
    let inner = p.inner;
    let live = o < p.outer && cp < {{PACKS}};
    let r0 = sp * p.per;
    let r1 = min(r0 + p.per, k);
{{BODY}}
{{REDUCE}}
    if (live && rl == 0u) {
        let ob = (o * ns + sp) * inner;
{{WRITE}}
    }
}
