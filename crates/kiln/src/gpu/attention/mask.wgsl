// Which keys a query sees and how its scores are capped, for every attention kernel (spliced in as
// MASK, and with rows.wgsl as ROWS): query i of tq is at position i + tk - tq of the tk keys; it
// sees the keys from first_key(i) (0, or with a sliding window w the key w - 1 positions before it)
// up to visible(i) (all tk, or itself with causal masking).

// Keys query i (of tq, the last tq of tk positions) sees: all, or j <= i + tk - tq with causal masking.
fn visible(i: u32, tq: u32, tk: u32, causal: bool) -> u32 {
    if (!causal) { return tk; }
    return u32(clamp(i32(i) + 1 + i32(tk) - i32(tq), 0, i32(tk)));
}

// The first key query i sees: 0, or with a window w > 0 (causal only) i + tk - tq - (w - 1).
fn first_key(i: u32, tq: u32, tk: u32, w: u32) -> u32 {
    if (w == 0u) { return 0u; }
    return u32(max(i32(i) + 1 + i32(tk) - i32(tq) - i32(w), 0));
}

// Scores soft-capped at c, c tanh(s ic) with ic = 1 / c (Gemma 2; c in the scores' units; a
// product, not a division per score), or as they are where c is 0. Infinite scores become +-c; NaN
// stays NaN (the clamp keeps tanh's exponentials finite).
fn soft_cap(s: vec4<f32>, c: f32, ic: f32) -> vec4<f32> {
    if (c == 0.0) { return s; }
    let t = c * tanh(clamp(s * ic, vec4<f32>(-15.0), vec4<f32>(15.0)));
    return select(t, s, (bitcast<vec4<u32>>(s) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u));
}

fn soft_cap1(s: f32, c: f32, ic: f32) -> f32 {
    if (c == 0.0) { return s; }
    return select(c * tanh(clamp(s * ic, -15.0, 15.0)), s, is_nan(s));
}
