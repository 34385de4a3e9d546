// The `tile` kernels' walk over their keys (spliced into decode_tile.wgsl and paged_tile.wgsl as
// WALK, after the queries are in workgroup memory): each lane's query words, the chunk loop (loads
// of the next chunk first, the lane group's scores and online softmax), then the lane groups'
// (max, sum, NaN flag) merged into the rows' common max `mx`, total sum `lsum`, flag `badr`, and this
// group's factor `f` to that max. The value sums' region follows the queries', which every lane has
// read by the barrier after QUERIES.
    workgroupBarrier();
{{QUERIES}}
    workgroupBarrier();
    var m = vec4<f32>(-inf_f32()); var l = vec4<f32>(0.0); var bad = vec4<bool>(false);
{{DECLARE}}
    for (var c0 = kbeg; c0 < kend; c0 += step) {
{{TAKE}}
        if (c0 + step < kend) {
{{NEXT}}
        }
{{SCORES}}
{{UPDATE}}
    }
    if (lane == 0u) {
        sm[MB + 3u * lg] = m; sm[MB + 3u * lg + 1u] = l; sm[MB + 3u * lg + 2u] = select(vec4<f32>(0.0), vec4<f32>(1.0), bad);
    }
    workgroupBarrier();
    var mx = vec4<f32>(-inf_f32()); var badr = vec4<bool>(false);
    for (var k = 0u; k < NG; k++) { mx = max(mx, sm[MB + 3u * k]); badr = badr | (sm[MB + 3u * k + 2u] > vec4<f32>(0.0)); }
    var lsum = vec4<f32>(0.0);
    for (var k = 0u; k < NG; k++) {
        let mk = sm[MB + 3u * k];
        lsum += select(vec4<f32>(0.0), sm[MB + 3u * k + 1u] * exp(mk - mx), mk > vec4<f32>(-inf_f32()));
    }
    let f = select(vec4<f32>(0.0), exp(m - mx), m > vec4<f32>(-inf_f32()));
    workgroupBarrier();
