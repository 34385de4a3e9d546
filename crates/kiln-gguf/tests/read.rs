//! kiln-gguf against `fixtures/tiny.gguf` (written by `fixtures/make_tiny.py` with gguf-py): every
//! metadata type, the Llama and tokenizer accessors, float and quantized tensors against the values
//! the script wrote, the Q/K un-permutation, and corrupt or truncated input (errors, no panics).

use kiln::quant::{QTensor, QuantType};
use kiln::{DType, Device};
use kiln_gguf::{names, Gguf, GgufError, GgufTensor, Value};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny.gguf");

fn fixture() -> Gguf {
    Gguf::open(FIXTURE).unwrap()
}

fn floats(t: &GgufTensor) -> Vec<f32> {
    match t {
        GgufTensor::Float(t) => t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
        GgufTensor::Quant(q) => q.dequantize(DType::F32).unwrap().to_vec::<f32>().unwrap(),
    }
}

fn quant(t: GgufTensor) -> QTensor {
    match t {
        GgufTensor::Quant(q) => q,
        GgufTensor::Float(t) => panic!("expected a quantized tensor, got {t:?}"),
    }
}

#[test]
fn header_and_metadata_of_every_type() {
    let f = fixture();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.data_offset() % 64, 0);
    assert_eq!(f.get("test.u8"), Some(&Value::U8(200)));
    assert_eq!(f.get("test.i8"), Some(&Value::I8(-100)));
    assert_eq!(f.get("test.u16"), Some(&Value::U16(60000)));
    assert_eq!(f.get("test.i16"), Some(&Value::I16(-30000)));
    assert_eq!(f.get("test.u32"), Some(&Value::U32(4_000_000_000)));
    assert_eq!(f.get("test.i32"), Some(&Value::I32(-2_000_000_000)));
    assert_eq!(f.get("test.f32"), Some(&Value::F32(1.5)));
    assert_eq!(f.get("test.bool"), Some(&Value::Bool(true)));
    assert_eq!(f.get_str("test.string").unwrap(), "kiln \u{2713}");
    assert_eq!(f.get("test.u64"), Some(&Value::U64((1 << 63) + 5)));
    assert_eq!(f.get("test.i64"), Some(&Value::I64(-(1 << 62))));
    assert_eq!(f.get("test.f64"), Some(&Value::F64(std::f64::consts::E)));
    assert_eq!(f.get_int_array("test.array_i32").unwrap(), [1, -2, 3]);
    assert_eq!(f.get_str_array("test.array_str").unwrap(), ["x", "", "yz"]);
    let nested = f.get("test.array_nested").unwrap().as_array().unwrap();
    let inner: Vec<usize> = nested.iter().map(|v| v.as_array().unwrap().len()).collect();
    assert_eq!(inner, [2, 1]);
    assert_eq!(nested[1].as_array().unwrap()[0].to_i64(), Some(3));
    // Typed accessors refuse other types with the key in the message.
    let e = f.get_usize("test.string").unwrap_err().to_string();
    assert!(e.contains("test.string") && e.contains("integer"), "{e}");
    assert!(f.get_usize("test.i8").is_err());
    assert!(f.get_str("no.such.key").unwrap_err().to_string().contains("missing"));
}

#[test]
fn llama_params_and_tokenizer() {
    let f = fixture();
    let p = f.llama_params().unwrap();
    assert_eq!(p.architecture, "llama");
    assert_eq!((p.block_count, p.embedding_length, p.head_count, p.head_count_kv), (1, 64, 4, 2));
    assert_eq!((p.context_length, p.feed_forward_length, p.rope_dimension_count), (256, 96, 16));
    assert_eq!(p.rope_freq_base, 500000.0);
    assert_eq!(p.rms_norm_eps, 1e-5);
    let t = f.tokenizer().unwrap();
    assert_eq!(t.model, "gpt2");
    assert_eq!(t.tokens, ["<unk>", "<s>", "</s>", "a", "b", "ab", "\u{e9}t\u{e9}", "x y"]);
    assert_eq!(t.merges, ["a b", "\u{e9} t"]);
    assert_eq!(t.token_types, [2, 3, 3, 1, 1, 1, 1, 6]);
    assert_eq!(t.scores, [0.0, -1.0, -2.0, -3.5, -4.0, -5.0, -6.0, -7.25]);
    assert_eq!((t.bos_id, t.eos_id), (Some(1), Some(2)));
}

