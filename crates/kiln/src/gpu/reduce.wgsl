// Row reductions: one workgroup per row of a contiguous (rows, k) view; the result of row r is one
// word of a 4-byte output (the caller casts it to the final dtype).
// Params: p[0] rows, p[1] k, p[2] input offset.
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
    let base = p[2] + row * k;
    var acc: {{CT}} = {{IDENT}};
    var idx = 0xffffffffu;
    for (var j = lid.x; j < k; j += 256u) {
        let v = ld0(base + j);
        if (better(acc, idx, v, j)) { acc = v; idx = j; }
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
