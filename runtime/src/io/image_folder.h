/*
 * image_folder.h -- data.format image_folder: torchvision's ImageFolder layout (ROOT/CLASS/.../FILE.png), read
 * lazily: loading lists the files; a sample is decoded (image.h), resized, normalised and augmented when a batch
 * is gathered, on the loader's prefetch thread during training (docs/image_folders.md).
 *
 * The samples and their order are ImageFolder's: the classes are the sorted names of ROOT's sub-folders (symbolic
 * links followed), class index = position in that list; each class folder is walked recursively, its directories
 * in the sorted order of their paths and each one's files in sorted order (sorted(os.walk(..., followlinks=True))),
 * keeping the files whose names end, in any case, in .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp
 * (torchvision's IMG_EXTENSIONS; only PNG and JPEG decode). Other files are ignored, as ImageFolder ignores them.
 * A validation or test folder maps its sub-folders to the training folder's classes by name.
 */
#ifndef TR_IMAGE_FOLDER_H
#define TR_IMAGE_FOLDER_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "data.h"
#include "error.h"

#define TR_IMAGE_MAX_FILE_BYTES ((int64_t)1 << 30) /**< a file larger than 1 GiB is refused unread       */
#define TR_IMAGE_MAX_DEPTH 32                      /**< nested folders under a class folder             */
#define TR_IMAGE_MAX_CLASSES 65536

/** How every sample of an image set is made from its file (the data.* keys). */
typedef struct tr_image_opts {
    int channels;           /**< data.image_mode: 1 (L), 3 (RGB), 4 (RGBA)                               */
    int64_t h, w;           /**< the sample's size: data.image_size, else the first training image's      */
    int64_t resize_shorter; /**< data.resize_shorter: 0 = resize to h x w; S > 0 = Resize(S) + CenterCrop   */
    int64_t max_pixels;     /**< data.max_image_pixels                                                     */
    int resize;             /**< 1: data.image_size was given (images of other sizes are resized)          */
    float mean[TR_MAX_CHANNELS], std[TR_MAX_CHANNELS]; /**< data.mean / data.std, as floats                 */
    int n_norm; /**< their count: 1 (every channel) or channels                              */
} tr_image_opts;

/** The files of one split: names relative to root, the class list they index, how to make samples. */
typedef struct tr_image_set {
    char root[TR_PATH_MAX];
    char *names;       /**< NUL-terminated names, back to back                                         */
    int64_t *name_off; /**< [n] offset of sample i's name in names                                     */
    int64_t n;
    char **classes; /**< [n_classes] class names (the training folder's), malloc'd                 */
    int64_t n_classes;
    int labeled; /**< 0: a folder of unlabeled images (trainrun predict --images): labels are -1   */
    tr_image_opts opts;
    int64_t skipped;      /**< files (and folders) skipped as bad at load (data.skip_bad_files)           */
    char skip_note[1024]; /**< the first of them and why                                                  */
    /* data.cache: every sample's pixels [h, w, c] uint8 (decoded, resized, not yet normalised or augmented), kept
     * at its first decode; NULL when not cached. cache_state[i]: 0 empty, 1 being written, 2 ready (atomic: the
     * loader's thread and the loop's thread may both decode). */
    uint8_t *cache;
    _Atomic unsigned char *cache_state;
    int64_t cache_bytes; /**< the cache's size, 0 when not cached                                           */
    struct tr_image_disk *disk; /**< data.cache: disk: this set's cache file (image_folder.c); NULL: none      */
} tr_image_set;

/** Per-thread working memory of sample decoding (a file's bytes); zero-initialise, free with tr_image_buf_free. */
typedef struct tr_image_buf {
    uint8_t *file;
    size_t cap;
    float *sample; /**< one sample [c, h, w] before augmentation */
    size_t sample_cap;
    float *rows; /**< tr_dataset_rows' batch of decoded samples */
    size_t rows_cap;
} tr_image_buf;

