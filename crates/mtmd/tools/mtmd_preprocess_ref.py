#!/usr/bin/env python3
"""libmtmd's decoded bitmaps and preprocessed images, the reference for tessera-mtmd's.

Writes the test images (tests/fixtures/images/, with Pillow, once: they are stored), the
tests' random Gemma 3 mmproj (`cargo run -p tessera-mtmd --example write_mmproj`), builds
mtmd_preprocess_ref.cpp against llama.cpp b11312's sources (the ones llama-cpp-python 0.3.36
vendors) and its libmtmd, runs it on every image and writes
tests/fixtures/preprocess.json: per image, the bitmap's size and SHA-256 (stb_image's decoding)
and per preprocessed entry its size, the SHA-256 of its little-endian f32 values and their
first few values (read by tests/preprocess.rs), and the embeddings clip_image_encode makes of
three of them (tests/fixtures/encode_LEVEL.json, read by tests/encode.rs); for JPEGs, stb_image's pixels themselves
(tests/fixtures/NAME.stb.rgb), since JPEG decoders round differently.

Usage: VENV/bin/python crates/mtmd/tools/mtmd_preprocess_ref.py LLAMA_CPP_SRC MTMD_LIB_DIR \
    GGML_LIB_DIR LEVEL BUILD [PROJ]
  LLAMA_CPP_SRC: llama.cpp's source tree (tools/mtmd, ggml/include, include, vendor)
  MTMD_LIB_DIR: the directory of libmtmd.so (llama_cpp/lib of a llama-cpp-python 0.3.36 venv)
  GGML_LIB_DIR: the directory of the libggml*.so to compute with: llama-cpp-python built with
    LEVEL's explicit flags (tools/make_ref_set.sh; its libmtmd may be missing), loaded first
  LEVEL, BUILD: the SIMD level (avx2, avx512) and the build's flags, recorded: the embeddings
    (tests/fixtures/encode_LEVEL.json) follow the level's kernels
  PROJ: gemma3 (default), qwen25vl (RandomMmproj::tiny_qwen25vl(96): images of their own
    size, preprocess_qwen25vl.json and encode_qwen25vl_LEVEL.json), idefics3 (RandomMmproj::tiny_idefics3(96): tiles and overview,
    tests/fixtures/preprocess_idefics3.json and encode_idefics3_LEVEL.json) or idefics3-old
    (the same without clip.vision.preproc_image_size: preprocess_idefics3-old.json only)
Needs g++ and Pillow (to write the images, only when they are missing).
"""
import hashlib
import struct
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.dirname(HERE)
IMAGES = os.path.join(CRATE, "tests", "fixtures", "images")
# The images whose embeddings are stored (tests/fixtures/encode.json).
ENCODED = ["rgb_37x23.png", "wide_200x20.png", "palette_29x29.gif"]


