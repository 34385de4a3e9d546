//! Typed kernel parameters. A kernel's parameters are one struct declared once with [`params!`]:
//! the macro generates the Rust struct, its packing into the dispatch's parameter words
//! (`words()`, fields in declaration order, one word per `u32`/`i32`/`f32`, `N` words per
//! `[u32; N]`) and the WGSL declaration of the same struct bound as `p` (`wgsl()`), so the kernel
//! reads `p.m` and a moved or retyped field cannot go out of step. The binding is the one of every
//! kernel (group 1, binding 0, a read-only storage buffer at a dynamic offset in the batch's arena,
//! `PARAM_WORDS` words): a struct smaller than that range is valid (wgpu checks only that the
//! shader's binding is no larger than the layout's `min_binding_size`), and a larger one fails to
//! compile here (`WORDS <= PARAM_WORDS` is a constant assertion).

/// One field of a parameter struct: its WGSL type, its size in words, and how it packs.
pub(crate) trait Field: Copy {
    const WORDS: usize;
    /// The field's value in a default (all-zero) struct.
    const ZERO: Self;
    fn wgsl_type() -> String;
    /// Writes the field into `out[..WORDS]`.
    fn put(&self, out: &mut [u32]);
}

impl Field for u32 {
    const WORDS: usize = 1;
    const ZERO: u32 = 0;
    fn wgsl_type() -> String {
        "u32".into()
    }
    fn put(&self, out: &mut [u32]) {
        out[0] = *self;
    }
}

impl Field for i32 {
    const WORDS: usize = 1;
    const ZERO: i32 = 0;
    fn wgsl_type() -> String {
        "i32".into()
    }
    fn put(&self, out: &mut [u32]) {
        out[0] = *self as u32;
    }
}

impl Field for f32 {
    const WORDS: usize = 1;
    const ZERO: f32 = 0.0;
    fn wgsl_type() -> String {
        "f32".into()
    }
    fn put(&self, out: &mut [u32]) {
        out[0] = self.to_bits();
    }
}

impl<const N: usize> Field for [u32; N] {
    const WORDS: usize = N;
    const ZERO: [u32; N] = [0; N];
    fn wgsl_type() -> String {
        format!("array<u32, {N}>")
    }
    fn put(&self, out: &mut [u32]) {
        out[..N].copy_from_slice(self);
    }
}

/// The WGSL struct `name` with `fields` (name, WGSL type).
pub(crate) fn struct_wgsl(name: &str, fields: &[(&str, String)]) -> String {
    let mut out = format!("struct {name} {{\n");
    for (f, t) in fields {
        out += &format!("    {f}: {t},\n");
    }
    out + "}\n"
}

/// The WGSL declaration of a parameter struct named `name` with `fields` (name, WGSL type), bound
/// as `p` at group 1, binding 0.
pub(crate) fn declaration(name: &str, fields: &[(&str, String)]) -> String {
    struct_wgsl(name, fields) + &format!("@group(1) @binding(0) var<storage, read> p: {name};\n")
}

/// A parameter struct as a value, for kernels whose parameters are composed of pieces: a shared
/// block followed by the struct of one op (`Elementwise`'s op constants, say) as a member.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Block {
    /// The struct's WGSL name.
    pub(crate) name: &'static str,
    /// Its WGSL struct declaration (without a binding).
    pub(crate) decl: String,
    /// Its packed words.
    pub(crate) words: Vec<u32>,
}

