// f16 matrix product on cooperative matrices (tensor cores, Apple simdgroup matrices):
// C[b] = A[b] @ B[b] with f16 operands, f32 accumulation and an f16 result (rounded once at the end).
// bf16 operands are read as stored and staged as f16, every row of A and column of B scaled by a
// power of two that fits its range (`mx`: line maxima from line_maxima.wgsl; `bf16_h4`), and the
// product scaled back to bf16.
// A workgroup computes a {{BM}}x{{BN}} tile of C with {{NSG}} subgroups of {{SG}} invocations in a
// {{WM}}x{{WN}} grid; each subgroup keeps {{TM}}x{{TN}} accumulators of {{S}}x{{S}} in registers. A and
// B advance {{BK}} deep along K, staged through two workgroup buffers: while one buffer is multiplied,
// the next slice is read from memory into registers, then stored into the other buffer (one barrier
// per slice). Reads outside the matrices give zeros, so any M, N, K work. With split K (SPLIT_DECLS)
// workgroup row y multiplies K from kb = y * p.kper to kk and writes an f32 partial product.
// The cooperative ops stay in workgroup-uniform control flow (naga requires it): every subgroup runs
// the same straight-line code, and only plain loads and stores are guarded by bounds.
// A and B are strided views. Each operand is staged with its contiguous ("fast") dim along a tile row
// and read with coopLoadT (row-major) or coopLoad (column-major) to match. `vec` variants read 4
// halves at a time through `x4` (offset and strides are multiples of 4, the fast stride is 1).
// Params: `CoopParams` (coop/config.rs).
enable f16;
{{ENABLE}}

@group(0) @binding(0) var<storage, read_write> dst: {{DST}};
@group(0) @binding(1) var<storage, read> a4: {{A4}};
@group(0) @binding(2) var<storage, read> a1: {{A1}};
@group(0) @binding(3) var<storage, read> b4: {{B4}};
@group(0) @binding(4) var<storage, read> b1: {{B1}};
{{PARAMS}}

// Two stages of each operand tile, then one {{S}}x{{S}} f32 tile per subgroup for the epilogue.
var<workgroup> sa: array<{{SE}}, {{SA}}>;
var<workgroup> sb: array<{{SE}}, {{SB}}>;
var<workgroup> sc: array<f32, {{SC}}>;

// {{W}} halves of A at slow index `s`, fast index `f` (and the next ones along fast), zero outside A.
fn chunk_a(base: u32, s: u32, f: u32) -> {{REG}} {
    let ns = {{A_NS}};
    let nf = {{A_NF}};
    var v = {{REG}}();
    if (s < ns && f < nf) {
        let fs = {{A_FS}};
        let e = base + s * {{A_SS}} + f * fs;
        {{A_FULL}}
        {{A_PART}}
    }
    return v;
}

fn chunk_b(base: u32, s: u32, f: u32) -> {{REG}} {
    let ns = {{B_NS}};
    let nf = {{B_NF}};
    var v = {{REG}}();
    if (s < ns && f < nf) {
        let fs = {{B_FS}};
        let e = base + s * {{B_SS}} + f * fs;
        {{B_FULL}}
        {{B_PART}}
    }
    return v;
}

{{BF16_DECLS}}
{{SPLIT_DECLS}}{{PUT}}{{EMU}}
@compute @workgroup_size({{WG}})
fn main(
    @builtin(local_invocation_index) li: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    {{SG_PARAM}}
) {
    {{SG_LET}}
    let m = p.m;
    let n = p.n;
{{K_RANGE}}
    var a_base = p.a_off;
    var b_base = p.b_off;
    var rem = wid.z;
    for (var d = p.rank; d > 0u; d--) {
        let i = d - 1u;
        let idx = rem % p.bdims[i];
        rem /= p.bdims[i];
        a_base += idx * p.a_batch[i];
        b_base += idx * p.b_batch[i];
    }
    // Tiles in groups of 8 along M, so workgroups running together share A and B slices in cache.
    let tiles_m = p.tiles_m;
    let tiles_n = p.tiles_n;
    let group = 8u * tiles_n;
    let first = (wid.x / group) * 8u;
    let rows = min(tiles_m - first, 8u);
    let tile_m = first + (wid.x % group) % rows;
    let tile_n = (wid.x % group) / rows;
    let m0 = tile_m * {{BM}}u;
    let n0 = tile_n * {{BN}}u;
    let out = wid.z * m * n{{PART}};
    {{SET_X}}
    // This subgroup's block of C and where its operands start in each stage.
    let wm = sg / {{WN}}u;
    let wn = sg % {{WN}}u;
    let wa = {{WA}};
    let wb = {{WB}};
    // This invocation's chunks of each operand tile: (slow, fast) inside the tile.
    let a_s = li / {{A_FC}}u;
    let a_f = (li % {{A_FC}}u) * {{W}}u;
    let a_st = a_s * {{LDA}}u + a_f;
    let b_s = li / {{B_FC}}u;
    let b_f = (li % {{B_FC}}u) * {{W}}u;
    let b_st = b_s * {{LDB}}u + b_f;
    // Accumulators start as copies of zeroed workgroup memory (portable: a zero-valued coop_mat
    // constructor has no zero-fill guarantee in Metal's simdgroup_matrix).
    for (var i = li; i < {{SC}}u; i += {{WG}}u) {
        sc[i] = 0.0;
    }
{{DECLS}}
    let steps = (kk - kb + {{BK}}u - 1u) / {{BK}}u;
{{MAINLOOP}}
{{EPILOGUE}}
}
