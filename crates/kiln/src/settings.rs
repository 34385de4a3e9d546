//! kiln's environment settings, in one place: every `KILN_*` variable, with its default and what it
//! changes. The library reads its own through these constants (`settings::GPU_TIMEOUT.get()`), so
//! a setting cannot be read without being listed here. The other crates' settings (`kiln-cli`,
//! `kiln-serve`, `kiln-llm`) and those of the tests, CI and tools are listed too, each with the
//! place that reads it. docs/SETTINGS.md is the same table for readers; a test keeps the two equal.
//!
//! Most settings are read once, on first use, and kept for the life of the process.

use std::env::VarError;
use std::ffi::OsString;

/// One environment setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The variable's name, `KILN_...`.
    pub name: &'static str,
    /// Its value when unset, in words.
    pub default: &'static str,
    /// What it changes.
    pub effect: &'static str,
    /// Who reads it: `kiln`, another crate (`kiln-llm`, ...), or `tests` (tests, CI and tools).
    pub reader: &'static str,
}

impl Setting {
    /// The value as `std::env::var` gives it: `Err` when unset or not Unicode.
    pub fn get(&self) -> Result<String, VarError> {
        std::env::var(self.name)
    }

    /// The value as `std::env::var_os` gives it (paths).
    pub fn get_os(&self) -> Option<OsString> {
        std::env::var_os(self.name)
    }

    /// Whether the setting is `1` (a switch that is off unless set).
    pub fn is_one(&self) -> bool {
        self.get().is_ok_and(|v| v == "1")
    }

    /// Whether the setting is anything but `0` (a switch that is on unless set to 0).
    pub fn is_not_zero(&self) -> bool {
        self.get().map_or(true, |v| v != "0")
    }
}

