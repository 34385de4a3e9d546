//! i64 values beyond 32 bits stay exact through arithmetic, comparisons, reductions, matmul and
//! indexing on every backend (the GPU runs these on a host copy; WGSL has no 64-bit integers).

use crate::backend_tests;
use kiln::{Device, Tensor};

/// Values far outside the i32 range, with both signs.
const BIG: [i64; 6] = [5_000_000_000, -7_000_000_001, 1 << 40, -(1 << 33) + 3, 2_147_483_648, -2_147_483_649];

fn t(v: &[i64], shape: &[usize], dev: &Device) -> Tensor {
    Tensor::from_slice(v, shape.to_vec(), dev).unwrap()
}

fn wide_values_stay_exact(dev: &Device) {
    let a = t(&BIG, &[2, 3], dev);
    let b = t(&[3, -2, 1 << 20, 7, 1, -1], &[2, 3], dev);
    let add: Vec<i64> = BIG.iter().zip([3, -2, 1 << 20, 7, 1, -1]).map(|(x, y)| x + y).collect();
    assert_eq!(a.add(&b).unwrap().to_vec::<i64>().unwrap(), add);
    let mul: Vec<i64> = BIG.iter().zip([3, -2, 1 << 20, 7, 1, -1]).map(|(x, y)| x.wrapping_mul(y)).collect();
    assert_eq!(a.mul(&b).unwrap().to_vec::<i64>().unwrap(), mul);
    assert_eq!(a.neg().unwrap().to_vec::<i64>().unwrap(), BIG.iter().map(|x| -x).collect::<Vec<_>>());
    // Comparisons see the high word: 2^31 > 0 and 5e9 > 2^31.
    let gt = a.gt(&a.narrow(1, 0, 1).unwrap()).unwrap();
    let want: Vec<bool> = (0..6).map(|i| BIG[i] > BIG[(i / 3) * 3]).collect();
    assert_eq!(gt.to_vec::<bool>().unwrap(), want);
    // Reductions, along an axis and over a transposed view.
    assert_eq!(a.max(&[1], false).unwrap().to_vec::<i64>().unwrap(), vec![1 << 40, 2_147_483_648]);
    assert_eq!(
        a.t().unwrap().min(&[1], false).unwrap().to_vec::<i64>().unwrap(),
        vec![-(1 << 33) + 3, -7_000_000_001, -2_147_483_649]
    );
    assert_eq!(a.sum_all().unwrap().to_vec::<i64>().unwrap(), vec![BIG.iter().sum::<i64>()]);
    // Matmul with products past 2^32.
    let m = a.matmul(&t(&[1, 2, 3], &[3, 1], dev)).unwrap();
    assert_eq!(m.to_vec::<i64>().unwrap(), vec![BIG[0] + 2 * BIG[1] + 3 * BIG[2], BIG[3] + 2 * BIG[4] + 3 * BIG[5]]);
    // Indexing moves both words.
    let ids = t(&[2, 0, 2], &[3], dev);
    let sel = a.index_select(&ids, 1).unwrap();
    assert_eq!(sel.to_vec::<i64>().unwrap(), vec![BIG[2], BIG[0], BIG[2], BIG[5], BIG[3], BIG[5]]);
    let g = a.gather(0, &t(&[1, 1, 0, 0, 1, 0], &[2, 3], dev)).unwrap();
    assert_eq!(g.to_vec::<i64>().unwrap(), vec![BIG[3], BIG[4], BIG[2], BIG[0], BIG[4], BIG[2]]);
}

backend_tests!(wide_values_stay_exact);