/// Declares a kernel parameter struct (see the module docs):
/// `params! { pub(crate) struct MatvecParams { m: u32, eps: f32, dims: [u32; 4] } }`.
/// `struct CoopParams: MatmulShape { tiles_m: u32 }` begins with all fields of another parameter
/// struct: in Rust as the member `base`, in WGSL flat (the kernel reads `p.m` and `p.tiles_m`).
macro_rules! params {
    ($(#[$meta:meta])* $vis:vis struct $name:ident : $base:ident { $($(#[$fmeta:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq)]
        $vis struct $name {
            /// The leading fields.
            pub(crate) base: $base,
            $($(#[$fmeta])* pub(crate) $field: $ty,)*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { base: $base::default(), $($field: <$ty as $crate::gpu::runtime::params::Field>::ZERO),* }
            }
        }

        #[allow(dead_code)]
        impl $name {
            /// Words the struct packs into.
            pub(crate) const WORDS: usize = $base::WORDS $(+ <$ty as $crate::gpu::runtime::params::Field>::WORDS)*;

            /// The packed words: the base's, then the fields in declaration order.
            pub(crate) fn words(&self) -> [u32; $name::WORDS] {
                let mut out = [0u32; $name::WORDS];
                out[..$base::WORDS].copy_from_slice(&self.base.words());
                let mut at = $base::WORDS;
                $(
                    $crate::gpu::runtime::params::Field::put(&self.$field, &mut out[at..]);
                    at += <$ty as $crate::gpu::runtime::params::Field>::WORDS;
                )*
                debug_assert_eq!(at, $name::WORDS);
                out
            }

            /// The fields as (name, WGSL type), the base's first.
            pub(crate) fn fields() -> Vec<(&'static str, String)> {
                let mut out = $base::fields();
                out.extend([$((stringify!($field), <$ty as $crate::gpu::runtime::params::Field>::wgsl_type())),*]);
                out
            }

            /// The WGSL struct and its binding as `p`.
            pub(crate) fn wgsl() -> String {
                $crate::gpu::runtime::params::declaration(stringify!($name), &$name::fields())
            }
        }

        const _: () = assert!($name::WORDS <= $crate::gpu::runtime::kernels::PARAM_WORDS);
    };
    ($(#[$meta:meta])* $vis:vis struct $name:ident { $($(#[$fmeta:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq)]
        $vis struct $name {
            $($(#[$fmeta])* pub(crate) $field: $ty,)*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $($field: <$ty as $crate::gpu::runtime::params::Field>::ZERO),* }
            }
        }

        #[allow(dead_code)]
        impl $name {
            /// Words the struct packs into.
            pub(crate) const WORDS: usize = 0 $(+ <$ty as $crate::gpu::runtime::params::Field>::WORDS)*;

            /// The packed words, fields in declaration order.
            pub(crate) fn words(&self) -> [u32; $name::WORDS] {
                let mut out = [0u32; $name::WORDS];
                let mut at = 0;
                $(
                    $crate::gpu::runtime::params::Field::put(&self.$field, &mut out[at..]);
                    at += <$ty as $crate::gpu::runtime::params::Field>::WORDS;
                )*
                debug_assert_eq!(at, $name::WORDS);
                out
            }

            /// The fields as (name, WGSL type), in declaration order.
            pub(crate) fn fields() -> Vec<(&'static str, String)> {
                vec![$((stringify!($field), <$ty as $crate::gpu::runtime::params::Field>::wgsl_type())),*]
            }

            /// The WGSL struct and its binding as `p`.
            pub(crate) fn wgsl() -> String {
                $crate::gpu::runtime::params::declaration(stringify!($name), &$name::fields())
            }

            /// The struct, its declaration and its words as one value.
            pub(crate) fn block(&self) -> $crate::gpu::runtime::params::Block {
                $crate::gpu::runtime::params::Block {
                    name: stringify!($name),
                    decl: $crate::gpu::runtime::params::struct_wgsl(stringify!($name), &$name::fields()),
                    words: self.words().to_vec(),
                }
            }
        }

        const _: () = assert!($name::WORDS <= $crate::gpu::runtime::kernels::PARAM_WORDS);
    };
}
pub(crate) use params;

#[cfg(test)]
mod tests {
    params! {
        struct Sample { m: u32, shift: i32, eps: f32, dims: [u32; 3], last: u32 }
    }

    #[test]
    fn packs_in_declaration_order() {
        let s = Sample { m: 7, shift: -2, eps: 0.5, dims: [1, 2, 3], last: 9 };
        assert_eq!(Sample::WORDS, 7);
        assert_eq!(s.words(), [7, (-2i32) as u32, 0.5f32.to_bits(), 1, 2, 3, 9]);
    }

    params! {
        struct Extended: Sample { extra: f32 }
    }

    #[test]
    fn an_extension_packs_and_declares_its_base_first() {
        let base = Sample { m: 7, shift: -2, eps: 0.5, dims: [1, 2, 3], last: 9 };
        let e = Extended { base, extra: 2.0 };
        assert_eq!(Extended::WORDS, 8);
        assert_eq!(e.words()[..7], base.words());
        assert_eq!(e.words()[7], 2.0f32.to_bits());
        assert!(Extended::wgsl().starts_with("struct Extended {\n    m: u32,\n"));
        assert!(Extended::wgsl().contains("    last: u32,\n    extra: f32,\n}\n"));
    }

    #[test]
    fn declares_the_same_fields() {
        let w = Sample::wgsl();
        let expect = "struct Sample {\n    m: u32,\n    shift: i32,\n    eps: f32,\n    dims: array<u32, 3>,\n    last: u32,\n}\n\
                      @group(1) @binding(0) var<storage, read> p: Sample;\n";
        assert_eq!(w, expect);
        // The declaration is valid WGSL and a kernel reading its fields compiles.
        let src = format!("{w}@group(0) @binding(0) var<storage, read_write> o: array<u32>;\n\
             @compute @workgroup_size(1) fn main() {{ o[0] = p.m + bitcast<u32>(p.shift) + u32(p.eps) + p.dims[2] + p.last; }}");
        naga::front::wgsl::parse_str(&src).expect("parameter struct parses");
    }
}
