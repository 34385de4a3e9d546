//! Floor division and remainder with NumPy's (and Python's) semantics, one element at a time.
//!
//! Integers: exact integer arithmetic rounding the quotient toward -inf, the remainder taking the
//! divisor's sign; a zero divisor gives 0 for both (NumPy's result, without its warning) and
//! `MIN // -1` wraps to `MIN`. Floats: NumPy's `npy_divmod`, built on the exact `fmod` (Rust's `%`
//! on floats): `mod = fmod(a, b)`, `div = (a - mod) / b`, moved down by one (and `mod` up by `b`)
//! when `mod` and `b` differ in sign, then rounded to the nearest integer toward the floor. f16 and
//! bf16 go through the f32 functions (exact inputs, one rounding of the result). The GPU runs the
//! same steps (`fmod_`, `divmod_` in `gpu/elementwise/mod.rs`).

macro_rules! float_divmod {
    ($divmod:ident, $t:ty) => {
        /// `(a // b, a % b)` as NumPy's `divmod` for floats.
        #[inline(always)]
        pub(crate) fn $divmod(a: $t, b: $t) -> ($t, $t) {
            let mut m = a % b;
            if b == 0.0 {
                return (a / b, m);
            }
            let mut div = (a - m) / b;
            if m != 0.0 {
                if (b < 0.0) != (m < 0.0) {
                    m += b;
                    div -= 1.0;
                }
            } else {
                m = (0.0 as $t).copysign(b);
            }
            let fd = if div != 0.0 {
                let f = div.floor();
                if div - f > 0.5 {
                    f + 1.0
                } else {
                    f
                }
            } else {
                (0.0 as $t).copysign(a / b)
            };
            (fd, m)
        }
    };
}
float_divmod!(divmod_f32, f32);
float_divmod!(divmod_f64, f64);

macro_rules! int_divmod {
    ($t:ty, $signed:expr) => {
        impl IntDivMod for $t {
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn floor_div(self, b: Self) -> Self {
                if b == 0 {
                    return 0;
                }
                let q = self.wrapping_div(b);
                let r = self.wrapping_rem(b);
                if $signed && r != 0 && ((r < 0) != (b < 0)) {
                    q.wrapping_sub(1)
                } else {
                    q
                }
            }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn floor_rem(self, b: Self) -> Self {
                if b == 0 {
                    return 0;
                }
                let r = self.wrapping_rem(b);
                if $signed && r != 0 && ((r < 0) != (b < 0)) {
                    r.wrapping_add(b)
                } else {
                    r
                }
            }
        }
    };
}

/// Integer floor division and remainder (see the module docs).
pub(crate) trait IntDivMod: Sized {
    fn floor_div(self, b: Self) -> Self;
    fn floor_rem(self, b: Self) -> Self;
}
int_divmod!(i32, true);
int_divmod!(i64, true);
int_divmod!(u32, false);
int_divmod!(u8, false);
int_divmod!(i8, true);
int_divmod!(i16, true);
int_divmod!(u16, false);
int_divmod!(u64, false);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_semantics() {
        for (a, b) in [(7i64, 2i64), (-7, 2), (7, -2), (-7, -2), (0, 3), (6, 3), (-6, 3), (5, 0), (i64::MIN, -1)] {
            let (q, r) = (a.floor_div(b), a.floor_rem(b));
            if b != 0 && !(a == i64::MIN && b == -1) {
                assert_eq!(q, (a as f64 / b as f64).floor() as i64, "{a} // {b}");
                assert_eq!(q * b + r, a, "{a} % {b}");
                assert!(r == 0 || (r < 0) == (b < 0));
            }
        }
        assert_eq!((i64::MIN.floor_div(-1), i64::MIN.floor_rem(-1)), (i64::MIN, 0));
        assert_eq!((5i32.floor_div(0), 5i32.floor_rem(0)), (0, 0));
        assert_eq!(divmod_f32(-7.0, 2.0), (-4.0, 1.0));
        assert_eq!(divmod_f32(7.0, -2.0), (-4.0, -1.0));
        let (q, r) = divmod_f32(-0.0, 3.0);
        assert!(q == 0.0 && q.is_sign_negative() && r == 0.0 && r.is_sign_positive());
        let (q, r) = divmod_f64(1.0, 0.0);
        assert!(q == f64::INFINITY && r.is_nan());
        assert_eq!(divmod_f32(-1.0, f32::INFINITY), (-1.0, f32::INFINITY));
    }
}
