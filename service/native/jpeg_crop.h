/* The native JPEG crop's entry points (jpeg_crop.c: one JPEG; crop_batch.c: a batch of them). */
#ifndef SHARDSTREAM_JPEG_CROP_H
#define SHARDSTREAM_JPEG_CROP_H
#include <stdint.h>

#define CROP_DONE 0
#define CROP_NOT_HERE 1 /* not a JPEG this path decodes as the Python path does: decode it there */

/* What shardstream_jpeg_header finds: the kinds the native crop takes (simplejpeg's names). */
#define KIND_OTHER 0
#define KIND_444 1
#define KIND_422 2
#define KIND_420 3
#define KIND_440 4
#define KIND_411 5
#define KIND_GRAY 6

void shardstream_jpeg_header(const uint8_t *data, unsigned long size, int32_t *out);

int shardstream_jpeg_crop(const uint8_t *data, unsigned long size, int channels, int image_width,
                          int image_height, int top, int left, int height, int width, int flip,
                          uint8_t *out, uint8_t *whole);

void shardstream_crop_pixels(const uint8_t *pixels, int image_width, int channels, int top, int left, int height,
                             int width, int flip, uint8_t *out);

#endif
