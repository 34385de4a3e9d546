//! Every kernel the GPU backend can generate, without a device: the source of the MSL/HLSL
//! translation test (naga turns each into Metal and DX12 shaders on any machine).

use super::elementwise::{self as ew, rotary, FUNCS};
use super::pointwise::{self as pw, copy, vec as ewv};
use super::runtime::storage;
use super::{attention, index, matmul, reduce, rowwise};
use crate::op::{BinaryOp, CmpOp, UnaryOp};
use crate::DType;

/// The dtypes the GPU stores.
const DTYPES: [DType; 12] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::U32,
    DType::I64,
    DType::U8,
    DType::Bool,
    DType::I8,
    DType::I16,
    DType::U16,
    DType::U64,
];
const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
const IDS: [DType; 4] = [DType::I64, DType::I32, DType::U32, DType::U8];

/// i64 and u64 (two words an element): no vectorised path; arithmetic runs on the host.
fn wide(dt: DType) -> bool {
    matches!(dt, DType::I64 | DType::U64)
}

/// The vectorised elementwise variants (`pointwise/vec.rs`) of `dt`.
fn vectorised(push: &mut impl FnMut(String, String), dt: DType) {
    for op in UnaryOp::ALL {
        if op.input_dtype(dt) == Some(dt) {
            push(
                format!("vec_unary_{}:c:{dt}", op.name()),
                ewv::source_with("c", &[dt], dt, &ew::unary_body(op, dt), FUNCS, ew::unary_params(op, dt).as_ref()),
            );
        }
    }
    for op in BinaryOp::ALL {
        if op.compute_dtype(dt) == Some(dt) {
            for v in ["cc", "cs", "vv", "vb", "sv"] {
                let src = ewv::source(v, &[dt, dt], dt, &ew::binary_body(op, dt), FUNCS);
                push(format!("vec_binary_{}:{v}:{dt}", op.name()), src);
            }
        }
    }
    push(format!("vec_signbit:c:{dt}"), ewv::source("c", &[dt], DType::Bool, &ew::signbit_body(dt), FUNCS));
    for op in CmpOp::ALL {
        push(
            format!("vec_cmp_{}:cc:{dt}", op.name()),
            ewv::source("cc", &[dt, dt], DType::Bool, &ew::cmp_body(op), ""),
        );
    }
    for v in ["ccc", "bvs"] {
        push(format!("vec_where:{v}:{dt}"), ewv::source(v, &[DType::Bool, dt, dt], dt, pw::WHERE_BODY, ""));
    }
    for to in DTYPES.into_iter().filter(|&t| !wide(t)) {
        push(format!("vec_cast:{dt}->{to}"), ewv::source("c", &[dt], to, &pw::cast_body(dt, to), ""));
    }
    push(format!("vec_copy:v:{dt}"), ewv::source("v", &[dt], dt, pw::COPY_BODY, ""));
}

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
                let src =
                    pw::source_with(v, &[dt], dt, &ew::unary_body(op, dt), FUNCS, ew::unary_params(op, dt).as_ref());
                push(format!("unary_{}:{v}:{dt}", op.name()), src);
            }
        }
        for op in BinaryOp::ALL {
            if op.compute_dtype(dt) != Some(dt) {
                continue;
            }
            for v in ["cc", "cs", "sc", "gg"] {
                let src = pw::source(v, &[dt, dt], dt, &ew::binary_body(op, dt), FUNCS);
                push(format!("binary_{}:{v}:{dt}", op.name()), src);
            }
        }
        for op in CmpOp::ALL {
            for v in ["cc", "cs", "gg"] {
                push(
                    format!("cmp_{}:{v}:{dt}", op.name()),
                    pw::source(v, &[dt, dt], DType::Bool, &ew::cmp_body(op), ""),
                );
            }
        }
        if !wide(dt) {
            push(format!("signbit:g:{dt}"), pw::source("g", &[dt], DType::Bool, &ew::signbit_body(dt), ""));
        }
        for v in ["ccc", "gsg"] {
            push(format!("where:{v}:{dt}"), pw::source(v, &[DType::Bool, dt, dt], dt, pw::WHERE_BODY, ""));
        }
        for to in DTYPES {
            push(format!("cast:{dt}->{to}"), pw::source("g", &[dt], to, &pw::cast_body(dt, to), ""));
        }
        for v in ["c", "g"] {
            push(format!("copy:{v}:{dt}"), pw::source(v, &[dt], dt, pw::COPY_BODY, ""));
        }
        if !wide(dt) {
            vectorised(&mut push, dt);
        }
        // Sub-word elements whose rows do not fill whole words take the elementwise fallback.
        if dt.size_in_bytes() < 4 {
            for ids in IDS {
                push(
                    format!("index_select:{dt}:{ids}"),
                    pw::source_with(
                        "ss",
                        &[dt, ids],
                        dt,
                        &index::index_select_body(dt, ids),
                        "",
                        Some(&index::SelectOp::default().block()),
                    ),
                );
                push(
                    format!("gather:{dt}:{ids}"),
                    pw::source_with(
                        "ss",
                        &[dt, ids],
                        dt,
                        &index::gather_body(dt, ids),
                        "",
                        Some(&index::GatherOp::default().block()),
                    ),
                );
            }
        }
        reduce::catalog(dt, &mut push);
        for (name, src) in matmul::variants(dt) {
            push(name, src);
        }
    }
    for dt in FLOATS {
        push(format!("vec_silu_mul:{dt}"), ewv::source("cc", &[dt, dt], dt, ew::SILU_MUL_BODY, FUNCS));
        push(format!("silu_mul:{dt}"), pw::source("cc", &[dt, dt], dt, ew::SILU_MUL_BODY, FUNCS));
        for interleaved in [false, true] {
            push(
                format!("rope:{interleaved}:{dt}"),
                pw::source_with(
                    "sss",
                    &[dt, dt, dt],
                    dt,
                    &rotary::rope_body(interleaved),
                    "",
                    Some(&rotary::RopeOp::default().block()),
                ),
            );
        }
        push(format!("cumsum:{dt}"), reduce::cumsum_source(dt));
        rowwise::catalog(rowwise::Family::Softmax, dt, &mut push);
        rowwise::catalog(rowwise::Family::Norm, dt, &mut push);
    }
    for size in [1, 2, 4, 8] {
        push(format!("copy_into:{size}"), copy::copy_into_source(size));
    }
    for unit in [4, 8, 16] {
        push(format!("copy_units:{unit}"), copy::copy_units_source(unit));
    }
    for ids in IDS {
        for unit in [4, 8, 16] {
            push(format!("index_rows:rows:{unit}:{ids}"), index::rows_source(unit, ids, false));
        }
        for unit in [4, 8] {
            push(format!("index_rows:gather:{unit}:{ids}"), index::rows_source(unit, ids, true));
        }
    }
    push("fill".into(), storage::fill_source());
    push("bandwidth:copy".into(), super::runtime::bandwidth::source());
    push("matmul_splitk".into(), matmul::splitk_source());
    super::dequant::catalog(&mut push);
    super::matvec::catalog(&mut push);
    super::kv::catalog(&mut push);
    out.extend(attention::catalog());
    out.extend(attention::paged_decode::catalog());
    out.extend(attention::paged_write::catalog());
    // Cooperative-matrix f16 matmul (SPIR-V and, for 8x8, MSL only: naga's HLSL has no coop matrix).
    out.extend(matmul::coop::catalog());
    // Kernels `kiln::compile` generates (samples of its programs).
    out.extend(super::fused::samples(super::fused_exprs()));
    out
}
