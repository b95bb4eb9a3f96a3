/* One JPEG decoded, cropped, optionally flipped and written as planes (C x H x W), in one pass.

Each band of decoded scanlines is split into the crop's planes while it is in the core's cache: no
full-size image is allocated, no strided copy reads one back from memory, and the pixels outside
the crop are not transformed or colour-converted. The decode is libjpeg's default
(the accurate integer IDCT, fancy upsampling), Pillow's and simplejpeg's; a warning fails the
decode as an error does (simplejpeg's strict mode), and the caller then decodes another way.
shardstream.service.transforms.jpeg_crop loads it with ctypes, checks its output against the
Python path's at load, and calls it. */
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <jpeglib.h>

#include "jpeg_crop.h"
#define BAND 16           /* rows decoded per call: a band of them stays in the core's cache */

struct failure {
    struct jpeg_error_mgr manager;
    jmp_buf jump;
};

static void on_error(j_common_ptr info) { longjmp(((struct failure *)info->err)->jump, 1); }

static void on_message(j_common_ptr info, int level) {
    if (level < 0) /* a warning: corrupt data libjpeg would pass over */
        longjmp(((struct failure *)info->err)->jump, 1);
}

static void silent(j_common_ptr info) { (void)info; }

int shardstream_jpeg_crop_version(void) { return LIBJPEG_TURBO_VERSION_NUMBER; }

/* The loops below vectorize with AVX2 where the CPU has it (one build for any x86-64 CPU: the
loader picks the version when the library is loaded). */
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define VECTORIZED __attribute__((target_clones("default", "avx2")))
#endif
#endif
#ifndef VECTORIZED
#define VECTORIZED
#endif

enum { FLIP_ROW = 2048 }; /* the widest crop row mirrored through planes on the stack (6 KiB) */

VECTORIZED static void split_row(const uint8_t *src, int components, int width, int flip, uint8_t *dst,
                      size_t plane) {
    if (components == 1) {
        if (!flip) {
            memcpy(dst, src, (size_t)width);
            return;
        }
        for (int x = 0; x < width; x++) dst[x] = src[width - 1 - x];
        return;
    }
    uint8_t *r = dst, *g = dst + plane, *b = dst + 2 * plane;
    if (flip && width > FLIP_ROW) {
        for (int x = 0; x < width; x++) {
            const uint8_t *p = src + 3 * (width - 1 - x);
            r[x] = p[0];
            g[x] = p[1];
            b[x] = p[2];
        }
        return;
    }
    /* A mirrored row is split in order into planes on the stack, then each is copied back to
    front: both loops vectorize, where a gather of pixels back to front did not (three times the
    time). */
    uint8_t planes[3][FLIP_ROW];
    uint8_t *pr = flip ? planes[0] : r, *pg = flip ? planes[1] : g, *pb = flip ? planes[2] : b;
    for (int x = 0; x < width; x++) {
        const uint8_t *p = src + 3 * x;
        pr[x] = p[0];
        pg[x] = p[1];
        pb[x] = p[2];
    }
    if (flip) {
        for (int x = 0; x < width; x++) {
            r[x] = planes[0][width - 1 - x];
            g[x] = planes[1][width - 1 - x];
            b[x] = planes[2][width - 1 - x];
        }
    }
}

/* The crop at (top, left) of decoded pixels (rows of image_width x channels), mirrored when `flip`,
as `channels` planes of height x width in `out`: a prepared sample's augment. */
void shardstream_crop_pixels(const uint8_t *pixels, int image_width, int channels, int top, int left, int height,
                             int width, int flip, uint8_t *out) {
    size_t stride = (size_t)image_width * (size_t)channels;
    size_t plane = (size_t)height * (size_t)width;
    for (int y = 0; y < height; y++)
        split_row(pixels + (size_t)(top + y) * stride + (size_t)channels * (size_t)left, channels, width, flip,
                  out + (size_t)y * (size_t)width, plane);
}

