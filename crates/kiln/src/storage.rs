//! `Storage`: one variant per backend. Every op is one `match` that forwards to the backend, and
//! storages on different backends give an error naming the op. The extension ops ([`ExtOps`])
//! forward through [`Backend`], which picks each operand's storage of one backend.

use crate::backend::{BackendStorage, ExtOps, Paged, Prologue, RopeAppend, Rotary, View};
use crate::cpu::alloc::guard;
use crate::cpu::CpuStorage;
use crate::fusion::plan::Group;
use crate::gpu::GpuStorage;
use crate::op::{AttentionParams, BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::quant::QuantType;
use crate::{DType, Error, Layout, Result};

#[derive(Debug)]
pub enum Storage {
    Cpu(CpuStorage),
    Gpu(GpuStorage),
}

fn mixed(op: &'static str) -> Error {
    Error::DeviceMismatch { op, lhs: "cpu".into(), rhs: "gpu".into() }
}

/// Forwards a method of one storage.
/// CPU arms run inside `alloc::guard`, so a kernel's failed allocation is an `Err` naming the op.
macro_rules! one {
    ($op:expr, $self:ident, $s:ident => $e:expr) => {
        match $self {
            Storage::Cpu($s) => Ok(Storage::Cpu(guard($op, || $e)?)),
            Storage::Gpu($s) => Ok(Storage::Gpu($e?)),
        }
    };
}

/// Forwards a method of two storages of one backend.
macro_rules! two {
    ($op:expr, $a:expr, $b:expr, ($x:ident, $y:ident) => $e:expr) => {
        match ($a, $b) {
            (Storage::Cpu($x), Storage::Cpu($y)) => Ok(Storage::Cpu(guard($op, || $e)?)),
            (Storage::Gpu($x), Storage::Gpu($y)) => Ok(Storage::Gpu($e?)),
            _ => Err(mixed($op)),
        }
    };
}

/// Forwards a method of three storages of one backend.
macro_rules! three {
    ($op:expr, $a:expr, $b:expr, $c:expr, ($x:ident, $y:ident, $z:ident) => $e:expr) => {
        match ($a, $b, $c) {
            (Storage::Cpu($x), Storage::Cpu($y), Storage::Cpu($z)) => Ok(Storage::Cpu(guard($op, || $e)?)),
            (Storage::Gpu($x), Storage::Gpu($y), Storage::Gpu($z)) => Ok(Storage::Gpu($e?)),
            _ => Err(mixed($op)),
        }
    };
}

impl Storage {
    /// The GPU storage, or `None` on another backend (the probes of `gpu_probes.rs` call GPU kernels
    /// directly; every other op goes through the backend seam).
    pub(crate) fn as_gpu(&self) -> Option<&GpuStorage> {
        match self {
            Storage::Gpu(g) => Some(g),
            Storage::Cpu(_) => None,
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            Storage::Cpu(s) => s.dtype(),
            Storage::Gpu(s) => s.dtype(),
        }
    }

    pub fn to_cpu(&self, l: &Layout) -> Result<CpuStorage> {
        match self {
            Storage::Cpu(s) => guard("to_cpu", || s.to_cpu(l)),
            Storage::Gpu(s) => s.to_cpu(l),
        }
    }

    pub fn unary(&self, l: &Layout, op: UnaryOp) -> Result<Storage> {
        one!(op.name(), self, s => s.unary(l, op))
    }

    pub fn binary(&self, l: &Layout, rhs: &Storage, rl: &Layout, op: BinaryOp) -> Result<Storage> {
        two!(op.name(), self, rhs, (a, b) => a.binary(l, b, rl, op))
    }

    pub fn signbit(&self, l: &Layout) -> Result<Storage> {
        one!("signbit", self, s => s.signbit(l))
    }

    pub fn cmp(&self, l: &Layout, rhs: &Storage, rl: &Layout, op: CmpOp) -> Result<Storage> {
        two!(op.name(), self, rhs, (a, b) => a.cmp(l, b, rl, op))
    }

    pub fn where_cond(&self, l: &Layout, t: &Storage, tl: &Layout, f: &Storage, fl: &Layout) -> Result<Storage> {
        three!("where", self, t, f, (c, t, f) => c.where_cond(l, t, tl, f, fl))
    }

    pub fn cast(&self, l: &Layout, dtype: DType) -> Result<Storage> {
        one!("cast", self, s => s.cast(l, dtype))
    }

    pub fn copy_contiguous(&self, l: &Layout) -> Result<Storage> {
        one!("contiguous", self, s => s.copy_contiguous(l))
    }

    pub fn copy_into(&self, l: &Layout, dst: &mut Storage, dst_l: &Layout) -> Result<()> {
        match (self, dst) {
            (Storage::Cpu(s), Storage::Cpu(d)) => s.copy_into(l, d, dst_l),
            (Storage::Gpu(s), Storage::Gpu(d)) => s.copy_into(l, d, dst_l),
            _ => Err(mixed("copy_into")),
        }
    }

    pub fn reduce(&self, l: &Layout, op: ReduceOp, axes: &[usize]) -> Result<Storage> {
        one!(op.name(), self, s => s.reduce(l, op, axes))
    }

    pub fn cumsum(&self, l: &Layout, axis: usize) -> Result<Storage> {
        one!("cumsum", self, s => s.cumsum(l, axis))
    }

    pub fn matmul(&self, l: &Layout, rhs: &Storage, rl: &Layout) -> Result<Storage> {
        two!("matmul", self, rhs, (a, b) => a.matmul(l, b, rl))
    }

    pub fn softmax_last(&self, l: &Layout, log: bool) -> Result<Storage> {
        one!(if log { "log_softmax" } else { "softmax" }, self, s => s.softmax_last(l, log))
    }

    pub fn rms_norm(&self, l: &Layout, w: &Storage, wl: &Layout, eps: f64) -> Result<Storage> {
        two!("rms_norm", self, w, (x, w) => x.rms_norm(l, w, wl, eps))
    }

    pub fn layer_norm(
        &self,
        l: &Layout,
        w: &Storage,
        wl: &Layout,
        b: Option<(&Storage, &Layout)>,
        eps: f64,
    ) -> Result<Storage> {
        match (self, w, b) {
            (Storage::Cpu(x), Storage::Cpu(w), None) => {
                Ok(Storage::Cpu(guard("layer_norm", || x.layer_norm(l, w, wl, None, eps))?))
            }
            (Storage::Cpu(x), Storage::Cpu(w), Some((Storage::Cpu(b), bl))) => {
                Ok(Storage::Cpu(guard("layer_norm", || x.layer_norm(l, w, wl, Some((b, bl)), eps))?))
            }
            (Storage::Gpu(x), Storage::Gpu(w), None) => Ok(Storage::Gpu(x.layer_norm(l, w, wl, None, eps)?)),
            (Storage::Gpu(x), Storage::Gpu(w), Some((Storage::Gpu(b), bl))) => {
                Ok(Storage::Gpu(x.layer_norm(l, w, wl, Some((b, bl)), eps)?))
            }
            _ => Err(mixed("layer_norm")),
        }
    }

    pub fn rope(
        &self,
        l: &Layout,
        cos: &Storage,
        cl: &Layout,
        sin: &Storage,
        sl: &Layout,
        interleaved: bool,
    ) -> Result<Storage> {
        three!("rope", self, cos, sin, (x, c, s) => x.rope(l, c, cl, s, sl, interleaved))
    }

    pub fn attention(
        &self,
        l: &Layout,
        k: &Storage,
        kl: &Layout,
        v: &Storage,
        vl: &Layout,
        p: AttentionParams,
    ) -> Result<Storage> {
        three!("attention", self, k, v, (q, k, v) => q.attention(l, k, kl, v, vl, p))
    }

    pub fn silu_mul(&self, l: &Layout, up: &Storage, ul: &Layout) -> Result<Storage> {
        two!("silu_mul", self, up, (g, u) => g.silu_mul(l, u, ul))
    }

    pub fn index_select(&self, l: &Layout, ids: &Storage, il: &Layout, axis: usize) -> Result<Storage> {
        two!("index_select", self, ids, (s, i) => s.index_select(l, i, il, axis))
    }

    pub fn gather(&self, l: &Layout, ids: &Storage, il: &Layout, axis: usize) -> Result<Storage> {
        two!("gather", self, ids, (s, i) => s.gather(l, i, il, axis))
    }

    /// The address of the first element when the storage is in host memory.
    pub(crate) fn host_ptr(&self) -> Option<*const u8> {
        match self {
            Storage::Cpu(s) => Some(crate::cpu::with_vec!(s, v => v.as_ptr().cast::<u8>())),
            Storage::Gpu(_) => None,
        }
    }

    pub(crate) fn linear_fused(
        &self,
        l: &Layout,
        w: View<Storage>,
        pro: &Prologue<Storage>,
        residual: Option<View<Storage>>,
    ) -> Result<Option<Storage>> {
        fn on<B: Backend>(
            x: &B,
            l: &Layout,
            w: View<Storage>,
            pro: &Prologue<Storage>,
            r: Option<View<Storage>>,
        ) -> Result<Option<Storage>> {
            const OP: &str = "linear_fused";
            let (w, pro, r) = (B::view(OP, w)?, B::prologue(OP, pro)?, r.map(|r| B::view(OP, r)).transpose()?);
            Ok(B::run(OP, || x.linear_fused(l, w, &pro, r))?.map(B::wrap))
        }
        match self {
            Storage::Cpu(x) => on(x, l, w, pro, residual),
            Storage::Gpu(x) => on(x, l, w, pro, residual),
        }
    }

    pub(crate) fn dequantize(&self, qt: QuantType, blocks: usize, dtype: DType) -> Result<Storage> {
        one!("dequantize", self, s => s.dequantize(qt, blocks, dtype))
    }

    pub(crate) fn qmatmul(
        &self,
        l: &Layout,
        w: &Storage,
        qt: QuantType,
        (n, k): (usize, usize),
        add: Option<(View<Storage>, usize)>,
    ) -> Result<(Storage, bool)> {
        fn on<B: Backend>(
            x: &B,
            l: &Layout,
            w: &Storage,
            qt: QuantType,
            (n, k): (usize, usize),
            add: Option<(View<Storage>, usize)>,
        ) -> Result<(Storage, bool)> {
            const OP: &str = "qlinear";
            let w = B::pick(OP, w)?;
            let add = add.map(|(a, stride)| Ok::<_, Error>((B::view(OP, a)?, stride))).transpose()?;
            let (y, added) = B::run(OP, || x.qmatmul(l, w, qt, n, k, add))?;
            Ok((B::wrap(y), added))
        }
        match self {
            Storage::Cpu(x) => on(x, l, w, qt, (n, k), add),
            Storage::Gpu(x) => on(x, l, w, qt, (n, k), add),
        }
    }

    pub(crate) fn qmatmul_fused(
        &self,
        l: &Layout,
        w: &Storage,
        qt: QuantType,
        (n, k): (usize, usize),
        pro: &Prologue<Storage>,
        residual: Option<View<Storage>>,
    ) -> Result<Option<Storage>> {
        fn on<B: Backend>(
            x: &B,
            l: &Layout,
            w: &Storage,
            qt: QuantType,
            (n, k): (usize, usize),
            pro: &Prologue<Storage>,
            r: Option<View<Storage>>,
        ) -> Result<Option<Storage>> {
            const OP: &str = "qlinear_fused";
            let (w, pro, r) = (B::pick(OP, w)?, B::prologue(OP, pro)?, r.map(|r| B::view(OP, r)).transpose()?);
            Ok(B::run(OP, || x.qmatmul_fused(l, w, qt, n, k, &pro, r))?.map(B::wrap))
        }
        match self {
            Storage::Cpu(x) => on(x, l, w, qt, (n, k), pro, residual),
            Storage::Gpu(x) => on(x, l, w, qt, (n, k), pro, residual),
        }
    }

    pub(crate) fn qmatmul_fused_cat(
        &self,
        l: &Layout,
        ws: &[(&Storage, QuantType, usize)],
        k: usize,
        pro: &Prologue<Storage>,
    ) -> Result<Option<Storage>> {
        fn on<B: Backend>(
            x: &B,
            l: &Layout,
            ws: &[(&Storage, QuantType, usize)],
            k: usize,
            pro: &Prologue<Storage>,
        ) -> Result<Option<Storage>> {
            const OP: &str = "qlinear_fused_cat";
            let ws = ws.iter().map(|&(w, qt, n)| Ok((B::pick(OP, w)?, qt, n))).collect::<Result<Vec<_>>>()?;
            let pro = B::prologue(OP, pro)?;
            Ok(B::run(OP, || x.qmatmul_fused_cat(l, &ws, k, &pro))?.map(B::wrap))
        }
        match self {
            Storage::Cpu(x) => on(x, l, ws, k, pro),
            Storage::Gpu(x) => on(x, l, ws, k, pro),
        }
    }

    pub(crate) fn sdpa_paged(
        &self,
        l: &Layout,
        k: View<Storage>,
        v: View<Storage>,
        t: &Paged<Storage>,
    ) -> Result<Storage> {
        fn on<B: Backend>(
            q: &B,
            l: &Layout,
            k: View<Storage>,
            v: View<Storage>,
            t: &Paged<Storage>,
        ) -> Result<Storage> {
            const OP: &str = "sdpa_paged";
            let t = Paged {
                table: B::pick(OP, t.table)?,
                lens: B::pick(OP, t.lens)?,
                host_lens: t.host_lens,
                max_blocks: t.max_blocks,
                block_size: t.block_size,
                scale: t.scale,
                softcap: t.softcap,
                window: t.window,
            };
            let (k, v) = (B::view(OP, k)?, B::view(OP, v)?);
            Ok(B::wrap(B::run(OP, || q.sdpa_paged(l, k, v, &t))?))
        }
        match self {
            Storage::Cpu(q) => on(q, l, k, v, t),
            Storage::Gpu(q) => on(q, l, k, v, t),
        }
    }

    /// [`ExtOps::paged_write`]; `self` is the key pool.
    pub(crate) fn paged_write(
        &mut self,
        kpl: &Layout,
        v_pool: (&mut Storage, &Layout),
        k: View<Storage>,
        v: View<Storage>,
        slots: &Storage,
    ) -> Result<bool> {
        fn on<B: Backend>(
            kp: (&mut B, &Layout),
            vp: (&mut Storage, &Layout),
            k: View<Storage>,
            v: View<Storage>,
            slots: &Storage,
        ) -> Result<bool> {
            const OP: &str = "kv_block_pool";
            let vp = (B::pick_mut(OP, vp.0)?, vp.1);
            let (k, v, slots) = (B::view(OP, k)?, B::view(OP, v)?, B::pick(OP, slots)?);
            B::run(OP, || B::paged_write(kp, vp, k, v, slots))
        }
        match self {
            Storage::Cpu(p) => on((p, kpl), v_pool, k, v, slots),
            Storage::Gpu(p) => on((p, kpl), v_pool, k, v, slots),
        }
    }

    /// [`ExtOps::rope_append`]; `self` is the key cache.
    pub(crate) fn rope_append(
        &mut self,
        kcl: &Layout,
        v_cache: (&mut Storage, &Layout),
        a: &RopeAppend<Storage>,
    ) -> Result<Option<Storage>> {
        fn on<B: Backend>(
            kc: (&mut B, &Layout),
            vc: (&mut Storage, &Layout),
            a: &RopeAppend<Storage>,
        ) -> Result<Option<Storage>> {
            const OP: &str = "kv_cache_append_rope";
            let vc = (B::pick_mut(OP, vc.0)?, vc.1);
            let a = RopeAppend { qkv: B::view(OP, a.qkv)?, rot: B::rotary(OP, &a.rot)? };
            Ok(B::run(OP, || B::rope_append(&a, kc, vc))?.map(B::wrap))
        }
        match self {
            Storage::Cpu(c) => on((c, kcl), v_cache, a),
            Storage::Gpu(c) => on((c, kcl), v_cache, a),
        }
    }

    /// [`ExtOps::qmatmul_rope_append`]; `self` is x.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn qmatmul_rope_append(
        &self,
        l: &Layout,
        ws: &[(&Storage, QuantType, usize)],
        k: usize,
        pro: &Prologue<Storage>,
        rot: &Rotary<Storage>,
        k_cache: (&mut Storage, &Layout),
        v_cache: (&mut Storage, &Layout),
    ) -> Result<Option<Storage>> {
        #[allow(clippy::too_many_arguments)]
        fn on<B: Backend>(
            x: &B,
            l: &Layout,
            ws: &[(&Storage, QuantType, usize)],
            k: usize,
            pro: &Prologue<Storage>,
            rot: &Rotary<Storage>,
            kc: (&mut Storage, &Layout),
            vc: (&mut Storage, &Layout),
        ) -> Result<Option<Storage>> {
            const OP: &str = "kv_cache_qlinear_append_rope";
            let ws = ws.iter().map(|&(w, qt, n)| Ok((B::pick(OP, w)?, qt, n))).collect::<Result<Vec<_>>>()?;
            let (pro, rot) = (B::prologue(OP, pro)?, B::rotary(OP, rot)?);
            let (kc, vc) = ((B::pick_mut(OP, kc.0)?, kc.1), (B::pick_mut(OP, vc.0)?, vc.1));
            Ok(B::run(OP, || x.qmatmul_rope_append(l, &ws, k, &pro, &rot, kc, vc))?.map(B::wrap))
        }
        match self {
            Storage::Cpu(x) => on(x, l, ws, k, pro, rot, k_cache, v_cache),
            Storage::Gpu(x) => on(x, l, ws, k, pro, rot, k_cache, v_cache),
        }
    }

    /// [`ExtOps::fused`] over `leaves` (at least one), all of one backend.
    pub(crate) fn fused(group: &Group, leaves: &[View<Storage>]) -> Result<Option<Vec<Storage>>> {
        fn on<B: Backend>(group: &Group, leaves: &[View<Storage>]) -> Result<Option<Vec<Storage>>> {
            const OP: &str = "compile";
            let leaves = leaves.iter().map(|&l| B::view(OP, l)).collect::<Result<Vec<_>>>()?;
            Ok(B::run(OP, || B::fused(group, &leaves))?.map(|v| v.into_iter().map(B::wrap).collect()))
        }
        match leaves.first().map(|l| l.0) {
            Some(Storage::Cpu(_)) => on::<CpuStorage>(group, leaves),
            Some(Storage::Gpu(_)) => on::<GpuStorage>(group, leaves),
            None => Ok(None),
        }
    }
}