macro_rules! settings {
    ($($(#[doc = $doc:literal])* $id:ident = $name:literal, $reader:literal, default $default:literal, $effect:literal;)*) => {
        $(
            $(#[doc = $doc])*
            pub const $id: Setting = Setting { name: $name, default: $default, effect: $effect, reader: $reader };
        )*
        /// Every setting, in the order of docs/SETTINGS.md.
        pub const ALL: &[Setting] = &[$($id),*];
    };
}

settings! {
    // Devices and memory.
    DEVICE = "KILN_DEVICE", "kiln", default "auto",
        "The device `Device::from_env` (and every `kiln` command without `--device`) opens: `cpu`, `gpu`, `gpu:N` or `auto` (the first GPU, else the CPU). Anything else is an error.";
    HOST_ALLOC_LIMIT = "KILN_HOST_ALLOC_LIMIT", "kiln", default "the machine's memory",
        "The largest host allocation in bytes; a larger one is `Error::HostOutOfMemory` before the allocator is asked. 0 or unparsable: the default.";
    GPU_CACHE_LIMIT = "KILN_GPU_CACHE_LIMIT", "kiln", default "4294967296 (4 GiB)",
        "Bytes of freed GPU buffers the pool keeps for reuse.";
    GPU_TIMEOUT = "KILN_GPU_TIMEOUT", "kiln", default "600",
        "Seconds a wait for the GPU (readback, synchronize) may take before the device is declared lost.";
    GPU_POISON = "KILN_GPU_POISON", "kiln", default "0",
        "1: fresh GPU buffers are filled with a value the ops do not produce (NaN, 0xDEADBEEF), so a kernel that leaves outputs unwritten shows.";
    // Diagnostics.
    PROFILE = "KILN_PROFILE", "kiln", default "0",
        "1: the GPU profiler records each kernel's time (`Device::profile`).";
    DUMP_WGSL = "KILN_DUMP_WGSL", "kiln", default "unset",
        "A folder: every kernel compiled is also written there as WGSL text, one file per kernel.";
    SHADER_CHECKS = "KILN_SHADER_CHECKS", "kiln", default "0",
        "1: kiln's kernels keep wgpu's runtime bounds checks (slower).";
    // Autotuning.
    AUTOTUNE = "KILN_AUTOTUNE", "kiln", default "0",
        "1: GPU ops time their kernel variants once per shape and keep the fastest (`Device::set_autotune` overrides it per device).";
    CACHE_DIR = "KILN_CACHE_DIR", "kiln", default "~/.cache/kiln",
        "The folder of the autotune cache (`autotune-v1.json`); the real-model tests and CI also download the test model there.";
    // Kernel choices, for A/B runs.
    EW_VEC = "KILN_EW_VEC", "kiln", default "1",
        "0: elementwise ops never take the vectorised kernels.";
    SKINNY_ROWS = "KILN_SKINNY_ROWS", "kiln", default "16",
        "The largest row block of the skinny (few-row) matmul: 1, 2, 4, 8 or 16.";
    SKINNY_WIDE = "KILN_SKINNY_WIDE", "kiln", default "1",
        "0: the skinny matmul never takes its wide-k shape.";
    MATMUL_TILE = "KILN_MATMUL_TILE", "kiln", default "by shape",
        "The tile of the register-blocked (CUDA-core) matmul where it runs: `128x128`, `128x128k8`, `128x64`, `64x64`, `64x64t4` or `32x32`, if the adapter fits it; anything else chooses by shape.";
    COOP = "KILN_COOP", "kiln", default "1",
        "0: matmuls never take the cooperative-matrix kernels.";
    COOP_STAGE = "KILN_COOP_STAGE", "kiln", default "h4",
        "The staging of the cooperative matmul on Vulkan: `h1` or `h4`.";
    COOP_SPLIT = "KILN_COOP_SPLIT", "kiln", default "1",
        "0: the cooperative matmul never splits K over workgroups (it does where the tiles alone make too few).";
    COOP_TILE = "KILN_COOP_TILE", "kiln", default "auto",
        "The cooperative matmul's tile: `large`, `wide` or `small`; anything else chooses by shape.";
    COOP_ATTN = "KILN_COOP_ATTN", "kiln", default "1",
        "0: prefill attention keeps to the plain flash kernel where the cooperative-matrix one applies.";
    COOP_ATTN_SHAPE = "KILN_COOP_ATTN_SHAPE", "kiln", default "by head size",
        "The cooperative flash kernel's `subgroups,keys,lanes` per workgroup, key tile and query row (e.g. `4,32,2`), where it fits.";
    COOP_ATTN_ABLATE = "KILN_COOP_ATTN_ABLATE", "kiln", default "none",
        "Leaves a part of the cooperative flash kernel out, to time the rest (wrong results): `stage`, `scores`, `softmax` or `pv`.";
    DECODE_SPLIT = "KILN_DECODE_SPLIT", "kiln", default "by context length",
        "Keys per split of decode attention: at least this (and 16) on the two-dispatch path, exactly this (rounded up to the keys per loop iteration) on the folded one.";
    DECODE_SG = "KILN_DECODE_SG", "kiln", default "1",
        "0: decode attention sums partial dot products without subgroup shuffles.";
    DECODE_UNROLL = "KILN_DECODE_UNROLL", "kiln", default "1",
        "Steps of 16 keys per iteration of the decode attention kernel: 1, 2 or 4.";
    DECODE_FOLD = "KILN_DECODE_FOLD", "kiln", default "1",
        "0: decode attention merges its key splits in a second dispatch (the combine kernel); else, on Vulkan, the last split workgroup of each row chunk merges them in the same dispatch.";
    DECODE_GROUPS = "KILN_DECODE_GROUPS", "kiln", default "256",
        "Workgroups the folded decode attention's key split aims for (at least 32 keys, at most 64 splits per row chunk).";
    DECODE_ABLATE = "KILN_DECODE_ABLATE", "kiln", default "none",
        "Leaves a part of the `slots` decode attention kernel out, to time the rest (wrong results): `empty` (every workgroup returns at once), `loop` (the key loop) or `fold` (the last split workgroup's merge).";
    DECODE_KERNEL = "KILN_DECODE_KERNEL", "kiln", default "short",
        "The decode attention kernel: `slots` (16 key slots of 8 lanes, everywhere), `lanes` (a lane owns whole keys, then value columns; subgroups, granular keys and values and its head sizes needed), `tile` (lane groups read whole f16/bf16 key rows in 16-byte words, short code; subgroups, keys and values in 8-element granules and equal head sizes, a multiple of 8, needed) or `short` (one query row over at most 1024 keys: a workgroup a query head reads every key row at once, then every value row, and writes the final row, with no key split; f16/bf16 with subgroups, equal head sizes, a multiple of 8, up to 256; `tile` elsewhere); `slots` runs where the chosen one does not apply. `tile` and `short` also pick the paged decode kernel of batched steps (`paged_tile.wgsl`), `slots` and `lanes` the slot one.";
    DECODE_WG = "KILN_DECODE_WG", "kiln", default "128 (`tile`), 512 (`short`)",
        "Invocations per workgroup of the `tile` and `short` decode attention kernels: a power of two from 64 to 1024, within the adapter's limit.";
    DECODE_VTOUCH = "KILN_DECODE_VTOUCH", "kiln", default "1",
        "0: the `short` decode attention kernel does not request a word of each of its first value rows at the start (it requests them after the scores).";
    DECODE_LPK = "KILN_DECODE_LPK", "kiln", default "by context length",
        "Lanes to a key row of the `tile` decode attention kernels (a power of two from 4 to 32, each lane taking at most four 16-byte words of the row): fewer lanes a row sum a key's dot products in fewer shuffles, more lane groups merge at the end. By default the most lanes (a word each, within the subgroup), half of them (two words each) from 8192 keys on.";
    LINE_MAXIMA = "KILN_LINE_MAXIMA", "kiln", default "scaled",
        "How bf16 cooperative products find their operands' line maxima: `scaled` (K-contiguous lines reduced a workgroup each, one dispatch, which also writes A scaled to f16 so that the product converts only B), `whole` (the same without the scaled A) or `blocks` (blocks maxed atomically into a zeroed buffer, two dispatches, as before).";
    QMV_C = "KILN_QMV_C", "kiln", default "by shape",
        "Weight rows per set of the quantized matvec (a power of two).";
    QMV_LN = "KILN_QMV_LN", "kiln", default "by shape",
        "Lanes per set of the quantized matvec (a power of two).";
    QMV_SG = "KILN_QMV_SG", "kiln", default "1",
        "0: the quantized matvec sums without subgroupAdd.";
    QMV_I8 = "KILN_QMV_I8", "kiln", default "1",
        "0: quantized matvecs of Q8_0, Q4_0, Q4_K and Q6_K dequantise to f32 instead of taking integer dot products.";
    QMV_GRID = "KILN_QMV_GRID", "kiln", default "264",
        "Workgroups of the streamed integer-dot matvec (each makes x's runs once, then its lane sets walk the weight rows); 0: the one-pass kernel, a workgroup per group of rows (the streamed one needs subgroups of one fixed size).";
    QMV_STREAM = "KILN_QMV_STREAM", "kiln", default "0",
        "Weight rows from which a one-row integer-dot matvec is streamed (`KILN_QMV_GRID`); 0: every one.";
    QMV_PREFETCH = "KILN_QMV_PREFETCH", "kiln", default "all formats but Q6_K and Q8_0",
        "1: the streamed integer-dot matvec requests each unit's words one step ahead in every format; 0: in none (a unit's words are requested when it is worked on).";
    QMV_ABLATE = "KILN_QMV_ABLATE", "kiln", default "none",
        "Leaves a part of the streamed integer-dot matvec out, to time the rest (wrong results): `arith` (a unit's words are only XORed together: the loads alone), `scales` (no scale decoding), `x` (no reads of x's runs from workgroup memory) or `prologue` (the workgroup makes no runs of x).";
    CPU_QUANT_SCALAR = "KILN_CPU_QUANT_SCALAR", "kiln", default "0",
        "1: the quantized CPU kernels take the portable scalar path instead of AVX2 or AVX-512.";
    CPU_NO_AVX512 = "KILN_CPU_NO_AVX512", "kiln", default "0",
        "1: the quantized CPU kernels take AVX2 on an AVX-512 machine.";
    // Other crates.
    FUSED_ROWS = "KILN_FUSED_ROWS", "kiln-llm", default "1",
        "Forward passes of at most this many rows (1-8) take the fused decode kernels.";
    QKV_ROPE = "KILN_QKV_ROPE", "kiln-llm", default "0",
        "1: a decode step's quantized q/k/v product rotates its row and appends k and v itself (`KvCache::qlinear_append_rope`) instead of a second kernel doing it (`rope_kv`): 32 dispatches fewer a token in an 8B model, yet on an H200, with each step recorded ahead, 7% fewer tokens/s with Q4_K_M (279 against 300) and 2% more with Q8_0 (docs/PERFORMANCE.md, the seventeenth session).";
    DECODE_AHEAD = "KILN_DECODE_AHEAD", "kiln-llm", default "1",
        "0: greedy decoding (`kiln generate`, `llm-bench`) reads each token before it records the next step, instead of recording the step first, fed by the token still on the device (for comparison: the host then waits between tokens).";
    LLM_MAX_TENSOR_BYTES = "KILN_LLM_MAX_TENSOR_BYTES", "kiln-llm", default "the adapter's limit",
        "Lowers the largest tensor the model loader puts on a GPU (to try a small GPU's path on a large one).";
    SERVE_PROFILE = "KILN_SERVE_PROFILE", "kiln-serve", default "unset",
        "`1`: a profile line on stderr whenever the batch drains; `sync`: also wait for the device after each forward pass; `steps`: as `sync`, and a line per step.";
    SERVE_API_KEY = "KILN_API_KEY", "kiln-serve", default "unset",
        "API key(s) `kiln serve` requires on /v1/* and /metrics, comma-separated (kept out of `ps`, unlike --api-key); set but empty is an error.";
    // Tests, CI and tools.
    REQUIRE_GPU = "KILN_REQUIRE_GPU", "tests", default "0",
        "1: a GPU test without a GPU adapter fails instead of skipping (CI sets it).";
    REQUIRE_COOP = "KILN_REQUIRE_COOP", "tests", default "0",
        "1: the cooperative-matrix tests fail instead of skipping where the GPU lacks them.";
    REQUIRE_REAL_MODEL = "KILN_REQUIRE_REAL_MODEL", "tests", default "0",
        "1: the real-model tests fail instead of skipping when the model or gguf-py is missing (under CI=true too, unless 0).";
    REQUIRE_NGINX = "KILN_REQUIRE_NGINX", "tests", default "0",
        "1: the replicas test fails instead of skipping when nginx is missing (CI sets it; CI=true does too).";
    SMOLLM2_GGUF = "KILN_SMOLLM2_GGUF", "tests", default "unset",
        "The SmolLM2 GGUF file of the real-model tests (else fetched into `KILN_CACHE_DIR`).";
    PROPTEST_SEED = "KILN_PROPTEST_SEED", "tests", default "random (fixed under CI=true)",
        "The seed of the conformance suite's property tests (views.rs), to replay a run; printed on failure.";
    TEST_DEVICES = "KILN_TEST_DEVICES", "tests", default "cpu",
        "The devices the server tests run on, comma-separated (`cpu,gpu`).";
    BIN = "KILN_BIN", "tests", default "target/debug/kiln",
        "The `kiln` binary the server tests start.";
    SERVE_VENV = "KILN_SERVE_VENV", "tests", default "$CARGO_TARGET_DIR/kiln-serve-venv",
        "The virtual environment of `crates/kiln-serve/ci.sh`.";
    PY_VENV = "KILN_PY_VENV", "tests", default "$CARGO_TARGET_DIR/kiln-py-venv",
        "The virtual environment of `crates/kiln-py/ci.sh`.";
    FUZZ_GPU = "KILN_FUZZ_GPU", "tests", default "both phases",
        "The fuzz target: 1 runs each program on the CPU and the GPU in lockstep; `fuzz/ci.sh`: 0 or 1 runs only that phase.";
    FUZZ_MODE = "KILN_FUZZ_MODE", "tests", default "nonfinite (fuzz/ci.sh)",
        "The fuzz target's inputs: `safe`, `nonfinite` (NaN and infinities) or `full` (also huge sizes).";
    SOAK_MODE = "KILN_SOAK_MODE", "tests", default "safe",
        "The soak test's inputs: `nonfinite` or `full`, as `KILN_FUZZ_MODE`.";
    SOAK_PROGRAMS = "KILN_SOAK_PROGRAMS", "tests", default "3000",
        "Programs the soak test runs.";
    SOAK_OPS = "KILN_SOAK_OPS", "tests", default "12000",
        "Ops the memory soak test runs.";
    THREAD_STEPS = "KILN_THREAD_STEPS", "tests", default "64",
        "Steps of the threaded memory test.";
    LONG_SUM = "KILN_LONG_SUM", "tests", default "4194304",
        "Elements of the long-sum accuracy test.";
    SWEEP_CASES = "KILN_SWEEP_CASES", "tests", default "all",
        "The cases `examples/coop_sweep.rs` runs, comma-separated.";
    SWEEP_DTYPE = "KILN_SWEEP_DTYPE", "tests", default "f16",
        "`bf16`: `examples/coop_sweep.rs` runs bf16 operands.";
    DTYPES_1B = "KILN_DTYPES_1B", "tests", default "bf16 f16",
        "The dtypes `bench/llm/run_nvidia.sh` runs the 1B model in.";
    DTYPES_8B = "KILN_DTYPES_8B", "tests", default "bf16",
        "The dtypes `bench/llm/run_nvidia.sh` runs the 8B model in.";
    QUANTS = "KILN_QUANTS", "tests", default "none q8_0 q4_k",
        "The quantizations `bench/llm/run_quant.sh` runs.";
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::path::Path;

    fn root() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().parent().unwrap()
    }

    /// The names in the first column of docs/SETTINGS.md's tables (`| \`KILN_X\` | ...`).
    fn doc_names() -> Vec<String> {
        let doc = std::fs::read_to_string(root().join("docs/SETTINGS.md")).unwrap();
        doc.lines()
            .filter_map(|l| l.strip_prefix("| `KILN_"))
            .map(|l| format!("KILN_{}", l.split('`').next().unwrap()))
            .collect()
    }

    /// docs/SETTINGS.md lists the same settings as [`ALL`], in the same order, with the same defaults.
    #[test]
    fn doc_table_matches_the_module() {
        let names: Vec<&str> = ALL.iter().map(|s| s.name).collect();
        assert_eq!(doc_names(), names, "docs/SETTINGS.md and settings::ALL differ");
        let doc = std::fs::read_to_string(root().join("docs/SETTINGS.md")).unwrap();
        for s in ALL {
            let row = doc.lines().find(|l| l.starts_with(&format!("| `{}` |", s.name))).unwrap();
            assert!(row.contains(&format!("| {} |", s.default)), "{}: default {:?} not in {row}", s.name, s.default);
        }
        let unique: BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len(), "a setting is listed twice");
    }

    /// Every `KILN_*` name that the sources read (Rust and Python string literals, shell `$KILN_`
    /// expansions) is listed.
    #[test]
    fn every_name_read_in_the_tree_is_listed() {
        fn walk(dir: &Path, found: &mut BTreeSet<String>) {
            for e in std::fs::read_dir(dir).unwrap().flatten() {
                let p = e.path();
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                if p.is_dir() {
                    if !name.starts_with('.') && name != "target" && name != "node_modules" {
                        walk(&p, found);
                    }
                    continue;
                }
                let ext = p.extension().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default();
                if !matches!(ext.as_str(), "rs" | "py" | "sh") && name != "run" {
                    continue;
                }
                let Ok(text) = std::fs::read_to_string(&p) else { continue };
                for (i, _) in text.match_indices("KILN_") {
                    let before = text[..i].chars().last();
                    if !matches!(before, Some('"') | Some('$') | Some('{')) {
                        continue;
                    }
                    let n: String = text[i..]
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    if !n.ends_with('_') {
                        found.insert(n);
                    }
                }
            }
        }
        let mut found = BTreeSet::new();
        for dir in ["crates", "fuzz", "bench", ".ci"] {
            walk(&root().join(dir), &mut found);
        }
        let listed: BTreeSet<String> = ALL.iter().map(|s| s.name.to_string()).collect();
        let missing: Vec<&String> = found.difference(&listed).collect();
        assert!(missing.is_empty(), "read in the tree but not in settings::ALL: {missing:?}");
        assert!(found.contains("KILN_GPU_TIMEOUT") && found.contains("KILN_FUZZ_MODE"), "the scan found {found:?}");
    }

    #[test]
    fn switches_read_as_documented() {
        // A name no one sets (spelled in two pieces so the scan above does not take it for a
        // setting): the defaults of both kinds of switch.
        let unset = Setting { name: concat!("KILN_", "SETTINGS_TEST_UNSET"), default: "", effect: "", reader: "tests" };
        assert!(!unset.is_one());
        assert!(unset.is_not_zero());
        assert!(unset.get().is_err() && unset.get_os().is_none());
    }
}
