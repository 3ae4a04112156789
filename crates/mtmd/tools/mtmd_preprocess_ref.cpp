// libmtmd's image decoding and preprocessing on files, the reference for tessera-mtmd's
// (driven by mtmd_preprocess_ref.py, which builds this against llama.cpp b11312's sources).
// Usage: mtmd_preprocess_ref MMPROJ OUTDIR IMAGE...
// For image i: OUTDIR/i.rgb (the bitmap, 8-bit RGB), OUTDIR/i.f32.j (entry j of the
// preprocessed batch, little-endian f32) and OUTDIR/i.emb.j (its embeddings from
// clip_image_encode, 2 threads, flash attention on), and a line "i nx ny n_entries ex ey ..."
// on stdout. With MTMD_REF_PROJ=idefics3, the Idefics3 preprocessor: entry 0 is the
// overview, the tiles follow row by row, and the line ends with "grid gx gy"; with
// MTMD_REF_PROJ=qwen25vl, the dynamic-size preprocessor (mtmd_image_preprocessor_dyn_size).
#include "clip.h"
#include "clip-impl.h"
#include "mtmd.h"
#include "mtmd-helper.h"
#include "mtmd-image.h"

#include "ggml-backend.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

// With MTMD_REF_DUMP=DIR, every named F32 tensor the encoder computes is written to DIR/NAME
// (for finding where another implementation departs).
static bool dump_cb(struct ggml_tensor * t, bool ask, void * user_data) {
    const char * dir = (const char *) user_data;
    if (ask) {
        return t->name[0] != 0 && t->type == GGML_TYPE_F32;
    }
    if (!ggml_is_contiguous(t)) {
        return true;
    }
    std::vector<char> buf(ggml_nbytes(t));
    ggml_backend_tensor_get(t, buf.data(), 0, buf.size());
    FILE * f = fopen((std::string(dir) + "/" + t->name).c_str(), "wb");
    if (f) {
        fwrite(buf.data(), 1, buf.size(), f);
        fclose(f);
    }
    return true;
}

int main(int argc, char ** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MMPROJ OUTDIR IMAGE...\n", argv[0]);
        return 2;
    }
    clip_context_params p = {};
    p.use_gpu = false;
    p.flash_attn_type = CLIP_FLASH_ATTN_TYPE_ENABLED;
    p.image_min_tokens = -1;
    p.image_max_tokens = -1;
    p.warmup = false;
    if (const char * dir = getenv("MTMD_REF_DUMP")) {
        p.cb_eval = dump_cb;
        p.cb_eval_user_data = (void *) dir;
    }
    clip_init_result r = clip_init(argv[1], p);
    if (!r.ctx_v) {
        fprintf(stderr, "clip_init failed\n");
        return 1;
    }
    const std::string out = argv[2];
    for (int i = 3; i < argc; i++) {
        const int idx = i - 3;
        mtmd_helper_bitmap_wrapper w = mtmd_helper_bitmap_init_from_file(nullptr, argv[i], false, mtmd_helper_init_opt_default());
        if (!w.bitmap) {
            printf("%d failed\n", idx);
            continue;
        }
        const int nx = mtmd_bitmap_get_nx(w.bitmap), ny = mtmd_bitmap_get_ny(w.bitmap);
        const unsigned char * data = mtmd_bitmap_get_data(w.bitmap);
        const size_t n = mtmd_bitmap_get_n_bytes(w.bitmap);
        FILE * f = fopen((out + "/" + std::to_string(idx) + ".rgb").c_str(), "wb");
        fwrite(data, 1, n, f);
        fclose(f);
        clip_image_u8 img;
        img.set_size({nx, ny}, false);
        img.cpy_buf(std::vector<uint8_t>(data, data + n));
        const char * proj = getenv("MTMD_REF_PROJ");
        const bool idefics3 = proj && std::string(proj) == "idefics3";
        mtmd_image_preproc_out po;
        if (idefics3) {
            mtmd_image_preprocessor_idefics3 pre(r.ctx_v);
            po = pre.preprocess(img);
            po.entries.insert(po.entries.begin(), std::move(po.overview));
        } else if (proj && std::string(proj) == "qwen25vl") {
            mtmd_image_preprocessor_dyn_size pre(r.ctx_v);
            po = pre.preprocess(img);
        } else {
            mtmd_image_preprocessor_fixed_size pre(r.ctx_v);
            po = pre.preprocess(img);
        }
        printf("%d %d %d %zu", idx, nx, ny, po.entries.size());
        for (size_t j = 0; j < po.entries.size(); j++) {
            const auto & e = po.entries[j];
            const auto & buf = e.get_ro_buf();
            FILE * g = fopen((out + "/" + std::to_string(idx) + ".f32." + std::to_string(j)).c_str(), "wb");
            fwrite(buf.data(), sizeof(float), buf.size(), g);
            fclose(g);
            std::vector<float> emb((size_t) clip_n_output_tokens(r.ctx_v, &e) * clip_n_mmproj_embd(r.ctx_v));
            if (!clip_image_encode(r.ctx_v, 2, &e, emb)) {
                fprintf(stderr, "clip_image_encode failed\n");
                return 1;
            }
            FILE * h = fopen((out + "/" + std::to_string(idx) + ".emb." + std::to_string(j)).c_str(), "wb");
            fwrite(emb.data(), sizeof(float), emb.size(), h);
            fclose(h);
            printf(" %d %d", e.nx(), e.ny());
        }
        if (idefics3) {
            printf(" grid %d %d", po.grid_x, po.grid_y);
        }
        printf("\n");
        mtmd_bitmap_free(w.bitmap);
    }
    clip_free(r.ctx_v);
    return 0;
}