void tr_image_buf_free(tr_image_buf *b);

/**
 * data.format image_folder: the training set from data.train_root, validation from data.val_root (else data.val_size
 * carved from training as tr_dataset_split carves it), the test set from data.test_root (when eval.test_at_end or
 * eval.split test). Paths resolve as data files do (tr_config_resolve_data_path). The data sets' x is NULL and
 * `images` set; y holds the labels. data.train_subset / test_subset keep the first N files in ImageFolder order.
 * Errors: TR_E_CONFIG for a missing or unreadable root (naming the key); TR_E_RUNTIME naming the folder or file for
 * an empty class folder, a symbolic link loop, a folder nested deeper than TR_IMAGE_MAX_DEPTH, a file that cannot
 * be read or, with data.skip_bad_files, every file is decoded once here and the bad ones are skipped and counted
 * (tr_image_set.skipped) instead; a validation or test sub-folder whose name is not a training class.
 * data.cache: memory gives every set a cache of its decoded samples (tr_image_set.cache; TR_E_CONFIG when they take
 * more than the memory available, TR_E_RUNTIME when it cannot be allocated); auto does so when all sets' samples
 * together take at most a quarter of the memory available (tr_memory_available), else (and for none) no set has
 * one. Samples are the same bytes either way: the cache changes when files are read, never what a batch holds.
 * data.cache: disk is memory, and each set's cache also lives in a file across runs (tr_image_disk_* below).
 */
int tr_image_folder_setup(const tr_config *cfg, tr_dataset *train, tr_dataset *val, tr_dataset *test, tr_error *err);

/**
 * A folder of unlabeled images (trainrun predict --images: the image files directly in `dir`, sorted by name, no
 * class sub-folders) as a data set whose samples are made as `cfg`'s data.* keys say (the size: data.image_size,
 * else the folder's first image's), naming the n_classes `classes` (copied), labels -1. Errors: TR_E_CONFIG when dir
 * is not a folder; TR_E_RUNTIME naming it when it holds no image file or its first image cannot be read.
 */
int tr_image_folder_unlabeled(const tr_config *cfg, const char *dir, char *const *classes, int64_t n_classes,
                              tr_dataset *out, tr_error *err);

/** Sample i's file path (root/name) into out[size]. */
void tr_image_set_path(const tr_image_set *s, int64_t i, char *out, size_t size);

/**
 * Decode sample i of `s` into dst [c, h, w] float32: read the file, decode (image.h), resize as opts say, scale to
 * [0, 1] (x / 255) and normalise ((x - mean) / std in float32, as tr_dataset_normalize). With a cache
 * (tr_image_set.cache), a sample decoded before is normalised from its cached pixels and no file is read; one
 * decoded now is kept there. Thread-safe for distinct `buf`s. Errors (TR_E_RUNTIME): the
 * file cannot be read, fails to decode (tr_image_decode's), or without data.image_size is not h x w; the message
 * names the file.
 */
int tr_image_set_sample(const tr_image_set *s, int64_t i, float *dst, tr_image_buf *buf, tr_error *err);

/**
 * tr_dataset_gather (and, `a` enabled, tr_dataset_gather_augmented) for an image data set: samples idx[0..count)
 * decoded into xbuf [count, c, h, w], labels into ybuf. Errors: tr_image_set_sample's.
 */
int tr_image_gather(const tr_dataset *ds, const int64_t *idx, int64_t count, const tr_augment *a, uint64_t seed,
                    uint64_t epoch, float *xbuf, int64_t *ybuf, tr_image_buf *buf, tr_error *err);

/**
 * The contiguous rows i .. i + n of `ds` as float32 [n, c, h, w]: a pointer into ds->x for an in-memory data set,
 * else decoded into buf (an image set). NULL after filling err (tr_image_set_sample's errors).
 */
const float *tr_dataset_rows(const tr_dataset *ds, int64_t i, int64_t n, tr_image_buf *buf, tr_error *err);

