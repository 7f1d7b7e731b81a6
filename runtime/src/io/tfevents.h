/*
 * tfevents.h -- TensorBoard event files: TFRecord framing of Event protocol buffers (protobuf-c, from the .proto
 * files in runtime/proto/tensorboard/), the format TensorBoard's EventFileWriter writes and its EventAccumulator
 * reads (docs/tensorboard.md).
 *
 * A file is a sequence of records, each
 *   uint64 length (little-endian) | uint32 masked CRC-32C of the 8 length bytes | data[length] |
 *   uint32 masked CRC-32C of data
 * (TensorFlow's core/lib/io/record_writer.cc), data being one serialized tensorboard.Event. The first event of a
 * file carries file_version "brain.Event:2". CRC-32C is the Castagnoli CRC (polynomial 0x1EDC6F41, reflected
 * 0x82F63B78, initial value and final xor 0xFFFFFFFF: RFC 3720, sec. 12.1); the mask is TensorFlow's
 * ((crc >> 15) | (crc << 17)) + 0xa282ead8 (core/lib/hash/crc32c.h), so that a CRC over data holding CRCs is not
 * trivially zero.
 */
#ifndef TR_TFEVENTS_H
#define TR_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "error.h"

/** CRC-32C of buf[n], continuing from `crc` (0 for a new one): tr_crc32c(0, "123456789", 9) = 0xE3069283. */
uint32_t tr_crc32c(uint32_t crc, const void *buf, size_t n);

/** TensorFlow's masked CRC (tfevents.h's header comment gives the formula). */
uint32_t tr_crc32c_mask(uint32_t crc);

/** An events file open for appending records. */
typedef struct tr_tfevents {
    FILE *f;
    char path[1280];
    int failed; /**< a write failed: nothing more is written (the caller was told once) */
} tr_tfevents;

/** One hyperparameter: a number, a bool or a string (google.protobuf.Value's kinds). */
typedef struct tr_hparam {
    const char *key;
    int kind; /**< 0 number, 1 bool, 2 string */
    double number;
    int boolean;
    const char *text;
} tr_hparam;

/**
 * Create `path` (O_EXCL: an existing file is never overwritten) and write its first record: an Event at wall time
 * `wall_time` (seconds since the epoch), step 0, file_version "brain.Event:2", source_metadata writer "trainrun".
 * TR_E_RUNTIME naming the file when it cannot be created or written.
 */
int tr_tfevents_create(tr_tfevents *w, const char *path, double wall_time, tr_error *err);

/**
 * The file name TensorBoard's writer would use, events.out.tfevents.<seconds, 10 digits>.<host>.<pid>.<n>, in `dir`
 * (into out[size]), with <seconds> raised past those of the events files already in `dir` so that the new file
 * sorts after them (TensorBoard reads a run's files in the order of their names).
 */
void tr_tfevents_name(const char *dir, double wall_time, const char *host, long pid, char *out, size_t size);

/** Append one record holding data[n] (framed as above). TR_E_RUNTIME on a write error (and w->failed set). */
int tr_tfevents_record(tr_tfevents *w, const uint8_t *data, size_t n, tr_error *err);

/**
 * One Event of `n` scalars tags[i] = values[i] (Summary.Value.simple_value, float32) at `step` and `wall_time`.
 */
int tr_tfevents_scalars(tr_tfevents *w, double wall_time, int64_t step, const char *const *tags, const double *values,
                        int n, tr_error *err);

/**
 * A SessionLog START event at `step`: TensorBoard then drops the events it read before with a step >= `step` (a
 * resumed run's predecessor logged past its checkpoint; those steps are logged again, and these supersede them).
 */
int tr_tfevents_session_start(tr_tfevents *w, double wall_time, int64_t step, tr_error *err);

/**
 * The run's hyperparameters as TensorBoard's HParams plugin reads them: tag "_hparams_/session_start_info", plugin
 * "hparams", content a HParamsPluginData (version 0) with a SessionStartInfo of the n values (start_time_secs =
 * wall_time) and the null tensor TensorBoard writes with it (DT_FLOAT, shape [0]).
 */
int tr_tfevents_hparams(tr_tfevents *w, double wall_time, const tr_hparam *hp, int n, tr_error *err);

/** Flush and close (safe twice, and on a zeroed struct). TR_E_RUNTIME when the last writes failed. */
int tr_tfevents_close(tr_tfevents *w, tr_error *err);

#endif
