/*
 * npy.h -- NumPy .npy arrays and .npz archives of them (data.format: npy).
 *
 * The .npy format (numpy.lib.format, versions 1.0, 2.0 and 3.0): the magic "\x93NUMPY", a major and minor version
 * byte, the header length (uint16 little-endian for 1.0, uint32 for 2.0 / 3.0), then the header -- a Python dict
 * literal {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), } padded with spaces and ended by
 * '\n' -- then the elements, C order. An .npz (numpy.savez / savez_compressed) is a zip archive of .npy members,
 * each stored or deflated.
 *
 * Every byte is untrusted: the header is parsed strictly (exactly the three keys, once each; only the literals
 * numpy writes), its length is bounded (TR_NPY_MAX_HEADER bytes), the shape's product is checked for overflow and
 * against the bytes the file actually has before anything is allocated, and trailing bytes are an error. Accepted
 * dtypes: float32 '<f4', float64 '<f8', uint8 '|u1', int32 '<i4', int64 '<i8'. Refused with a message saying why:
 * big-endian ('>f4'), fortran_order True, object ('|O': a pickle), and every other dtype.
 * Every error names the file (for an .npz member, "FILE.npz:member") and the byte offset where the problem is:
 * "FILE: byte OFFSET: message".
 */
#ifndef TR_NPY_H
#define TR_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "data.h"
#include "error.h"

#define TR_NPY_MAX_DIMS 8
#define TR_NPY_MAX_HEADER 65536 /* bytes of header text: numpy itself refuses more than 10000 by default */

typedef enum tr_npy_dtype {
    TR_NPY_FLOAT32 = 0,
    TR_NPY_FLOAT64,
    TR_NPY_UINT8,
    TR_NPY_INT32,
    TR_NPY_INT64
} tr_npy_dtype;

/** A parsed array: header facts, and (after a load) its elements. */
typedef struct tr_npy_array {
    tr_npy_dtype dtype;
    size_t elem_size;                  /**< bytes per element: 4, 8, 1, 4, 8                         */
    int ndim;                          /**< 0 .. TR_NPY_MAX_DIMS                                    */
    int64_t shape[TR_NPY_MAX_DIMS];
    int64_t count;                     /**< product of shape (1 for ndim 0)                          */
    uint64_t data_offset;              /**< byte offset of the first element in the .npy stream     */
    void *data;                        /**< count x elem_size bytes, native (little-endian) order; malloc'd by
                                            the loaders, NULL after tr_npy_parse_header             */
} tr_npy_array;

/** dtype's numpy name ("float32", ...). */
const char *tr_npy_dtype_name(tr_npy_dtype dtype);

/**
 * Parse the magic, version and header of an .npy stream from buf[0..len) (only the header's bytes need be there)
 * into *out (data stays NULL). `name` names the stream in messages. Errors (TR_E_RUNTIME): not an .npy (magic),
 * unknown version, a header longer than TR_NPY_MAX_HEADER or than the buffer, a malformed dict (naming the byte),
 * a refused dtype, fortran_order True, more than TR_NPY_MAX_DIMS dims, a shape whose byte size overflows.
 */
int tr_npy_parse_header(const uint8_t *buf, size_t len, const char *name, tr_npy_array *out, tr_error *err);

/**
 * Parse a whole .npy held in memory, buf[0..len): the header, then exactly count x elem_size bytes of elements,
 * copied into out->data (malloc'd; free with tr_npy_free). The reader's entry point for fuzzing: no I/O, every
 * byte checked. Errors: those of tr_npy_parse_header; truncated or trailing data (naming where); out of memory.
 */
int tr_npy_parse(const uint8_t *buf, size_t len, const char *name, tr_npy_array *out, tr_error *err);

/**
 * Parse an .npz (zip) archive held in memory and load its member `member` ("x" or "x.npy"; NULL or "" takes the
 * only member, and an archive of several is then an error listing them). Stored (method 0) and deflated
 * (method 8, via zlib) members; the CRC-32 is checked. Refused: zip64 archives, encrypted members, other methods,
 * a member whose sizes disagree with its .npy header. Errors name "name:member" and the byte offset in the
 * archive (or in the member's uncompressed .npy).
 */
int tr_npz_parse(const uint8_t *buf, size_t len, const char *name, const char *member, tr_npy_array *out,
                 tr_error *err);

/**
 * Load an array from a file: "PATH.npy", or "PATH.npz" / "PATH.npz:MEMBER" (the member as tr_npz_parse). An .npy
 * is read header first and its data straight into the array once the file's size is known to match the shape.
 * Errors (TR_E_RUNTIME): cannot open or read (naming the file), and those of the parsers.
 */
int tr_npy_load(const char *path, tr_npy_array *out, tr_error *err);

/** Free an array's data and zero it (safe on a zeroed struct). */
void tr_npy_free(tr_npy_array *a);

/**
 * Write a C-order little-endian .npy version 1.0 file (the header padded so the data starts at a multiple of 64,
 * as numpy does). For tests and exports. Errors: TR_E_RUNTIME naming the file.
 */
int tr_npy_save(const char *path, tr_npy_dtype dtype, const int64_t *shape, int ndim, const void *data,
                tr_error *err);

/**
 * The npy part of a run's data set-up (data.format: npy): data.train_inputs / data.train_targets and, when given
 * and a test set is wanted (eval.test_at_end or eval.split: test), data.test_inputs / data.test_targets, resolved
 * under data.root (absolute; ./ or ../ relative to the config file). Inputs [N, ...] of rank 1 to 4 (a sample of
 * rank 0 to 3: [], [D], [H, W] or [C, H, W]) of any accepted dtype are converted to float32 as they are (no
 * scaling); a non-finite value is an error naming its byte. Targets by data.target: class -- [N] integers >= 0
 * (uint8, int32, int64); multi_hot -- [N, K] (or [N]) values 0 or 1; regression -- [N, K] (or [N]) numbers.
 * Inputs and targets must agree on N. Then data.train_subset / data.test_subset, the validation split of
 * data.val_size (tr_dataset_split, as the idx format), and data.standardize (per feature, training statistics).
 * data.mean / data.std are not applied (they belong to the idx format's pixels).
 * Errors: TR_E_RUNTIME naming the file and byte offset (reader errors, a bad value); TR_E_CONFIG naming the key
 * (shapes that do not fit the data.target, N mismatch, data.val_size too large).
 */
int tr_npy_setup(const tr_config *cfg, tr_dataset *train, tr_dataset *val, tr_dataset *test, tr_error *err);

#endif