/* Rows for a band of decoded scanlines, each starting 8 bytes past a 32-byte boundary. libjpeg-turbo's
SIMD colour conversion writes a row that starts on a 16- or 32-byte boundary with non-temporal
stores, which bypass the core's cache: the split that reads the band next then waits on memory, and
the crop cost a third more (0.295 against 0.221 CPU-s per 1,000 of the benchmark's JPEGs, one
thread). Written with ordinary stores, the band is still in cache when it is split. */
static void cached_band(j_decompress_ptr info, int channels, JSAMPROW band[BAND]) {
    size_t stride = ((size_t)info->output_width * (size_t)channels + 63) / 32 * 32;
    uint8_t *rows = (uint8_t *)(*info->mem->alloc_large)((j_common_ptr)info, JPOOL_IMAGE, stride * BAND + 64);
    uint8_t *first = rows + (32 - (uintptr_t)rows % 32) % 32 + 8;
    for (int k = 0; k < BAND; k++) band[k] = first + (size_t)k * stride;
}

/* The crop's rows from a decode narrowed to the iMCU columns around the crop, with the rows above
and below it only entropy-decoded. */
static void crop_only(j_decompress_ptr info, int channels, int top, int left, int height, int width,
                      int flip, uint8_t *out) {
    /* A margin of one iMCU on each side keeps the crop's pixels those of a full decode: fancy
    upsampling treats the decoded region's edges as the image's. */
    int margin = info->max_h_samp_factor * DCTSIZE;
    int image_width = (int)info->output_width;
    int x0 = left > margin ? left - margin : 0;
    int x1 = left + width + margin < image_width ? left + width + margin : image_width;
    JDIMENSION region_left = (JDIMENSION)x0, region_width = (JDIMENSION)(x1 - x0);
    jpeg_crop_scanline(info, &region_left, &region_width);
    int offset = left - (int)region_left;
    if (top > 0) jpeg_skip_scanlines(info, (JDIMENSION)top); /* libjpeg keeps upsampling's context */
    JSAMPROW band[BAND];
    cached_band(info, channels, band);
    size_t plane = (size_t)height * (size_t)width;
    while ((int)info->output_scanline < top + height) {
        int y = (int)info->output_scanline;
        int wanted = top + height - y < BAND ? top + height - y : BAND;
        int got = (int)jpeg_read_scanlines(info, band, (JDIMENSION)wanted);
        for (int k = 0; k < got; k++)
            split_row(band[k] + (size_t)channels * (size_t)offset, channels, width, flip,
                      out + (size_t)(y + k - top) * (size_t)width, plane);
    }
    /* Below the crop too, but for the last row: skipping to the end would not read the rest of
    the data, and damage there must fail the decode as it fails a full one. */
    if (info->output_scanline + 1 < info->output_height)
        jpeg_skip_scanlines(info, info->output_height - 1 - info->output_scanline);
    if (info->output_scanline < info->output_height) jpeg_read_scanlines(info, band, 1);
}

/* The whole image into `whole` (rows of width x channels), and the crop's rows split from each
band of them while it is in cache. */
static void whole_and_crop(j_decompress_ptr info, int channels, int top, int left, int height,
                           int width, int flip, uint8_t *out, uint8_t *whole) {
    size_t stride = (size_t)info->output_width * (size_t)channels;
    size_t plane = (size_t)height * (size_t)width;
    JSAMPROW band[BAND];
    cached_band(info, channels, band);
    while (info->output_scanline < info->output_height) {
        int y = (int)info->output_scanline;
        int wanted = (int)info->output_height - y < BAND ? (int)info->output_height - y : BAND;
        int got = (int)jpeg_read_scanlines(info, band, (JDIMENSION)wanted);
        for (int k = 0; k < got; k++) {
            memcpy(whole + (size_t)(y + k) * stride, band[k], stride);
            if (y + k >= top && y + k < top + height)
                split_row(band[k] + (size_t)channels * (size_t)left, channels, width, flip,
                          out + (size_t)(y + k - top) * (size_t)width, plane);
        }
    }
}

