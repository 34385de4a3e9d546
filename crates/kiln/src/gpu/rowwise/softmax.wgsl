// Softmax / log-softmax over the rows of a contiguous (rows, k) view: one workgroup of {{W}}
// invocations per row. A row is read in packs of 4 * PW elements: one 16-byte load per pack where
// rows start on 16 bytes, else four words or four elements. With NP > 0 packs per invocation the
// row is read once into registers and stays there from the max to the output; longer rows are
// read twice (an online max/sum pass, then the output pass).
// Params: `SoftmaxParams` (mod.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<{{DST}}>;
@group(0) @binding(1) var<storage, read> in0: array<{{SRC}}>;
{{PARAMS}}
{{PRELUDE}}
{{HELPERS}}

@compute @workgroup_size({{W}})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>{{SG_ARGS}}) {
    let row = wid.x + wid.y * nw.x;
    if (row >= p.rows) { return; }
    let k = p.k;
    let log_out = p.log == 1u;
{{BODY}}
}
