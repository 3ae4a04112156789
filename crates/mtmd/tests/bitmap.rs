//! Untrusted images: oversized ones are refused from their header before any pixel is decoded,
//! corrupt and unknown data gets a named error, never a panic.

use std::path::Path;
use tessera_mtmd::{Bitmap, ImageLimits, MtmdError};

fn crc32(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in bytes {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
        }
    }
    !c
}

/// A PNG that declares `w × h` RGB pixels and holds no image data.
fn png_header(w: u32, h: u32) -> Vec<u8> {
    let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut chunk = b"IHDR".to_vec();
    chunk.extend(w.to_be_bytes());
    chunk.extend(h.to_be_bytes());
    chunk.extend([8, 2, 0, 0, 0]);
    v.extend(13u32.to_be_bytes());
    v.extend(&chunk);
    v.extend(crc32(&chunk).to_be_bytes());
    // An empty IDAT (the decoder reads up to the first one for the header) and IEND.
    for name in [b"IDAT", b"IEND"] {
        v.extend(0u32.to_be_bytes());
        v.extend(name);
        v.extend(crc32(name).to_be_bytes());
    }
    v
}

fn reason(r: Result<Bitmap, MtmdError>) -> String {
    match r {
        Err(MtmdError::Image { reason, .. }) => reason,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_fifty_megapixel_image_is_refused_from_its_header() {
    let e = reason(Bitmap::decode(&png_header(8660, 5774), "big.png", ImageLimits::default()));
    assert!(e.contains("8660x5774") && e.contains("50.0 megapixels"), "{e}");
    let e = reason(Bitmap::decode(&png_header(20000, 10), "long.png", ImageLimits::default()));
    assert!(e.contains("16384 a side"), "{e}");
    let tight = ImageLimits { max_side: 32, max_pixels: 1000 };
    let e = reason(Bitmap::decode(&png_header(40, 20), "x.png", tight));
    assert!(e.contains("40x20"), "{e}");
}

#[test]
fn corrupt_and_unknown_data_are_named_errors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/images");
    let png = std::fs::read(root.join("rgba_50x71.png")).unwrap();
    let e = reason(Bitmap::decode(&png[..200], "cut.png", ImageLimits::default()));
    assert!(e.contains("corrupt Png"), "{e}");
    let jpg = std::fs::read(root.join("photo_64x40.jpg")).unwrap();
    let e = reason(Bitmap::decode(&jpg[..300], "cut.jpg", ImageLimits::default()));
    assert!(e.contains("corrupt Jpeg"), "{e}");
    let e = reason(Bitmap::decode(b"hello, this is not an image", "t.txt", ImageLimits::default()));
    assert!(e.contains("not a PNG, JPEG, GIF or WebP"), "{e}");
    let e = reason(Bitmap::decode(&png_header(0, 5), "zero.png", ImageLimits::default()));
    assert!(!e.is_empty());
    let e = reason(Bitmap::open(&root.join("absent.png"), ImageLimits::default()));
    assert!(!e.is_empty());
    assert!(Bitmap::from_rgb(2, 2, vec![0; 11]).is_err());
}

#[test]
fn the_content_hash_follows_the_pixels_and_the_size() {
    let a = Bitmap::from_rgb(2, 1, vec![1, 2, 3, 4, 5, 6]).unwrap();
    let b = Bitmap::from_rgb(1, 2, vec![1, 2, 3, 4, 5, 6]).unwrap();
    let mut c = a.clone();
    c.rgb[5] = 7;
    assert_eq!(a.content_hash(), a.clone().content_hash());
    assert_ne!(a.content_hash(), b.content_hash(), "the same bytes in another shape");
    assert_ne!(a.content_hash(), c.content_hash());
}
