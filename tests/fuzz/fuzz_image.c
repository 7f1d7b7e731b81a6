/* fuzz_image.c -- the image decoders on a buffer: tr_image_probe and tr_image_decode (PNG via libpng, JPEG via
 * TurboJPEG, found by their signatures) into 1, 3 or 4 channels (the first byte picks; the rest is the file), then
 * the resize and centre crop a data set applies. What a decode accepts is checked: its size is the probe's, within
 * the pixel bound, and every pixel is readable. */
#include "fuzz_util.h"
#include "image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static const int k_channels[] = {1, 3, 4};
    const int channels = k_channels[data[0] % 3];
    const uint8_t *buf = data + 1;
    const size_t len = size - 1;
    const int64_t max_pixels = (int64_t)1 << 22; /* 4 Mpx: the bound is what is under test, not the machine */
    tr_error err = {0};
    tr_image_info info;
    const int probed = tr_image_probe(buf, len, "fuzz", max_pixels, &info, &err) == TR_OK;
    tr_image im;
    if (tr_image_decode(buf, len, "fuzz", channels, max_pixels, &im, &err) != TR_OK) {
        if (im.px) abort(); /* a failed decode leaves nothing */
        return 0;
    }
    if (!probed || im.w != info.w || im.h != info.h || im.c != channels) abort();
    if (im.w < 1 || im.h < 1 || im.w * im.h > max_pixels) abort();
    volatile uint8_t x = 0;
    for (size_t i = 0; i < (size_t)(im.w * im.h) * (size_t)channels; i++) x ^= im.px[i];
    /* what a sample goes through: a resize to a size picked by the data, and a centre crop with padding */
    const int64_t oh = 1 + data[0] % 17, ow = 1 + (int64_t)(len % 23);
    tr_image r, c;
    if (tr_image_resize(&im, oh, ow, &r, &err) == TR_OK) {
        if (r.h != oh || r.w != ow) abort();
        if (tr_image_center_crop(&r, oh + 3, ow / 2 + 1, &c, &err) == TR_OK) {
            for (size_t i = 0; i < (size_t)(c.w * c.h) * (size_t)channels; i++) x ^= c.px[i];
            tr_image_free(&c);
        }
        tr_image_free(&r);
    }
    tr_image_free(&im);
    return 0;
}
