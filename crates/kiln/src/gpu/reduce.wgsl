// Row reductions: one workgroup per chunk of a row of a contiguous (rows, k) view; the result of
// each chunk is one word of a 4-byte output (the caller casts it to the final dtype, or reduces the
// chunk results again). Chunks keep every loop short (software rasterisers cap loop iterations).
// Params: p[0] rows * chunks, p[1] k, p[2] input offset, p[3] chunk length, p[4] chunks per row.
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<u32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;
{{PRELUDE}}
{{LOADERS}}
{{FUNCS}}
var<workgroup> sv: array<{{CT}}, 256>;
var<workgroup> si: array<u32, 256>;

// Whether (w, j) replaces (v, i) as the running result.
fn better(v: {{CT}}, i: u32, w: {{CT}}, j: u32) -> bool {
    {{BETTER}}
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {
    let row = wid.x + wid.y * nw.x;
    if (row >= p[0]) { return; }
    let k = p[1];
    let r = row / p[4];
    let start = (row % p[4]) * p[3];
    let len = min(p[3], k - start);
    let base = p[2] + r * k + start;
    var acc: {{CT}} = {{IDENT}};
    var idx = 0xffffffffu;
    for (var j = lid.x; j < len; j += 256u) {
        let v = ld0(base + j);
        if (better(acc, idx, v, start + j)) { acc = v; idx = start + j; }
    }
    sv[lid.x] = acc;
    si[lid.x] = idx;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid.x < s) {
            let a = sv[lid.x];
            let b = sv[lid.x + s];
            if (better(a, si[lid.x], b, si[lid.x + s])) { sv[lid.x] = b; si[lid.x] = si[lid.x + s]; }
        }
        workgroupBarrier();
    }
    if (lid.x == 0u) {
        {{WRITE}}
    }
}
