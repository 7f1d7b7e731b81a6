/*
 * device.h -- where a run trains: the `device` config key ("cpu", "cuda", "cuda:N"), checked against this build and
 * this machine at start-up, and the memory figures of that device.
 *
 * "cuda" means cuda:LOCAL_RANK in a multi-process run (WORLD_SIZE > 1; LOCAL_RANK, else RANK, as torchrun sets
 * them: one device per local rank) and cuda:0 otherwise; "cuda:N" is device N in every process (e.g. with a
 * CUDA_VISIBLE_DEVICES of its own). A CUDA device needs a build against a CUDA-enabled libtorch (CMake's
 * TRAINRUN_CUDA): elsewhere it is refused at start-up with TR_E_CONFIG (exit code 2).
 */
#ifndef TR_DEVICE_H
#define TR_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/** A device: the CPU (cuda 0, index -1) or CUDA device `index` (cuda 1; -1 in a parsed "cuda": not yet chosen). */
typedef struct tr_device {
    int cuda;
    int index;
} tr_device;

/** Largest N accepted in "cuda:N". */
#define TR_DEVICE_MAX_INDEX 1023

/**
 * Parse "cpu", "cuda" or "cuda:N" (N decimal digits, 0 <= N <= TR_DEVICE_MAX_INDEX; case-sensitive, as
 * torch.device). Returns 0 with *out set (out may be NULL), or -1 with the reason in why[n].
 */
int tr_device_parse(const char *text, tr_device *out, char *why, size_t n);

/**
 * The device this process trains on for the `device` key's value `device` (tr_config.device), checked against the
 * build and the visible CUDA devices. Errors (TR_E_CONFIG, naming the key): a CUDA device with a CPU-only libtorch;
 * no CUDA device visible; an index at or beyond the number of visible devices.
 */
int tr_device_resolve(const char *device, tr_device *out, tr_error *err);

/** "cpu" or "cuda:N" into buf[n]. */
void tr_device_name(const tr_device *d, char *buf, size_t n);

/**
 * Memory figures of a device, in bytes. The CPU: the shim's caching allocator's allocated, reserved (live + cached
 * blocks) and peak allocated. CUDA: the caching allocator's allocated, reserved and peak allocated for that device
 * (torch.cuda.memory_allocated / memory_reserved / max_memory_allocated). rss: the process's resident set, either way.
 */
typedef struct tr_memory {
    int64_t allocated;
    int64_t reserved;
    int64_t peak;
    int64_t rss;
} tr_memory;

/** Read the figures of `d` (NULL: the CPU). Returns TR_OK or TR_E_RUNTIME (*out zeroed, reserved -1). */
int tr_memory_read(const tr_device *d, tr_memory *out);

/**
 * Bytes of memory a run on `d` may use: the CPU's available memory (tr_memory_available), or the CUDA device's
 * total memory. 0 when unknown.
 */
int64_t tr_device_memory_total(const tr_device *d);

#endif
