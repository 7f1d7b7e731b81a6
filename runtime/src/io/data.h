/*
 * data.h -- in-memory data sets, the IDX reader, normalisation, the validation split and the epoch order.
 *
 * A tr_dataset holds n samples of float32 features, shape [n, c, h, w] (c*h*w per sample; h = w = 1 for flat
 * features), and int64 labels [n]. Pixel data from IDX files is scaled to [0, 1] (x / 255) at load.
 */
#ifndef TR_DATA_H
#define TR_DATA_H

#include <stdint.h>

#include "error.h"
#include "text.h"

typedef struct tr_dataset {
    float *x;          /**< [n, c, h, w] float32, malloc'd                 */
    int64_t *y;        /**< [n] int64 class labels, malloc'd               */
    int64_t n;         /**< samples                                        */
    int64_t c, h, w;   /**< per-sample shape                               */
    int64_t num_classes; /**< max label + 1; for float targets, t_cols      */
    float *t;          /**< [n, t_cols] float32 targets (multi-hot or regression), malloc'd; NULL for class labels
                            (y is then all zeros)                                                             */
    int64_t t_cols;    /**< target columns; 0 without float targets       */
    int unlabeled;     /**< 1: inputs without targets (npy data.test_inputs alone; idx data.test_labels empty; a
                            csv test table without the target columns; `trainrun predict --images`):
                            y all zeros, t NULL; for predictions, never evaluated                           */
    /* Token data (data.format text / tokens; text.h): x, y and t are NULL, a sample is a window of `block`
     * token ids (c = block, h = w = 1) with its `block` next-token targets, and n counts windows: the training
     * split's (n_tokens - 1) / block windows make an epoch (their starts are drawn, tr_window_start), the
     * validation split's are the consecutive windows i x block. num_classes = vocab.size. */
    uint32_t *tokens;  /**< [n_tokens] token ids, malloc'd; NULL for other data */
    int64_t n_tokens;
    int64_t block;     /**< tokens per window (data.block_size)             */
    tr_vocab vocab;    /**< the training split's vocabulary (zeroed in val)  */
    /* Image folders (data.format image_folder; image_folder.h): x is NULL, samples are decoded from their files
     * when gathered (tr_image_gather, tr_dataset_rows); y holds the labels. Owned: tr_dataset_free frees it. */
    struct tr_image_set *images;
    void (*free_images)(struct tr_image_set *); /**< how tr_dataset_free frees `images` (image_folder.c's)      */
} tr_dataset;

/**
 * Read an IDX image file (magic 0x00000803, ubyte, [n, rows, cols]) and an IDX label file (magic 0x00000801,
 * ubyte, [n]); each may be gzip-compressed (detected by content, via zlib) or plain. `limit` > 0 keeps only the
 * first `limit` samples. Output: c = 1, h = rows, w = cols, x scaled to [0, 1]. labels_path NULL: the images
 * alone (out->unlabeled = 1, y all zeros, num_classes 0: what `trainrun predict` reads).
 * Errors, each naming the file and the byte offset in the decompressed stream: TR_E_CONFIG for what the files
 * are (the user's input): no such file, wrong magic number (offset 0), truncated header or data (offset where
 * bytes ran out), corrupt gzip data, image/label count mismatch; TR_E_RUNTIME for the machine's faults: an I/O
 * error, memory. A label > 254 is allowed but num_classes is max+1.
 */
int tr_idx_load(const char *images_path, const char *labels_path, int64_t limit, tr_dataset *out, tr_error *err);

/** Free a dataset's arrays and zero it (safe on a zeroed struct). */
void tr_dataset_free(tr_dataset *ds);

/** x[:, ch] = (x[:, ch] - mean[ch]) / std[ch] for each channel; n_ch must be 1 (broadcast) or ds->c. */
int tr_dataset_normalize(tr_dataset *ds, const double *mean, const double *std, int n_ch, tr_error *err);

/**
 * Carve a validation set of `val_size` samples from `train` deterministically: the samples at the first val_size
 * positions of the permutation tr_permutation(seed, UINT64_MAX) go to `val` (in that order), the rest stay in
 * `train` in their original order. val_size 0 leaves val empty. Error if val_size >= train->n.
 */
