//! The paged KV pool: writes in chunks that cross block boundaries, through shuffled block tables
//! and from non-contiguous views, read back exactly (a copy, so later writes do not change it);
//! bad tables, shapes and dtypes are errors that name the problem.

use crate::backend_tests;
use kiln::{DType, Device, KvBlockPool, Tensor};

backend_tests!(pool_round_trips_through_block_tables, pool_refuses_bad_input);

/// Random `(1, h, t, d)` values as f64 (exact in f16 for small integers / 8).
fn values(h: usize, t: usize, d: usize, seed: u64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..h * t * d)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x % 64) as f64 - 32.0) / 8.0
        })
        .collect()
}

fn pool_round_trips_through_block_tables(dev: &Device) {
    for dtype in [DType::F32, DType::F16] {
        let (h, d, dv, bs, blocks) = (3, 5, 4, 4, 9);
        let pool = KvBlockPool::new(blocks, h, bs, d, dv, dtype, dev).unwrap();
        // Two sequences sharing the pool, with interleaved, out-of-order tables.
        let tables: [Vec<u32>; 2] = [vec![7, 2, 5, 0], vec![1, 8, 3, 6, 4]];
        let lens = [13usize, 18];
        let chunks: [&[usize]; 2] = [&[1, 5, 3, 4], &[4, 4, 1, 1, 8]];
        let mut want_k: [Vec<Vec<f64>>; 2] = [vec![vec![]; h], vec![vec![]; h]]; // per head, t * d
        let mut want_v: [Vec<Vec<f64>>; 2] = [vec![vec![]; h], vec![vec![]; h]];
        let mut first_view = None;
        for s in 0..2 {
            let mut at = 0;
            for (c, &t) in chunks[s].iter().enumerate() {
                let seed = (s * 100 + c) as u64;
                let (kv, vv) = (values(h, t, d, seed), values(h, t, dv, seed + 50));
                // k from a transposed (non-contiguous) view; v contiguous.
                let k_view = {
                    // The same values laid out (1, h, t, d) through a transpose of (1, t, h, d) data.
                    let mut tr = vec![0.0; kv.len()];
                    for hh in 0..h {
                        for tt in 0..t {
                            for dd in 0..d {
                                tr[(tt * h + hh) * d + dd] = kv[(hh * t + tt) * d + dd];
                            }
                        }
                    }
                    Tensor::from_f64_values(&tr, (1, t, h, d), dtype, dev).unwrap().transpose(1, 2).unwrap()
                };
                let v = Tensor::from_f64_values(&vv, (1, h, t, dv), dtype, dev).unwrap();
                pool.write(&tables[s], at, &k_view, &v).unwrap();
                for hh in 0..h {
                    want_k[s][hh].extend_from_slice(&kv[hh * t * d..(hh + 1) * t * d]);
                    want_v[s][hh].extend_from_slice(&vv[hh * t * dv..(hh + 1) * t * dv]);
                }
                at += t;
                if s == 0 && c == 1 {
                    first_view = Some((pool.gather(&tables[0], at).unwrap(), at));
                }
            }
            assert_eq!(at, lens[s]);
        }
        for s in 0..2 {
            for len in [0, 1, bs, lens[s]] {
                let (k, v) = pool.gather(&tables[s], len).unwrap();
                assert_eq!(k.dims(), &[1, h, len, d], "{dev} {dtype}");
                assert_eq!(v.dims(), &[1, h, len, dv], "{dev} {dtype}");
                let wk: Vec<f64> = (0..h).flat_map(|hh| want_k[s][hh][..len * d].to_vec()).collect();
                let wv: Vec<f64> = (0..h).flat_map(|hh| want_v[s][hh][..len * dv].to_vec()).collect();
                assert_eq!(k.to_f64_vec().unwrap(), wk, "{dev} {dtype} seq {s} len {len} keys");
                assert_eq!(v.to_f64_vec().unwrap(), wv, "{dev} {dtype} seq {s} len {len} values");
            }
        }
        // A gathered view taken early kept its values while later chunks were written.
        let (early, n) = first_view.unwrap();
        let wk: Vec<f64> = (0..h).flat_map(|hh| want_k[0][hh][..n * d].to_vec()).collect();
        assert_eq!(early.0.to_f64_vec().unwrap(), wk, "{dev} {dtype}: early gather changed");
    }
}

fn pool_refuses_bad_input(dev: &Device) {
    let pool = KvBlockPool::new(4, 2, 4, 3, 3, DType::F32, dev).unwrap();
    let k = Tensor::zeros((1, 2, 3, 3), DType::F32, dev).unwrap();
    let err = |r: kiln::Result<()>| r.unwrap_err().to_string();
    let e = err(pool.write(&[0], 2, &k, &k));
    assert!(e.contains("5 positions need 2 blocks") && e.contains("table has 1"), "{e}");
    let e = err(pool.write(&[0, 9], 0, &k, &k));
    assert!(e.contains("block 9") && e.contains("pool's 4"), "{e}");
    let wrong = Tensor::zeros((1, 3, 3, 3), DType::F32, dev).unwrap();
    let e = err(pool.write(&[0], 0, &wrong, &wrong));
    assert!(e.contains("kv_block_pool") && e.contains("(1, h, t, d)"), "{e}");
    let half = Tensor::zeros((1, 2, 3, 3), DType::F16, dev).unwrap();
    assert!(pool.write(&[0], 0, &half, &half).is_err());
    let short = Tensor::zeros((1, 2, 2, 3), DType::F32, dev).unwrap();
    let e = err(pool.write(&[0], 0, &k, &short));
    assert!(e.contains("lengths differ"), "{e}");
    let own = pool.tensors().0.narrow(0, 0, 1).unwrap().narrow(2, 0, 3).unwrap();
    assert!(pool.write(&[1], 0, &own, &k).is_err(), "a view of the pool itself");
    assert!(pool.gather(&[0], 5).is_err());
    assert!(KvBlockPool::new(2, 1, 0, 1, 1, DType::F32, dev).is_err());
}