#[test]
fn float_tensors_hold_the_written_values() {
    let f = fixture();
    let dev = Device::cpu();
    for (name, dt, shape) in
        [("f32.vals", DType::F32, [3, 5]), ("f16.vals", DType::F16, [2, 4]), ("bf16.vals", DType::BF16, [2, 4])]
    {
        let t = f.load(name, &dev).unwrap();
        let GgufTensor::Float(ref x) = t else { panic!("{name} is not a float tensor") };
        assert_eq!((x.dtype(), x.dims()), (dt, &shape[..]), "{name}");
        let want: Vec<f32> = f
            .get(&format!("test.{name}"))
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.to_f64().unwrap() as f32)
            .collect();
        assert_eq!(floats(&t), want, "{name}");
    }
    let names: Vec<String> = f.tensors(&dev).map(|t| t.unwrap().0).collect();
    let infos: Vec<&str> = f.tensor_infos().iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, infos);
    assert_eq!(names.len(), 16);
}

#[test]
fn quantized_tensors_match_gguf_py() {
    let f = fixture();
    let devices: Vec<Device> = [Some(Device::cpu()), Device::gpu().ok()].into_iter().flatten().collect();
    for dev in &devices {
        // Q8_0 and Q4_0: kiln quantises gguf-py's source to the same bytes.
        for (name, qt) in [("q8_0", QuantType::Q8_0), ("q4_0", QuantType::Q4_0)] {
            let w = quant(f.load(&format!("{name}.w"), dev).unwrap());
            let GgufTensor::Float(src) = f.load(&format!("{name}.src"), dev).unwrap() else { panic!() };
            assert_eq!((w.qtype(), w.dims()), (qt, src.dims()));
            let mine = QTensor::quantize(&src, qt).unwrap();
            assert_eq!(mine.to_raw().unwrap(), w.to_raw().unwrap(), "{name} bytes");
            assert_eq!(w.to_raw().unwrap(), f.tensor_bytes(f.tensor_info(&format!("{name}.w")).unwrap()).unwrap());
        }
        // Q4_K and Q6_K: kiln's dequantisation equals gguf-py's (exactly on the CPU).
        for (name, qt) in [("q4_k", QuantType::Q4K), ("q6_k", QuantType::Q6K)] {
            let w = quant(f.load(&format!("{name}.w"), dev).unwrap());
            assert_eq!(w.qtype(), qt);
            let want = floats(&f.load(&format!("{name}.deq"), dev).unwrap());
            let got = floats(&GgufTensor::Quant(w));
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                let tol = if dev.is_cpu() { 0.0 } else { 1e-6 * e.abs().max(1e-3) };
                assert!((g - e).abs() <= tol, "{name} {dev:?} value {i}: {g} vs {e}");
            }
        }
    }
}

