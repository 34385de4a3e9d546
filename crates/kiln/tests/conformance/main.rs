//! The conformance suite: every op against a plain f64 reference on random inputs, for every backend
//! (see `backend_tests!` in `common.rs`).

mod bounds;
mod common;

mod attention;
mod attention_options;
mod attention_short;
mod attention_splits;
mod binary;
mod create;
mod decode;
mod differential;
mod edge_cases;
mod fusion;
mod index;
mod int64;
mod join;
mod kv_pool;
mod matmul;
mod matmul_coop;
mod matmul_coop_tiles;
mod narrow_ints;
mod nn;
mod paged_attention;
mod qkv_rope;
mod quant;
mod reduce;
mod regressions;
mod rope;
mod unary;
mod views;
