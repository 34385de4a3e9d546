// The rules for attention rows that the split decode kernels share (decode.wgsl, decode_lanes.wgsl,
// the fold in decode_fold.wgsl and combine.wgsl, where the ROWS placeholder stands): how many keys
// query i of tq sees, how a row's (value sums, sum, NaN flag) become its output, and how one split's
// partial row joins the running merge. (Which keys a query sees: mask.wgsl, spliced in before.)

// A finished row: NaN where a score was NaN, zeros where the row sees no key, else o / l.
fn finish(o: vec4<f32>, l: f32, bad: bool, vis: u32) -> vec4<f32> {
    if (bad) { return vec4<f32>(nan_f32()); }
    if (l == 0.0) { return select(vec4<f32>(0.0), vec4<f32>(nan_f32()), vis > 0u); }
    return o / l;
}

// A running merge of split rows: max m, sum l, value sums o, and whether a split was NaN.
struct Acc { m: f32, l: f32, o: vec4<f32>, bad: bool }

// Folds one split's (max m, sum l, value sums o) into the running (m, l, o); -inf marks no key.
fn fold(a: Acc, m: f32, l: f32, o: vec4<f32>) -> Acc {
    var r = a;
    r.bad = r.bad || is_nan(m);
    if (!(m > -inf_f32())) { return r; }
    if (m > r.m) {
        let f = exp(r.m - m);
        r.l *= f; r.o *= f; r.m = m;
    }
    let w = exp(m - r.m);
    r.l += w * l; r.o += w * o;
    return r;
}