/// `fixtures/formats.gguf` (`make_formats.py`): random blocks of the newer formats with gguf-py's
/// dequantisation of them, and gguf-py's quantisation of Q4_1, Q5_0 and Q5_1.
#[test]
fn newer_formats_match_gguf_py() {
    let f = Gguf::open(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/formats.gguf")).unwrap();
    let devices: Vec<Device> = [Some(Device::cpu()), Device::gpu().ok()].into_iter().flatten().collect();
    let formats = [
        ("q4_1", QuantType::Q4_1),
        ("q5_0", QuantType::Q5_0),
        ("q5_1", QuantType::Q5_1),
        ("q2_k", QuantType::Q2K),
        ("q3_k", QuantType::Q3K),
        ("q5_k", QuantType::Q5K),
        ("iq4_nl", QuantType::IQ4NL),
        ("iq4_xs", QuantType::IQ4XS),
    ];
    for dev in &devices {
        for (name, qt) in formats {
            let w = quant(f.load(&format!("{name}.w"), dev).unwrap());
            assert_eq!(w.qtype(), qt);
            let want = floats(&f.load(&format!("{name}.deq"), dev).unwrap());
            let got = floats(&GgufTensor::Quant(w));
            assert_eq!(got.len(), want.len());
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                // Bit-exact on the CPU; a GPU compiler may fuse a multiply-add.
                let tol = if dev.is_cpu() { 0.0 } else { 1e-6 * e.abs().max(1e-3) };
                assert!((g - e).abs() <= tol, "{name} {dev:?} value {i}: {g} vs {e}");
            }
        }
        for (name, qt) in [("q4_1", QuantType::Q4_1), ("q5_0", QuantType::Q5_0), ("q5_1", QuantType::Q5_1)] {
            let w = quant(f.load(&format!("{name}.qw"), dev).unwrap());
            let GgufTensor::Float(src) = f.load(&format!("{name}.src"), dev).unwrap() else { panic!() };
            let mine = QTensor::quantize(&src, qt).unwrap();
            assert_eq!(mine.to_raw().unwrap(), w.to_raw().unwrap(), "{name} bytes");
        }
    }
}

#[test]
fn hf_names_and_qk_unpermutation() {
    assert_eq!(names::hf_name("token_embd.weight").as_deref(), Some("model.embed_tokens.weight"));
    assert_eq!(names::hf_name("output.weight").as_deref(), Some("lm_head.weight"));
    assert_eq!(names::hf_name("output_norm.weight").as_deref(), Some("model.norm.weight"));
    assert_eq!(names::hf_name("blk.12.attn_q.weight").as_deref(), Some("model.layers.12.self_attn.q_proj.weight"));
    assert_eq!(names::hf_name("blk.3.ffn_down.weight").as_deref(), Some("model.layers.3.mlp.down_proj.weight"));
    assert_eq!(
        names::hf_name("blk.0.ffn_norm.weight").as_deref(),
        Some("model.layers.0.post_attention_layernorm.weight")
    );
    assert_eq!(names::hf_name("blk.0.attn_v.bias").as_deref(), Some("model.layers.0.self_attn.v_proj.bias"));
    assert_eq!(names::hf_name("rope_freqs.weight"), None);
    assert_eq!(names::hf_name("blk.x.attn_q.weight"), None);
    let f = fixture();
    let dev = Device::cpu();
    let loaded: Vec<(String, GgufTensor)> = f.load_hf(&dev).unwrap().map(|t| t.unwrap()).collect();
    let names: Vec<&str> = loaded.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "model.layers.0.self_attn.q_proj.weight",
            "model.layers.0.self_attn.k_proj.weight",
            "model.embed_tokens.weight"
        ]
    );
    // The permuted GGUF rows differ from HF's; the un-permuted ones equal them.
    let q_hf = floats(&f.load("q.hf", &dev).unwrap());
    assert_ne!(floats(&f.load("blk.0.attn_q.weight", &dev).unwrap()), q_hf);
    assert_eq!(floats(&loaded[0].1), q_hf);
    let GgufTensor::Quant(k) = &loaded[1].1 else { panic!("k_proj stays quantized") };
    assert_eq!(k.dims(), [32, 32]);
    assert_eq!(floats(&loaded[1].1), floats(&f.load("k.hf", &dev).unwrap()));
    // Undoing the permutation of a permuted identity gives the identity.
    let rows: Vec<u8> = (0..8u8).collect();
    let permuted: Vec<u8> = [0, 2, 1, 3, 4, 6, 5, 7].to_vec();
    assert_eq!(names::unpermute_rows(&permuted, 8, 1, 2).unwrap(), rows);
    assert_eq!(names::unpermute_rows(&rows, 6, 1, 4), None);
}

#[test]
fn truncated_files_are_errors() {
    let bytes = std::fs::read(FIXTURE).unwrap();
    for len in 0..bytes.len() {
        match Gguf::from_bytes(bytes[..len].to_vec()) {
            Err(GgufError::Truncated { .. }) => {}
            other => panic!("truncated at {len}: {other:?}"),
        }
    }
    assert!(Gguf::from_bytes(bytes).is_ok());
}