int tr_dataset_split(tr_dataset *train, int64_t val_size, uint64_t seed, tr_dataset *val, tr_error *err);

/**
 * tr_dataset_split for the config key that asked for it (data.val_size, csv's data.test_size): its TR_E_CONFIG
 * message led by the key ("data.val_size: ...") so the user sees which setting to change; other errors as
 * tr_dataset_split gives them. The idx, npy and csv set-ups share it.
 */
int tr_dataset_carve(tr_dataset *from, int64_t size, uint64_t seed, tr_dataset *to, const char *key, tr_error *err);

/**
 * perm[0..n) = the epoch's sample order: a Fisher-Yates shuffle driven by a counter-based generator
 * (splitmix64 of seed, epoch and the draw index), so the order is a pure function of (seed, epoch).
 */
void tr_permutation(uint64_t seed, uint64_t epoch, int64_t n, int64_t *perm);

/** Copy samples idx[0..count) into xbuf ([count, c, h, w]) and ybuf ([count]). */
void tr_dataset_gather(const tr_dataset *ds, const int64_t *idx, int64_t count, float *xbuf, int64_t *ybuf);

/**
 * Training-time augmentation of image samples [c, h, w], applied as they are gathered into a batch.
 * The two transforms of the standard CIFAR / Fashion-MNIST recipe, in torchvision's order (He et al. 2016,
 * "Deep Residual Learning", sec. 4.2; torchvision.transforms.RandomCrop(size, padding) then RandomHorizontalFlip(p)):
 *   random crop: the sample is padded by `crop_padding` pixels on every side with `fill[ch]` (the normalised
 *     value of a black pixel, so padding matches torchvision's fill=0 before Normalize) and an h x w window is cut
 *     at an offset (dy, dx) drawn uniformly from [0, 2 * crop_padding]^2;
 *   horizontal flip: with probability `hflip` the window is mirrored left to right.
 * The draws are a pure function of (seed, epoch, sample index): the same sample is augmented the same way in a
 * fresh process, after a resume, with or without prefetching and on any rank, and differently in every epoch.
 */
typedef struct tr_augment {
    int64_t crop_padding;          /**< pixels of padding on each side; 0 = no crop */
    double hflip;                  /**< probability of a horizontal flip, [0, 1]; 0 = never */
    float fill[4];                 /**< padding value per channel: n_fill = c (<= 4, TR_MAX_CHANNELS) or 1 (all) */
    int n_fill;
} tr_augment;

/** Whether `a` changes anything (a crop or a flip is configured). */
int tr_augment_enabled(const tr_augment *a);

/**
 * tr_dataset_gather with augmentation: copy samples idx[0..count) of an image data set (h, w >= 1, no tokens) into
 * xbuf ([count, c, h, w]) as `a` transforms them for epoch `epoch` of a run seeded with `seed`, labels into ybuf.
 * Requires a->crop_padding < min(h, w) (the caller checks it at set-up).
 */
void tr_dataset_gather_augmented(const tr_dataset *ds, const int64_t *idx, int64_t count, const tr_augment *a,
                                 uint64_t seed, uint64_t epoch, float *xbuf, int64_t *ybuf);

/**
 * One sample's augmentation as tr_dataset_gather_augmented applies it: src [c, h, w] (sample index `sample`, epoch
 * `epoch`) transformed into dst [c, h, w] (src and dst do not overlap).
 */
void tr_augment_sample(const tr_augment *a, uint64_t seed, uint64_t epoch, int64_t sample, const float *src, int64_t c,
                       int64_t h, int64_t w, float *dst);

/** The draws for one sample: crop offsets dy, dx in [0, 2 * crop_padding] and flip (0 or 1). */
void tr_augment_draw(const tr_augment *a, uint64_t seed, uint64_t epoch, int64_t sample, int64_t *dy, int64_t *dx,
                     int *flip);

/** Copy the float targets of samples idx[0..count) into tbuf ([count, t_cols]); nothing without float targets. */
void tr_dataset_gather_targets(const tr_dataset *ds, const int64_t *idx, int64_t count, float *tbuf);

#endif