/*
 * data.cache: disk. Each set's decoded pixels are kept in DIR/KEY.u8, DIR = data.cache_dir (else
 * $XDG_CACHE_HOME/trainrun/decoded, else $HOME/.cache/trainrun/decoded; made with mode 0700), KEY = the hex
 * XXH3-128 of TR_IMAGE_DISK_VERSION, the decoders' versions (tr_image_decoder_versions), the decode settings
 * (channels, h, w, resize_shorter, resize, max_pixels), the set's root (realpath) and, for every sample in the set's
 * order, its name, the size, mtime and ctime (ns) and inode of its file (stat, links followed) and its label: a
 * file touched, replaced, renamed, added or removed makes another key. The file: a 64-byte little-endian header
 *   0 "TRDC"  4 u32 version  8 key[16]  24 u64 n  32 u32 h  36 u32 w  40 u32 c  44 u32 0
 *   48 u64 XXH3-64 of the payload  56 u64 XXH3-64 of bytes 0..55
 * then the payload, uint8 [n][h][w][c] (the cache's bytes). At set-up a file that passes every check (magic,
 * version, header checksum, key, dimensions, exact size, payload checksum) fills the cache: no image file is read
 * in any epoch. One that fails is ignored with a warning naming it and why (tr_image_disk_note), and replaced once
 * the run has decoded every sample; so is a missing one. The file is written by whichever thread decodes the last
 * sample not yet kept: to a temporary file in DIR (mkstemp), fsync'd, renamed over KEY.u8 (two processes writing
 * the same key leave one whole file), DIR fsync'd. A failure to write is an outcome to report, never an error.
 */
#define TR_IMAGE_DISK_VERSION 1u /**< bump when the same settings would make other pixels (decode, resize, crop) */

/** What set-up found for this set's cache file, a line for the run's log, and *warn = 1 when it is a warning (a
 * file ignored, a folder that cannot be made); NULL without a disk cache. */
const char *tr_image_disk_note(const tr_image_set *s, int *warn);

/** Once the cache file has been written or failed to be (after the run decoded every sample): its outcome line into
 * out[size] and *warn, returning 1, once; 0 before and after that, and without a disk cache. One thread. */
int tr_image_disk_outcome(tr_image_set *s, char *out, size_t size, int *warn);

/**
 * data.cache: disk: decode every sample of `s` not kept yet, so that its file is written now: the end of a training
 * epoch that left some out (train.drop_last's incomplete batch, the other ranks' shards). Nothing without a file to
 * write or once every sample is kept. A sample that fails to decode gives the file up (an outcome warning; the run
 * meets the error where it uses the sample, as without the cache). Thread-safe as tr_image_set_sample.
 */
void tr_image_disk_complete(tr_image_set *s, tr_image_buf *buf);

/** Samples read from this set's cache file at set-up, and samples written to it in this process (0 or n). */
void tr_image_disk_counts(const tr_image_set *s, int64_t *read, int64_t *written);

/** The cache file's path (set-up decides it); "" without a disk cache. */
const char *tr_image_disk_path(const tr_image_set *s);

/* Between image_folder.c and image_cache.c, which holds the disk cache: data.cache: disk for the set of `ds`, whose
 * cache has just been allocated (its file's key and path, and the file read into the cache when it is there and
 * sound: every sample then ready; never an error, what it found is tr_image_disk_note's); and the call made each
 * time a sample of `s` is kept in its cache, by which the thread keeping the last one writes the file (temp file,
 * fsync, rename; its outcome is tr_image_disk_outcome's). */
void tr_image_disk_setup(const tr_config *cfg, tr_dataset *ds);
void tr_image_disk_kept(const tr_image_set *s);

/** Free an image set (safe on NULL). */
void tr_image_set_free(tr_image_set *s);

/**
 * The classes as a JSON document {"classes": [names...]} (index = class) into a malloc'd string; NULL when out of
 * memory.
 */
char *tr_image_classes_json(const tr_image_set *s);

#endif
