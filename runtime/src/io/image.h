/*
 * image.h -- PNG and JPEG files decoded to 8-bit pixels (libpng, libjpeg-turbo's TurboJPEG API), converted to one
 * of PIL's modes, resized and centre-cropped as torchvision's transforms do it (docs/image_folders.md).
 *
 * Pixels are interleaved, row-major [h, w, c] uint8: c = 1 (L, grayscale), 3 (RGB) or 4 (RGBA).
 * Every byte decoded is untrusted: a file that is not a PNG or a JPEG, a truncated or corrupt one, and one whose
 * header claims more than `max_pixels` pixels each fail with TR_E_RUNTIME and a message naming the file; nothing
 * is allocated for an image before its header's size has been checked against `max_pixels`. Pure C (no libtorch):
 * tests/fuzz/fuzz_image.c drives tr_image_decode.
 */
#ifndef TR_IMAGE_H
#define TR_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/** PIL's Image.MAX_IMAGE_PIXELS (Pillow 9): the default bound on width x height (data.max_image_pixels). */
#define TR_IMAGE_DEFAULT_MAX_PIXELS 89478485

/** What a file holds, from its header alone (tr_image_probe). */
typedef struct tr_image_info {
    int64_t w, h;       /**< pixels                                                   */
    int channels;       /**< the file's own: 1 gray, 2 gray + alpha, 3 RGB, 4 RGBA     */
    const char *format; /**< "PNG" or "JPEG"                                          */
} tr_image_info;

/** Decoded pixels: px [h, w, c] uint8, malloc'd (tr_image_free). */
typedef struct tr_image {
    uint8_t *px;
    int64_t w, h;
    int c;
} tr_image;

/**
 * The header of the PNG or JPEG file in buf[len] (the format is found by its signature bytes, not by the file's
 * name). `name` names the file in messages. Errors (TR_E_RUNTIME): empty file; not a PNG or JPEG (the first bytes
 * shown); a header that is truncated or corrupt; width or height 0; width x height above max_pixels; a PNG bit depth
 * or JPEG colour space trainrun does not decode (CMYK / YCCK JPEGs).
 */
int tr_image_probe(const uint8_t *buf, size_t len, const char *name, int64_t max_pixels, tr_image_info *info,
                   tr_error *err);

/**
 * Decode buf[len] (PNG or JPEG) into `out` with `channels` channels (1: L, 3: RGB, 4: RGBA), converting as PIL's
 * Image.convert does: gray to RGB repeats the value; RGB to L is ITU-R 601-2 luma in PIL's fixed point,
 * L = (299/1000 R + 587/1000 G + 114/1000 B) as (19595 R + 38470 G + 7471 B + 2^15) >> 16; an alpha channel is
 * dropped for L and RGB and is 255 where the file has none. PNG: palette images are expanded, bit depths 1, 2 and
 * 4 scaled to 8 bits (libpng's png_set_expand), 16-bit samples keep their high byte (png_set_strip_16), a tRNS
 * chunk becomes alpha. JPEG: libjpeg-turbo's accurate integer IDCT and fancy upsampling (its defaults, as PIL's),
 * a colour JPEG decoded to RGB first; any warning from the decoder (corrupt data) is an error.
 * Errors (TR_E_RUNTIME, naming the file): those of tr_image_probe; truncated or corrupt image data; out of memory.
 * On failure `out` is zeroed.
 */
int tr_image_decode(const uint8_t *buf, size_t len, const char *name, int channels, int64_t max_pixels, tr_image *out,
                    tr_error *err);

/**
 * Resize `in` to out_w x out_h with PIL's antialiased bilinear filter (Image.resize(..., Image.BILINEAR), which is
 * what torchvision.transforms.Resize does to a PIL image by default): a separable triangle filter whose support
 * grows with the downscaling factor, horizontal pass first, each pass in PIL's 22-bit fixed point with rounding and
 * clipping to 8 bits (Pillow, src/libImaging/Resample.c). Bit for bit PIL's result for L and RGB (RGBA is resized
 * channel by channel, where PIL premultiplies alpha). An image already out_w x out_h is copied. `out` is
 * allocated; TR_E_RUNTIME when out of memory.
 */
int tr_image_resize(const tr_image *in, int64_t out_h, int64_t out_w, tr_image *out, tr_error *err);

/**
 * torchvision's transforms.Resize(size) with one int: the output size of an h x w image whose shorter side becomes
 * `size`, the longer int(size * long / short) (truncated, as torchvision's _compute_resized_output_size).
 */
void tr_image_shorter_side_size(int64_t h, int64_t w, int64_t size, int64_t *out_h, int64_t *out_w);

/**
 * torchvision's transforms.CenterCrop((crop_h, crop_w)): the window at top = round((h - crop_h) / 2), left =
 * round((w - crop_w) / 2) (Python's round: halves to even); an image smaller than the crop is first padded with
 * 0 (black) on each side as torchvision pads it. `out` is allocated; TR_E_RUNTIME when out of memory.
 */
int tr_image_center_crop(const tr_image *in, int64_t crop_h, int64_t crop_w, tr_image *out, tr_error *err);

/** Free an image's pixels and zero it (safe on a zeroed struct). */
void tr_image_free(tr_image *im);

/**
 * The decoders' versions, each as one number: libpng's as it runs (png_access_version_number: 10639 for 1.6.39),
 * libjpeg-turbo's as built against (LIBJPEG_TURBO_VERSION_NUMBER: 2001005 for 2.1.5; 0 when its header does not
 * say). A different version may decode a JPEG to different pixels (data.cache: disk keys its files by them).
 */
void tr_image_decoder_versions(uint32_t *png, uint32_t *jpeg);

#endif
