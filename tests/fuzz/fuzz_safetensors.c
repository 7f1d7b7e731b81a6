/* fuzz_safetensors.c -- the safetensors reader (tr_st_read): the whole file, then every entry's bytes and every
 * metadata value touched, as a checkpoint load does. */
#include "fuzz_util.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file("st", data, size);
    tr_st_file f = {0};
    tr_error err = {0};
    if (tr_st_read(path, &f, &err) == TR_OK) {
        volatile uint8_t x = 0;
        for (size_t i = 0; i < f.n; i++) {
            const uint8_t *p = tr_st_data(&f, &f.tensors[i]);
            for (size_t b = 0; b < (size_t)f.tensors[i].nbytes; b++) x ^= p[b];
            if (tr_st_find(&f, f.tensors[i].name) == NULL) abort(); /* every listed name is found */
        }
        for (size_t i = 0; i < f.n_meta; i++)
            if (!tr_st_meta_get(&f, f.meta[i].key)) abort();
        tr_st_close(&f);
    }
    return 0;
}
