// Reductions over the middle axis of a contiguous (outer, k, inner) view: k rows of `inner`
// contiguous columns. A workgroup covers CW column packs x 256 / CW row lanes (consecutive
// invocations on consecutive columns, so every load is coalesced) over one range of rows; the rows
// are split into S ranges across workgroups so that wide and tall shapes alike fill the GPU, and a
// second dispatch reduces the S partial results (laid out as (outer, S, inner)).
// The VEC variant reads 16-byte packs of columns (inner and the offset whole packs).
// Params: p[0] outer, p[1] k, p[2] inner, p[3] input offset (elements), p[4] column tiles, p[5] S,
// p[6] rows per range, p[7] CW, p[8] word offset of the indices of a (value, index) input or 0,
// p[9] word offset where a (value, index) output puts its indices, or 0 to write only the result.
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<vec4<u32>>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;
{{PRELUDE}}
fn rd(i: u32) -> u32 { return src[i >> 2u][i & 3u]; }
{{LOADERS}}
{{COMBINE}}
{{SHARED}}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {
    let cw = p[7];
    let cl = lid % cw;
    let rl = lid / cw;
    let nrl = 256u / cw;
    let w = wid.x + wid.y * nw.x;
    let ns = p[5];
    let tiles = p[4];
    let sp = w % ns;
    let o = w / (ns * tiles);
    let cp = ((w / ns) % tiles) * cw + cl;
    let k = p[1];
    let inner = p[2];
    let live = o < p[0] && cp < {{PACKS}};
    let r0 = sp * p[6];
    let r1 = min(r0 + p[6], k);
{{BODY}}
{{REDUCE}}
    if (live && rl == 0u) {
        let ob = (o * ns + sp) * inner;
{{WRITE}}
    }
}
