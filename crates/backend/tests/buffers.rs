//! Host buffers, mapped buffers and bindings: bounds are checked, views resolve to their source.

use std::sync::Arc;
use tessera_backend::{BackendError, Bindings, Buffer, BufferType, HostBufferType, MappedBuffer};
use tessera_tensor::graph::Context;
use tessera_tensor::DType;

#[test]
fn host_buffers_are_aligned_zeroed_and_bounded() {
    let b = HostBufferType.alloc(100).unwrap();
    assert_eq!(b.size(), 100);
    assert_eq!(b.host_ptr().unwrap().as_ptr() as usize % 64, 0);
    let mut out = [1u8; 100];
    b.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&x| x == 0));
    b.write(96, &[1, 2, 3, 4]).unwrap();
    assert!(matches!(b.write(97, &[1, 2, 3, 4]), Err(BackendError::OutOfBounds { .. })));
    assert!(b.read(usize::MAX, &mut [0u8; 2]).is_err());
    b.clear(7).unwrap();
    b.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&x| x == 7));
}

#[test]
fn mapped_buffers_are_read_only() {
    let data = Arc::new(vec![5u8; 32]);
    let b = MappedBuffer::new(data);
    assert!(b.is_read_only() && b.is_host());
    let mut out = [0u8; 4];
    b.read(28, &mut out).unwrap();
    assert_eq!(out, [5; 4]);
    assert!(matches!(b.write(0, &[1]), Err(BackendError::ReadOnly { .. })));
}

#[test]
fn bindings_resolve_views_and_check_sizes() {
    let mut ctx = Context::new();
    let a = ctx.new_tensor(DType::F32, &[4, 2]).unwrap();
    let row1 = ctx.view(a, &[4], &[], 16).unwrap();
    let buf = HostBufferType.alloc(64).unwrap();
    let mut bind = Bindings::new();
    assert!(bind.bind(&ctx, a, buf.clone(), 40).is_err(), "32 bytes at 40 overflow 64");
    assert!(bind.bind(&ctx, row1, buf.clone(), 0).is_err(), "views are not bound directly");
    bind.bind(&ctx, a, buf, 32).unwrap();
    bind.set_f32(&ctx, a, &[0., 1., 2., 3., 4., 5., 6., 7.]).unwrap();
    assert_eq!(bind.get_f32(&ctx, row1).unwrap(), vec![4., 5., 6., 7.]);
    assert_eq!(bind.storage(&ctx, row1).unwrap().offset, 48);
    assert!(matches!(bind.set_f32(&ctx, a, &[1.0]), Err(BackendError::DataSize { .. })));
    let b = ctx.new_tensor(DType::F32, &[2]).unwrap();
    assert!(matches!(bind.get_f32(&ctx, b), Err(BackendError::Unbound { .. })));
}
