//! The host allocation limit (`kiln::cpu::host_allocation_limit`): a request above it is
//! `Error::HostOutOfMemory` naming the op before any allocator is asked, so a sanitizer or
//! libFuzzer's malloc limit never sees an absurd request (the fuzzer's non-finite mode reached
//! `arange(65504, 524032, 1e-5)`: 5.2e10 values). Its own test binary: the limit is process-wide.

use kiln::{DType, Device, Error, Tensor};

#[test]
fn requests_above_the_limit_are_errors_before_allocating() {
    // The default is the machine's memory: the fuzzer's arange (419 GB of f64 values) is refused.
    let default = kiln::cpu::host_allocation_limit();
    assert!(default > 1 << 20, "{default}");
    let e = Tensor::arange_step(65504.0, 65504.0 * 8.0, 1e-5, DType::F32, &Device::cpu()).unwrap_err();
    assert!(matches!(e, Error::HostOutOfMemory { op: "arange", .. }), "{e}");

    kiln::cpu::set_host_allocation_limit(1 << 20);
    assert_eq!(kiln::cpu::host_allocation_limit(), 1 << 20);
    let cpu = Device::cpu();
    // 2^17 f64 values are exactly the limit; one more element is over it.
    assert_eq!(Tensor::arange(0.0, (1 << 17) as f64, DType::F32, &cpu).unwrap().elem_count(), 1 << 17);
    let e = Tensor::arange(0.0, ((1 << 17) + 1) as f64, DType::F32, &cpu).unwrap_err();
    assert!(matches!(e, Error::HostOutOfMemory { op: "arange", bytes } if bytes == ((1 << 17) + 1) * 8), "{e}");
    // Kernel outputs: a 1 MiB + 4 byte f32 result is refused inside the op, named by it.
    let x = Tensor::zeros((1 << 18) + 1, DType::F32, &cpu);
    assert!(matches!(x, Err(Error::HostOutOfMemory { .. })), "{x:?}");
    let a = Tensor::zeros(1 << 17, DType::F32, &cpu).unwrap();
    let e = a.add(&Tensor::zeros((3, 1), DType::F32, &cpu).unwrap()).unwrap_err();
    assert!(matches!(e, Error::HostOutOfMemory { .. }), "{e}");
    // Below the limit everything works as before.
    let y = Tensor::ones(1000, DType::F32, &cpu).unwrap().sum_all().unwrap().to_vec::<f32>().unwrap();
    assert_eq!(y, [1000.0]);
}