/* The kind of JPEG `data` is (a KIND_ of jpeg_crop.h, as simplejpeg's header read names it), its
width and its height, into `out`; KIND_OTHER for any other: another colour space, sampling factors
written another way than the usual one, not a JPEG. Only the headers are read. */
void shardstream_jpeg_header(const uint8_t *data, unsigned long size, int32_t *out) {
    struct jpeg_decompress_struct info;
    struct failure failure;
    volatile int created = 0;
    out[0] = out[1] = out[2] = 0;
    if (size < 3 || data[0] != 0xFF || data[1] != 0xD8 || data[2] != 0xFF) return;
    info.err = jpeg_std_error(&failure.manager);
    failure.manager.error_exit = on_error;
    failure.manager.emit_message = on_message;
    failure.manager.output_message = silent;
    if (setjmp(failure.jump)) {
        out[0] = out[1] = out[2] = 0;
        if (created) jpeg_destroy_decompress(&info);
        return;
    }
    jpeg_create_decompress(&info);
    created = 1;
    jpeg_mem_src(&info, data, size);
    jpeg_read_header(&info, TRUE);
    int kind = KIND_OTHER;
    const jpeg_component_info *c = info.comp_info;
    if (info.num_components == 1 && info.jpeg_color_space == JCS_GRAYSCALE) {
        kind = KIND_GRAY;
    } else if (info.num_components == 3 && info.jpeg_color_space == JCS_YCbCr && c[1].h_samp_factor == 1 &&
               c[1].v_samp_factor == 1 && c[2].h_samp_factor == 1 && c[2].v_samp_factor == 1) {
        static const int factors[][3] = {{1, 1, KIND_444}, {2, 1, KIND_422}, {2, 2, KIND_420},
                                         {1, 2, KIND_440}, {4, 1, KIND_411}};
        for (size_t k = 0; k < sizeof factors / sizeof factors[0]; k++)
            if (c[0].h_samp_factor == factors[k][0] && c[0].v_samp_factor == factors[k][1]) kind = factors[k][2];
    }
    out[0] = (int32_t)info.image_width;
    out[1] = (int32_t)info.image_height;
    out[2] = kind;
    jpeg_destroy_decompress(&info);
}

/* Decode `data` (`size` bytes, a JPEG of `image_width` x `image_height`) as `channels` (1: luma, 3:
RGB), and write rows top..top+height-1, columns left..left+width-1 (mirrored when `flip`) into `out`
as `channels` planes of height x width; and, when `whole` is not NULL, the whole image into it
(image_height x image_width x channels). Returns CROP_DONE, or CROP_NOT_HERE for a JPEG whose size
or colour space is not the one given, a crop outside it, or a decode libjpeg fails or warns about. */
int shardstream_jpeg_crop(const uint8_t *data, unsigned long size, int channels, int image_width,
                          int image_height, int top, int left, int height, int width, int flip,
                          uint8_t *out, uint8_t *whole) {
    struct jpeg_decompress_struct info;
    struct failure failure;
    volatile int created = 0;
    if ((channels != 1 && channels != 3) || top < 0 || left < 0 || height <= 0 || width <= 0 ||
        top + height > image_height || left + width > image_width)
        return CROP_NOT_HERE;
    info.err = jpeg_std_error(&failure.manager);
    failure.manager.error_exit = on_error;
    failure.manager.emit_message = on_message;
    failure.manager.output_message = silent;
    if (setjmp(failure.jump)) {
        if (created) jpeg_destroy_decompress(&info);
        return CROP_NOT_HERE;
    }
    jpeg_create_decompress(&info);
    created = 1;
    jpeg_mem_src(&info, data, size);
    jpeg_read_header(&info, TRUE);
    if ((int)info.image_width != image_width || (int)info.image_height != image_height ||
        (info.jpeg_color_space != JCS_YCbCr && info.jpeg_color_space != JCS_GRAYSCALE)) {
        jpeg_destroy_decompress(&info);
        return CROP_NOT_HERE;
    }
    info.out_color_space = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
    info.dct_method = JDCT_ISLOW;
    info.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&info);
    if (info.output_components != channels || (int)info.output_width != image_width) {
        jpeg_destroy_decompress(&info);
        return CROP_NOT_HERE;
    }
    if (whole != NULL)
        whole_and_crop(&info, channels, top, left, height, width, flip, out, whole);
    else
        crop_only(&info, channels, top, left, height, width, flip, out);
    jpeg_finish_decompress(&info);
    jpeg_destroy_decompress(&info);
    return CROP_DONE;
}
