// Where a rotated q/k/v pair goes (rope_kv.wgsl, and the quantized q/k/v product with rope,
// matvec/quant_i8.rs): of token t and head h of the stacked q/k/v row, elements i, i + 1 (x1) and
// their partners i + D/2, i + D/2 + 1 (x2), i even and in the first half. q heads (h < NH) are
// rotated into `st_q` at (t, h); k heads rotated and v heads as they are into the caches (1, NKV,
// p.len, D) at position p.pos + t. cos/sin rows of D/2 values, one a token, from p.cos_off /
// p.sin_off. Whole words of every output, so no two invocations write one word.
fn rope_store(t: u32, h: u32, i: u32, x1: vec2<f32>, x2: vec2<f32>) {
    let d = p.d;
    let hd2 = d / 2u;
    let nh = p.nh;
    let nkv = p.nkv;
    if (h >= nh + nkv) {
        let dst = p.v_off + ((h - nh - nkv) * p.len + p.pos + t) * d + i;
        st_v(dst, x1.x, x1.y);
        st_v(dst + hd2, x2.x, x2.y);
        return;
    }
    let tab = p.cos_off + t * hd2 + i;
    let c = vec2<f32>(ldc(tab), ldc(tab + 1u));
    let tsn = p.sin_off + t * hd2 + i;
    let s = vec2<f32>(lds(tsn), lds(tsn + 1u));
    let o1 = x1 * c - x2 * s;
    let o2 = x2 * c + x1 * s;
    if (h < nh) {
        let dst = (t * nh + h) * d + i;
        st_q(dst, o1.x, o1.y);
        st_q(dst + hd2, o2.x, o2.y);
    } else {
        let dst = p.k_off + ((h - nh) * p.len + p.pos + t) * d + i;
        st_k(dst, o1.x, o1.y);
        st_k(dst + hd2, o2.x, o2.y);
    }
}
