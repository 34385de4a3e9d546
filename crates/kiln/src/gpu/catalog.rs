//! Every kernel the GPU backend can generate, without a device: the source of the MSL/HLSL
//! translation test (naga turns each into Metal and DX12 shaders on any machine).

use super::elementwise::{self as ew, FUNCS};
use super::{index, matmul, matmul_coop, nn, reduce};
use crate::op::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::DType;

/// The dtypes the GPU stores.
const DTYPES: [DType; 8] =
    [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32, DType::I64, DType::U8, DType::Bool];
const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
const IDS: [DType; 4] = [DType::I64, DType::I32, DType::U32, DType::U8];

/// `(name, WGSL)` of every kernel variant, in a stable order.
pub fn kernel_catalog() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut push = |name: String, src: String| out.push((name, src));
    for dt in DTYPES {
        for op in UnaryOp::ALL {
            let Some(input) = op.input_dtype(dt) else { continue };
            if input != dt {
                continue;
            }
            for v in ["c", "s", "g"] {
                push(format!("unary_{}:{v}:{dt}", op.name()), ew::source(v, &[dt], dt, &ew::unary_body(op, dt), FUNCS));
            }
        }
        for op in BinaryOp::ALL {
            if op.compute_dtype(dt) != Some(dt) {
                continue;
            }
            for v in ["cc", "cs", "sc", "gg"] {
                let src = ew::source(v, &[dt, dt], dt, &ew::binary_body(op, dt), FUNCS);
                push(format!("binary_{}:{v}:{dt}", op.name()), src);
            }
        }
        for op in CmpOp::ALL {
            for v in ["cc", "cs", "gg"] {
                push(
                    format!("cmp_{}:{v}:{dt}", op.name()),
                    ew::source(v, &[dt, dt], DType::Bool, &ew::cmp_body(op), FUNCS),
                );
            }
        }
        for v in ["ccc", "gsg"] {
            push(format!("where:{v}:{dt}"), ew::source(v, &[DType::Bool, dt, dt], dt, ew::WHERE_BODY, FUNCS));
        }
        for to in DTYPES {
            push(format!("cast:{dt}->{to}"), ew::source("g", &[dt], to, &ew::cast_body(dt, to), FUNCS));
        }
        for v in ["c", "g"] {
            push(format!("copy:{v}:{dt}"), ew::source(v, &[dt], dt, ew::COPY_BODY, FUNCS));
        }
        for ids in IDS {
            push(
                format!("index_select:{dt}:{ids}"),
                ew::source("ss", &[dt, ids], dt, &index::index_select_body(ids), FUNCS),
            );
            push(format!("gather:{dt}:{ids}"), ew::source("ss", &[dt, ids], dt, &index::gather_body(ids), FUNCS));
        }
        for op in ReduceOp::ALL {
            push(format!("reduce:{}:{dt}", op.name()), reduce::reduce_source(op, dt));
        }
        push(format!("cumsum:{dt}"), reduce::cumsum_source(dt));
        if dt != DType::Bool {
            push(format!("matmul:{dt}"), matmul::source(dt));
        }
    }
    for dt in FLOATS {
        push(format!("silu_mul:{dt}"), ew::source("cc", &[dt, dt], dt, ew::SILU_MUL_BODY, FUNCS));
        for interleaved in [false, true] {
            push(
                format!("rope:{interleaved}:{dt}"),
                ew::source("sss", &[dt, dt, dt], dt, &nn::rope_body(interleaved), FUNCS),
            );
        }
        push(format!("softmax:{dt}"), nn::softmax_source(dt));
        push(format!("norm:{dt}"), nn::norm_source(dt, dt, dt));
        push(format!("attention:{dt}"), nn::attention_source(dt));
    }
    for size in [1, 2, 4, 8] {
        push(format!("copy_into:{size}"), index::copy_into_source(size));
    }
    push("fill".into(), index::fill_source());
    // Cooperative-matrix f16 matmul (SPIR-V and, for 8x8, MSL only: naga's HLSL has no coop matrix).
    out.extend(matmul_coop::catalog());
    out
}
