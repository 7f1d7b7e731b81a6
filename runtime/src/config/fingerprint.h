/*
 * fingerprint.h -- the config fingerprint: what makes two runs compute the same thing, as one SHA-256. A
 * checkpoint records it (checkpoint.h) so a resume with another config is named, and a trace (trace.h) so a check
 * compares like with like.
 */
#ifndef TR_FINGERPRINT_H
#define TR_FINGERPRINT_H

#include "config.h"
#include "error.h"

/**
 * SHA-256 (hex, 64 digits and a NUL into hex[65]) of the effective config without its run, log, checkpoint,
 * early_stopping, watchdog, eval, init, debug and memory sections and its device (a resume on another device is
 * warned about by name), with data.root by its real path, plus the bytes of the model file (YAML spec or
 * TorchScript archive). The last result is remembered by the config text and the model file's identity and times,
 * so the many checkpoints of one run hash a large archive once. Thread-safe. TR_E_RUNTIME when out of memory or
 * when hashing fails.
 */
int tr_config_fingerprint(const tr_config *cfg, char hex[65], tr_error *err);

/**
 * 1 when the config key `key` (a dotted path as tr_config_diff names it, e.g. "train.lr") is one that
 * tr_config_fingerprint leaves out (run., log., checkpoint., early_stopping., watchdog., eval., init., debug.,
 * memory., device) or compares by its target rather than its spelling (model.spec, model.torchscript, data.root);
 * else 0.
 */
int tr_config_not_fingerprinted(const char *key);

#endif