#[test]
fn flipped_bytes_never_panic() {
    let bytes = std::fs::read(FIXTURE).unwrap();
    let dev = Device::cpu();
    let header = fixture().data_offset() as usize;
    let mut ok = 0;
    for pos in 0..header {
        for mask in [0xFFu8, 0x01, 0x80] {
            let mut b = bytes.clone();
            b[pos] ^= mask;
            if let Ok(f) = Gguf::from_bytes(b) {
                ok += 1;
                // Whatever the header now says, reading it and its tensors gives values or errors.
                let _ = f.llama_params();
                let _ = f.tokenizer();
                for t in f.tensors(&dev) {
                    let _ = t;
                }
            }
        }
    }
    // Flips inside strings and numbers keep the file readable; flips in lengths and types do not.
    assert!(ok > 0 && ok < 3 * header, "{ok} of {} flipped files parsed", 3 * header);
}

/// A minimal file: header, one metadata entry, no tensors.
fn tiny(version: u32, kv: &[u8]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(version.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.extend(kv);
    b
}

fn key(name: &str, ty: u32, value: &[u8]) -> Vec<u8> {
    let mut b = (name.len() as u64).to_le_bytes().to_vec();
    b.extend(name.as_bytes());
    b.extend(ty.to_le_bytes());
    b.extend(value);
    b
}

#[test]
fn corrupt_headers_give_clear_errors() {
    let err = |b: Vec<u8>| Gguf::from_bytes(b).unwrap_err().to_string();
    assert!(err(b"GGUX\x03\0\0\0".to_vec()).contains("magic"));
    assert!(err(tiny(1, &key("a", 4, &[1, 0, 0, 0]))).contains("version 1"));
    assert!(err(tiny(3u32.swap_bytes(), &[])).contains("big-endian"));
    assert!(err(tiny(7, &[])).contains("version 7"));
    assert!(Gguf::from_bytes(tiny(2, &key("a", 4, &[1, 0, 0, 0]))).is_ok());
    // A huge array length is refused before anything is allocated.
    let mut arr = 0u32.to_le_bytes().to_vec();
    arr.extend(u64::MAX.to_le_bytes());
    assert!(err(tiny(3, &key("a", 9, &arr))).contains("truncated"));
    assert!(err(tiny(3, &key("a", 13, &[0; 8]))).contains("unknown type 13"));
    assert!(err(tiny(3, &key("a", 7, &[2]))).contains("bool of value 2"));
    assert!(err(tiny(3, &key("general.alignment", 4, &[3, 0, 0, 0]))).contains("power of two"));
    let mut huge_count = b"GGUF".to_vec();
    huge_count.extend(3u32.to_le_bytes());
    huge_count.extend(u64::MAX.to_le_bytes());
    huge_count.extend(u64::MAX.to_le_bytes());
    assert!(err(huge_count).contains("truncated"));
    // Tensor infos: too many dims, a misaligned offset, a dim that is not a whole block.
    let info = |dims: &[u64], ty: u32, off: u64| {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.push(b't');
        b.extend((dims.len() as u32).to_le_bytes());
        dims.iter().for_each(|d| b.extend(d.to_le_bytes()));
        b.extend(ty.to_le_bytes());
        b.extend(off.to_le_bytes());
        b.resize(4096, 0);
        b
    };
    assert!(Gguf::from_bytes(info(&[4, 2], 0, 0)).is_ok());
    assert!(err(info(&[1, 1, 1, 1, 1], 0, 0)).contains("5 dims"));
    assert!(err(info(&[4], 0, 4)).contains("not aligned"));
    assert!(err(info(&[48], 8, 0)).contains("multiple of its block of 32"));
    assert!(err(info(&[u64::MAX, 4], 0, 0)).contains("more elements"));
    // A tensor of a type kiln does not load (IQ2_XXS) is listed, and loading it is an error.
    let f = Gguf::from_bytes(info(&[256], 16, 0)).unwrap();
    assert!(f.load("t", &Device::cpu()).unwrap_err().to_string().contains("ggml type 16"));
}