/// A backend's storage as `Storage` sees it when it forwards an extension op: picking the
/// operands of one backend out of `Storage` (another backend's is an error naming the op),
/// wrapping results, and running the op (CPU ops inside `alloc::guard`).
trait Backend: ExtOps {
    fn pick<'a>(op: &'static str, s: &'a Storage) -> Result<&'a Self>;
    fn pick_mut<'a>(op: &'static str, s: &'a mut Storage) -> Result<&'a mut Self>;
    fn wrap(self) -> Storage;
    fn run<R>(op: &'static str, f: impl FnOnce() -> Result<R>) -> Result<R>;

    fn view<'a>(op: &'static str, (s, l): View<'a, Storage>) -> Result<View<'a, Self>> {
        Ok((Self::pick(op, s)?, l))
    }

    fn rotary<'a>(op: &'static str, r: &Rotary<'a, Storage>) -> Result<Rotary<'a, Self>> {
        let (nh, nkv, d, pos, max_len) = (r.nh, r.nkv, r.d, r.pos, r.max_len);
        Ok(Rotary { cos: Self::view(op, r.cos)?, sin: Self::view(op, r.sin)?, nh, nkv, d, pos, max_len })
    }

    fn prologue<'a>(op: &'static str, p: &Prologue<'a, Storage>) -> Result<Prologue<'a, Self>> {
        Ok(match *p {
            Prologue::Plain => Prologue::Plain,
            Prologue::RmsNorm(w, eps) => Prologue::RmsNorm(Self::view(op, w)?, eps),
            Prologue::SiluMul => Prologue::SiluMul,
        })
    }
}

impl Backend for CpuStorage {
    fn pick<'a>(op: &'static str, s: &'a Storage) -> Result<&'a Self> {
        match s {
            Storage::Cpu(s) => Ok(s),
            _ => Err(Error::DeviceMismatch { op, lhs: "cpu".into(), rhs: "gpu".into() }),
        }
    }
    fn pick_mut<'a>(op: &'static str, s: &'a mut Storage) -> Result<&'a mut Self> {
        match s {
            Storage::Cpu(s) => Ok(s),
            _ => Err(Error::DeviceMismatch { op, lhs: "cpu".into(), rhs: "gpu".into() }),
        }
    }
    fn wrap(self) -> Storage {
        Storage::Cpu(self)
    }
    fn run<R>(op: &'static str, f: impl FnOnce() -> Result<R>) -> Result<R> {
        guard(op, f)
    }
}

impl Backend for GpuStorage {
    fn pick<'a>(op: &'static str, s: &'a Storage) -> Result<&'a Self> {
        match s {
            Storage::Gpu(s) => Ok(s),
            _ => Err(Error::DeviceMismatch { op, lhs: "gpu".into(), rhs: "cpu".into() }),
        }
    }
    fn pick_mut<'a>(op: &'static str, s: &'a mut Storage) -> Result<&'a mut Self> {
        match s {
            Storage::Gpu(s) => Ok(s),
            _ => Err(Error::DeviceMismatch { op, lhs: "gpu".into(), rhs: "cpu".into() }),
        }
    }
    fn wrap(self) -> Storage {
        Storage::Gpu(self)
    }
    fn run<R>(_op: &'static str, f: impl FnOnce() -> Result<R>) -> Result<R> {
        f()
    }
}
