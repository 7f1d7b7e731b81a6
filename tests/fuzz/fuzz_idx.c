/* fuzz_idx.c -- the IDX reader (tr_idx_load): the input is an image file and a label file, split at the offset
 * its first two bytes give (little-endian, modulo the rest's size); either may be gzip'd. */
#include "data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    const size_t rest = size - 3, cut = rest ? ((size_t)data[0] | (size_t)data[1] << 8) % (rest + 1) : 0;
    const int64_t limit = data[2] & 0x0f; /* data.train_subset: 0 = all */
    const char *img = fuzz_file("img", data + 3, cut);
    const char *lbl = fuzz_file("lbl", data + 3 + cut, rest - cut);
    tr_dataset ds;
    tr_error err = {0};
    if (tr_idx_load(img, lbl, limit, &ds, &err) == TR_OK) {
        /* what the loader hands on: every sample and label readable */
        volatile float sum = 0;
        for (int64_t i = 0; i < ds.n * ds.c * ds.h * ds.w; i++) sum += ds.x[i];
        for (int64_t i = 0; i < ds.n; i++) sum += (float)ds.y[i];
        tr_dataset_free(&ds);
    }
    return 0;
}
