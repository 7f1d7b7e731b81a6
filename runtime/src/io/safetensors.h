/*
 * safetensors.h -- reading and writing the safetensors format (https://github.com/huggingface/safetensors):
 *
 *   [8 bytes: N, little-endian u64][N bytes: JSON header][data]
 *   header: {"__metadata__": {"key": "string", ...},                      (optional, string values only)
 *            "NAME": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...}
 *   offsets are relative to the start of the data section; tensors are row-major, little-endian, contiguous,
 *   packed without gaps in the order of their offsets. Loading executes no code.
 *
 * The writer streams: it takes every entry's name/dtype/shape first, writes the header, then asks a callback for
 * each entry's bytes in order, so no more than one tensor is ever buffered. It computes the file's SHA-256
 * (OpenSSL EVP) while writing and fsyncs the file before returning.
 * The reader reads the whole file and validates it strictly; every error names the file and a byte offset.
 */
#ifndef TR_SAFETENSORS_H
#define TR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "hash.h"

#define TR_ST_MAX_DIMS 8
#define TR_ST_NAME_MAX 256

/** Element types (safetensors dtype strings in comments). */
typedef enum tr_st_dtype {
    TR_ST_F32 = 0, /**< "F32" */
    TR_ST_F64,     /**< "F64" */
    TR_ST_I64,     /**< "I64" */
    TR_ST_I32,     /**< "I32" */
    TR_ST_U8,      /**< "U8"  */
    TR_ST_BOOL,    /**< "BOOL" */
    TR_ST_F16,     /**< "F16" */
    TR_ST_BF16,    /**< "BF16" */
    TR_ST_DTYPE_COUNT_
} tr_st_dtype;

/** Bytes per element of `dt` (0 for an unknown value). */
size_t tr_st_dtype_size(tr_st_dtype dt);
/** The safetensors dtype string ("F32", ...) of `dt`, or "?" */
const char *tr_st_dtype_name(tr_st_dtype dt);

/** One tensor's description. nbytes = product(shape) * dtype size (a 0-dim tensor has 1 element). */
typedef struct tr_st_tensor {
    char name[TR_ST_NAME_MAX];
    tr_st_dtype dtype;
    int ndim;
    int64_t shape[TR_ST_MAX_DIMS];
    uint64_t offset;   /**< reader: begin offset within the data section */
    uint64_t nbytes;
} tr_st_tensor;

/** A metadata entry (string -> string), as in "__metadata__". */
typedef struct tr_st_meta {
    const char *key;
    const char *value;
} tr_st_meta;

/**
 * Fill `dst` (nbytes bytes) with the bytes of entry `index`. Return 0 on success; nonzero aborts the write
 * (the callback fills `err` itself, or the writer reports a generic message).
 */
typedef int (*tr_st_fill_fn)(void *ctx, size_t index, void *dst, size_t nbytes, tr_error *err);

/**
 * Write a safetensors file at `path` (created/truncated, mode 0644): header from `tensors[0..n)` (their offset
 * fields are ignored: data is packed in array order) and `meta[0..n_meta)`, then each tensor's bytes from
 * `fill`. Names must be unique and non-empty, "__metadata__" is reserved. The file is fsync'ed and closed.
 * If sha256_hex is not NULL it receives the lowercase hex SHA-256 of the whole file (65 bytes with the NUL);
 * if size_out is not NULL, the file size in bytes. On any failure the partial file is removed.
 * Returns TR_OK, or TR_E_RUNTIME naming the file (I/O errors with strerror, bad entries with their name).
 */
int tr_st_write(const char *path, const tr_st_tensor *tensors, size_t n, const tr_st_meta *meta, size_t n_meta,
                tr_st_fill_fn fill, void *ctx, char *sha256_hex, uint64_t *size_out, tr_error *err);

/**
 * tr_st_write without the fsync: the file's write-back is started (Linux sync_file_range SYNC_FILE_RANGE_WRITE,
 * the "writeout-only" half of git's core.fsyncMethod=batch) and the caller must fsync the file before relying on
 * it. Writing several files this way and then fsyncing them in a row lets the file system commit them together
 * (one journal commit on ext4) instead of once per file. Same arguments, results and errors as tr_st_write, but
 * the digest written to hex (TR_HASH_HEX_MAX bytes, may be NULL) is `algo`'s (hash.h).
 */
int tr_st_write_unsynced(const char *path, const tr_st_tensor *tensors, size_t n, const tr_st_meta *meta,
                         size_t n_meta, tr_st_fill_fn fill, void *ctx, tr_hash_algo algo, char *hex,
                         uint64_t *size_out, tr_error *err);

/**
 * tr_st_write_unsynced from memory: the data section is `data` (the entries' bytes packed in array order, no gaps:
 * sum of their nbytes), written and hashed straight from there with no copy of its own (the header, then the data
 * in one write). Same checks, results and errors.
 */
int tr_st_write_packed_unsynced(const char *path, const tr_st_tensor *tensors, size_t n, const tr_st_meta *meta,
                                size_t n_meta, const void *data, tr_hash_algo algo, char *hex, uint64_t *size_out,
                                tr_error *err);

/** Start write-back of `fd`'s dirty pages without waiting (sync_file_range on Linux; a no-op elsewhere). */
void tr_start_writeback(int fd);

/** A loaded file: the whole file in memory plus the parsed header. */
typedef struct tr_st_file {
    uint8_t *buf;            /**< whole file                                   */
    size_t size;
    const uint8_t *data;     /**< start of the data section inside buf         */
    tr_st_tensor *tensors;   /**< n entries, in the order of the JSON header   */
    size_t n;
    tr_st_meta *meta;        /**< n_meta entries; strings owned by the file    */
    size_t n_meta;
} tr_st_file;

/**
 * Read and validate `path`. Errors (TR_E_RUNTIME), each naming the file and byte offset: cannot open/read;
 * shorter than 8 bytes; header length past the end of the file; header not valid JSON / not an object; an entry
 * without dtype/shape/data_offsets or with an unknown dtype, negative or non-integer dims, end < begin, size not
 * equal to product(shape) * dtype size, offsets beyond the data section, overlapping entries or gaps (the data
 * must be exactly covered), a non-string metadata value.
 */
int tr_st_read(const char *path, tr_st_file *out, tr_error *err);

/** The entry called `name`, or NULL. */
const tr_st_tensor *tr_st_find(const tr_st_file *f, const char *name);

/** The metadata value for `key`, or NULL. */
const char *tr_st_meta_get(const tr_st_file *f, const char *key);

/** Pointer to an entry's bytes inside the loaded file. */
const void *tr_st_data(const tr_st_file *f, const tr_st_tensor *t);

/** Free a loaded file (safe on a zeroed struct). */
void tr_st_close(tr_st_file *f);

/**
 * SHA-256 of the file at `path` as lowercase hex into hex[65]; the size into *size (may be NULL).
 * Returns TR_OK or TR_E_RUNTIME naming the file.
 */
int tr_sha256_file(const char *path, char hex[65], uint64_t *size, tr_error *err);

#endif
