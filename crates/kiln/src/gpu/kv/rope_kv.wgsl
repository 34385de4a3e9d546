// Rotary embedding of q and k and the KV-cache append in one kernel: rows of the stacked q/k/v
// projection (t, (NH + 2 NKV) * D), {{DT}}, contiguous from element p.y_off with p.row elements a row,
// are split into heads; q heads (rotated, half-split layout) go to `qo` (t, NH, D), k heads (rotated)
// and v heads (copied) to positions p.pos.. of the caches (1, NKV, p.len, D) (kit/rope_store.wgsl). One
// invocation per (token, head, pair of adjacent elements i, i + 1 of the first half with their
// partners i + D/2, i + D/2 + 1).
// Params: `RopeKvParams` (kv/mod.rs).
@group(0) @binding(0) var<storage, read_write> qo: array<u32>;
@group(0) @binding(1) var<storage, read_write> kc: array<u32>;
@group(0) @binding(2) var<storage, read_write> vc: array<u32>;
@group(0) @binding(3) var<storage, read> y: array<u32>;
@group(0) @binding(4) var<storage, read> cs: array<u32>;
@group(0) @binding(5) var<storage, read> sn: array<u32>;
{{PARAMS}}
{{PRELUDE}}
{{LOADERS}}
{{STORES}}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let d = p.d;
    let hd2 = d / 2u;
    let pairs = hd2 / 2u;
    let nh = p.nh;
    let nkv = p.nkv;
    let heads = nh + 2u * nkv;
    let g = gid.x + gid.y * p.width;
    if (g >= p.t * heads * pairs) { return; }
    let i = (g % pairs) * 2u;
    let h = (g / pairs) % heads;
    let t = g / (pairs * heads);
    let src = p.y_off + t * p.row + h * d + i;
    let x1 = vec2<f32>(ldy(src), ldy(src + 1u));
    let x2 = vec2<f32>(ldy(src + hd2), ldy(src + hd2 + 1u));
    rope_store(t, h, i, x1, x2);
}
