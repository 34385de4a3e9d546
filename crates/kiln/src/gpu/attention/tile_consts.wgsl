// The `tile` kernels' module-scope constants, workgroup memory and word conversions (spliced into
// decode_tile.wgsl and paged_tile.wgsl as CONSTS): rows per workgroup R (RR merged a round), WG
// invocations, LPK lanes to a key row with CH 16-byte words each, NG lane groups, KPG keys per group
// and chunk, DV4 value quads; `wlo`/`whi` turn a word's 8 half values into two vec4s.
const R: u32 = {{R}}u;
const RR: u32 = {{RR}}u;
const WG: u32 = {{WG}}u;
const LPK: u32 = {{LPK}}u;
const CH: u32 = {{CH}}u;
const NG: u32 = WG / LPK;
const KPG: u32 = {{KPG}}u;
const DV4: u32 = {{DV4}}u;
// Regions (vec4): the queries before the walk; then each group's (max, sum, NaN flag) and the value
// sums of a round.
const QB: u32 = 0u;
const MB: u32 = 0u;
const SB: u32 = 3u * NG;
var<workgroup> sm: array<vec4<f32>, {{TOTAL}}>;

{{CVT}}

fn nan4v(x: vec4<f32>) -> vec4<bool> { return (bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u); }
