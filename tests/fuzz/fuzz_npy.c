/* fuzz_npy.c -- the NumPy readers on a buffer: tr_npy_parse (a whole .npy), tr_npz_parse (a zip of .npy members,
 * stored or deflated) for the only member and for member "x", and tr_npy_parse_header on every prefix length the
 * header could stop at. What a parse accepts is checked: the element count is the shape's product, the data's
 * bytes are all readable, and the header's facts agree with the full parse's. */
#include "fuzz_util.h"
#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const tr_npy_array *a)
{
    if (a->ndim < 0 || a->ndim > TR_NPY_MAX_DIMS) abort();
    int64_t count = 1;
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] < 0) abort();
        count *= a->shape[i]; /* cannot overflow: the parser refused that */
    }
    if (count != a->count) abort();
    if (a->elem_size != 1 && a->elem_size != 4 && a->elem_size != 8) abort();
    if (!a->data) abort();
    volatile uint8_t x = 0;
    const uint8_t *p = a->data;
    for (size_t b = 0; b < (size_t)a->count * a->elem_size; b++) x ^= p[b];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tr_npy_array a, h;
    tr_error err = {0};
    if (tr_npy_parse(data, size, "fuzz.npy", &a, &err) == TR_OK) {
        check(&a);
        /* the header alone, given exactly the header's bytes, parses to the same facts */
        if (tr_npy_parse_header(data, (size_t)a.data_offset, "fuzz.npy", &h, &err) != TR_OK) abort();
        if (h.count != a.count || h.ndim != a.ndim || h.dtype != a.dtype || h.data_offset != a.data_offset ||
            h.data != NULL)
            abort();
        tr_npy_free(&a);
        if (a.data) abort(); /* tr_npy_free zeroes */
    } else {
        tr_npy_free(&a); /* safe on whatever a failed parse left */
        if (tr_npy_parse_header(data, size, "fuzz.npy", &h, &err) == TR_OK && h.data) abort();
    }
    static const char *const members[] = {NULL, "x"};
    for (size_t m = 0; m < sizeof members / sizeof members[0]; m++) {
        if (tr_npz_parse(data, size, "fuzz.npz", members[m], &a, &err) == TR_OK) check(&a);
        tr_npy_free(&a);
    }
    return 0;
}