def make_images():
    """Small images of odd sizes in each format llama.cpp decodes (deterministic content)."""
    from PIL import Image
    import random
    os.makedirs(IMAGES, exist_ok=True)
    rnd = random.Random(7)

    def rgb(w, h):
        im = Image.new("RGB", (w, h))
        im.putdata([((x * 255) // max(w - 1, 1), (y * 255) // max(h - 1, 1),
                     rnd.randrange(256)) for y in range(h) for x in range(w)])
        return im

    rgb(37, 23).save(os.path.join(IMAGES, "rgb_37x23.png"))
    rgb(5, 3).save(os.path.join(IMAGES, "tiny_5x3.png"))
    rgb(200, 20).save(os.path.join(IMAGES, "wide_200x20.png"))
    rgb(64, 64).save(os.path.join(IMAGES, "square_64x64.png"))
    a = rgb(50, 71).convert("RGBA")
    a.putalpha(Image.linear_gradient("L").resize((50, 71)))
    a.save(os.path.join(IMAGES, "rgba_50x71.png"))
    g = Image.new("I;16", (31, 17))
    g.putdata([rnd.randrange(65536) for _ in range(31 * 17)])
    g.save(os.path.join(IMAGES, "grey16_31x17.png"))
    rgb(29, 29).convert("P", palette=Image.ADAPTIVE, colors=16).save(
        os.path.join(IMAGES, "palette_29x29.gif"))
    rgb(64, 40).save(os.path.join(IMAGES, "photo_64x40.jpg"), quality=90)
    rgb(33, 47).convert("L").save(os.path.join(IMAGES, "grey_33x47.jpg"), quality=85)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    src, libdir, ggml_dir, level, build = sys.argv[1:6]
    proj = sys.argv[6] if len(sys.argv) > 6 else "gemma3"
    suffix = "" if proj == "gemma3" else "_" + proj
    flag = [] if proj == "gemma3" else ["--" + proj]
    if not os.path.isdir(IMAGES) or not os.listdir(IMAGES):
        make_images()
    images = sorted(i for i in os.listdir(IMAGES))
    with tempfile.TemporaryDirectory() as tmp:
        mmproj = os.path.join(tmp, "mmproj.gguf")
        subprocess.run(["cargo", "run", "-q", "-p", "tessera-mtmd", "--example", "write_mmproj",
                        "--", *flag, mmproj], check=True, cwd=CRATE)
        exe = os.path.join(tmp, "ref")
        inc = [f"-I{os.path.join(src, d)}" for d in
               ["tools/mtmd", "ggml/include", "include", "vendor", "common"]]
        subprocess.run(["g++", "-std=c++17", "-O1", *inc, os.path.join(HERE, "mtmd_preprocess_ref.cpp"),
                        "-o", exe, f"-L{libdir}", "-lmtmd", "-lllama", "-lggml", "-lggml-base",
                        f"-Wl,-rpath,{libdir}"], check=True)
        outdir = os.path.join(tmp, "out")
        os.makedirs(outdir)
        # The level's ggml (its CPU kernels) ahead of the one beside libmtmd.
        env = dict(os.environ, LD_LIBRARY_PATH=f"{ggml_dir}:{libdir}")
        if proj != "gemma3":
            env["MTMD_REF_PROJ"] = "qwen25vl" if proj == "qwen25vl" else "idefics3"
        run = subprocess.run([exe, mmproj, outdir, *[os.path.join(IMAGES, i) for i in images]],
                             check=True, capture_output=True, text=True, env=env)
        cases, encoded = [], []
        for line in run.stdout.splitlines():
            f = line.split()
            idx = int(f[0])
            if f[1] == "failed":
                cases.append({"file": images[idx], "decoded": False})
                continue
            nx, ny, n = int(f[1]), int(f[2]), int(f[3])
            entries = []
            embeddings = []
            for j in range(n):
                with open(os.path.join(outdir, f"{idx}.emb.{j}"), "rb") as fh:
                    raw = fh.read()
                embeddings.append(raw.hex())
                p = os.path.join(outdir, f"{idx}.f32.{j}")
                with open(p, "rb") as fh:
                    head = list(struct.unpack("<6f", fh.read(24)))
                entries.append({"width": int(f[4 + 2 * j]), "height": int(f[5 + 2 * j]),
                                "f32_sha256": sha(p), "head": head})
            case = {"file": images[idx], "decoded": True, "width": nx, "height": ny,
                    "rgb_sha256": sha(os.path.join(outdir, f"{idx}.rgb")), "entries": entries}
            if "grid" in f:
                g = f.index("grid")
                case["grid"] = [int(f[g + 1]), int(f[g + 2])]
            if images[idx] in ENCODED:
                encoded.append({"file": images[idx], "embeddings": embeddings})
            if images[idx].endswith(".jpg") and proj == "gemma3":
                # JPEG decoders differ in their IDCT and upsampling: stb_image's pixels are kept,
                # so the test can measure the difference and preprocess stb's own bitmap.
                import shutil
                shutil.copy(os.path.join(outdir, f"{idx}.rgb"),
                            os.path.join(CRATE, "tests", "fixtures", images[idx] + ".stb.rgb"))
            if images[idx].endswith(".jpg"):
                case["stb_rgb"] = images[idx] + ".stb.rgb"
            cases.append(case)
            print(images[idx], nx, ny, [(e["width"], e["height"]) for e in entries])
    out = {"made_by": "crates/mtmd/tools/mtmd_preprocess_ref.py: llama.cpp b11312's libmtmd "
                      "(llama-cpp-python 0.3.36), stb_image decoding, "
                      + ("mtmd_image_preprocessor_fixed_size on RandomMmproj::tiny_gemma3(96)"
                         if proj == "gemma3" else
                         "mtmd_image_preprocessor_dyn_size on write_mmproj --qwen25vl (96 wide)"
                         if proj == "qwen25vl" else
                         f"mtmd_image_preprocessor_idefics3 on write_mmproj --{proj} (96 wide); "
                         "entry 0 is the overview, then the tiles row by row"),
           "cases": cases}
    with open(os.path.join(CRATE, "tests", "fixtures", f"preprocess{suffix}.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    enc = {"made_by": "crates/mtmd/tools/mtmd_preprocess_ref.py: llama.cpp b11312's "
                      "clip_image_encode (llama-cpp-python 0.3.36's libmtmd, CPU, 2 threads, flash "
                      f"attention on) of the preprocessed images, write_mmproj {' '.join(flag)} (96 wide); "
                      "embeddings as little-endian f32 bytes in hex",
           "simd_level": level, "build": build, "cases": encoded}
    if proj == "idefics3-old":
        return
    with open(os.path.join(CRATE, "tests", "fixtures", f"encode{suffix}_{level}.json"), "w") as f:
        json.dump(enc, f)
        f.write("\n")


if __name__ == "__main__":
    main()
