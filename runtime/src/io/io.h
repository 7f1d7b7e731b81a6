/*
 * io.h -- the run directory's file I/O: every call checked, one atomic-replace path, one whole-file reader, and a
 * fault hook compiled into test builds only.
 *
 * Every file trainrun writes into a run directory goes through these calls: checkpoints (checkpoint_save.c,
 * safetensors.c) and the run files (summary.json, config.yaml, model.yaml). tr_io_write_file_atomic() is the one
 * way a run file is replaced: write into RUN/.tmp-NAME-PID, fsync it, rename it over NAME, fsync the directory;
 * a failure at any call leaves the previous NAME untouched and removes the temporary.
 *
 * Fault injection (test builds only, in the manner of SQLite's I/O-error tests and its SQLITE_TEST): compiled in
 * only with TR_TEST_HOOKS, which the test suite's own copy of io.c and the test programs are built with (CMake's
 * trainrun_test_io; tests/hooks_check.sh shows the installed library and command line have none of it). There,
 * each counted call -- open (for writing), write, fsync, rename, mkdir, unlink, rmdir -- made inside a checkpoint
 * save (tr_io_save_begin .. tr_io_save_end, which run.c and ckpt_saver.c wrap around the save and its prune)
 * increments that save's call counter. tr_io_fault_arm(save, call, errnum, sticky) makes call number `call`
 * (1-based) of save number `save` (1-based, counted from the arming) fail with `errnum` without doing anything,
 * and with `sticky`, every later counted call of the process too (a disk that stays full); errnum TR_IO_FAULT_KILL
 * instead sends the process SIGKILL just before that call (a kill at an exact point of a save). The environment
 * variable TRAINRUN_TEST_IO_FAULT="SAVE:CALL:ERRNO[:sticky]" (ERRNO as a number, EIO, ENOSPC or KILL) arms it when
 * the first save begins, for tests of the command line (the test copy of it, build/tests/trainrun). Nothing is
 * armed otherwise, and the counting is a few integer increments per call. In the product the save markers are
 * empty and no call is counted.
 */
#ifndef TR_IO_H
#define TR_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "error.h"

/** open(2) for writing (O_CLOEXEC added; EINTR retried). Returns the fd, or -1 with errno set. Counted. */
int tr_io_open(const char *path, int flags, mode_t mode);
/** Write all of buf[len] to fd, retrying short writes and EINTR (each write(2) is counted). 0, or -1 with errno. */
int tr_io_write_all(int fd, const void *buf, size_t len);
/** fsync(2). 0, or -1 with errno. Counted. */
int tr_io_fsync(int fd);
/** rename(2). Counted. */
int tr_io_rename(const char *from, const char *to);
/** mkdir(2). Counted. */
int tr_io_mkdir(const char *path, mode_t mode);
/** unlink(2). Counted. */
int tr_io_unlink(const char *path);
/** rmdir(2). Counted. */
int tr_io_rmdir(const char *path);

/** Open `path` (a directory when `dir`), fsync it and close it. TR_E_RUNTIME naming the path on failure. */
int tr_io_fsync_path(const char *path, int dir, tr_error *err);

/**
 * fsync paths[0..n) at once (dir[i] nonzero: a directory): each is opened (counted) and its fsync counted by the
 * fault hook in order on the calling thread, as tr_io_fsync_path would, and then the fsyncs themselves run
 * concurrently, one thread each: the file system commits them together and the block layer merges their cache
 * flushes, where fsyncs in a row pay one flush each (the figures: bench/HISTORY.md). Returns when every
 * fsync has finished. Errors: TR_E_RUNTIME naming the first path that could not be opened or synced (then the
 * others may or may not have been synced).
 */
int tr_io_fsync_paths(const char *const *paths, const int *dir, size_t n, tr_error *err);

/**
 * Replace the file at `path` with data[len] atomically: write DIR/.tmp-BASENAME-PID, fsync, rename over `path`,
 * fsync DIR. Every call is checked; on failure the temporary is removed, `path` keeps its previous contents, and
 * TR_E_RUNTIME names the file and the call that failed with strerror (e.g. "No space left on device") and what is
 * left: "(the previous NAME is unchanged)", or "(there is no NAME: none was written before)" when there was none.
 */
int tr_io_write_file_atomic(const char *path, const void *data, size_t len, tr_error *err);

/**
 * Replace the file at `path` atomically with what write_fn(arg, f) writes to `f` (a memory stream; write_fn
 * returns TR_OK or an error code): the whole text is produced in memory first, then tr_io_write_file_atomic.
 * Errors: TR_E_RUNTIME "PATH: out of memory" (the stream), "PATH: cannot produce the contents" (write_fn failed;
 * nothing is written), or tr_io_write_file_atomic's.
 */
int tr_io_write_atomic_with(const char *path, int (*write_fn)(const void *arg, FILE *f), const void *arg,
                            tr_error *err);

/** mkdir -p: the parents of `path`, then `path` itself; *created = 1 when this call created its last component
 * (0: it existed). Errors: TR_E_RUNTIME naming the component that cannot be created, with strerror. */
int tr_io_make_dirs(const char *path, int *created, tr_error *err);

/**
 * Remove stale temporaries of killed writers in `dir`: entries named .tmp-*-PID or .trash-*-PID whose PID is
 * this process or no longer exists (a flat directory of files, or a file). Returns how many were removed; best
 * effort (a failing unlink leaves the entry for the next call); not counted by the fault hook.
 */
int tr_io_remove_stale(const char *dir);

/** Remove a flat directory (files only) and its files. 0, or -1 with errno of the first failing call. Counted. */
int tr_io_remove_dir(const char *path);
/** The same as a cleanup after a failure: best effort, and not counted (a fault never stops its own cleanup). */
void tr_io_discard_dir(const char *path);

/* ---- the fault hook ---- */

/** Mark the start / end of a checkpoint save: counted calls in between belong to that save (test builds). */
void tr_io_save_begin(void);
void tr_io_save_end(void);

#ifdef TR_TEST_HOOKS /* test builds only: the test programs and the test copy of io.c */
#define TR_IO_FAULT_KILL (-9) /**< tr_io_fault_arm's errnum: SIGKILL instead of an error */
/** Arm a fault: call `call` of save `save` (both 1-based, saves counted from now) fails with errnum; 0 disarms. */
void tr_io_fault_arm(int64_t save, int64_t call, int errnum, int sticky);
/** Counted calls of the most recent save (the one in progress, or the last one that ended). */
int64_t tr_io_save_calls(void);
/** Whether an armed fault has fired since it was armed. */
int tr_io_fault_fired(void);
#endif

/**
 * Open the regular file `path` for reading: *f (fclose it) and its size in bytes (*size). Errors naming the file
 * ("cannot open", with strerror), *f then NULL: TR_E_CONFIG when the path names nothing readable (no such file,
 * not a directory on the way, permission denied) or not a regular file (a directory, a FIFO) -- the user's input;
 * TR_E_RUNTIME for any other failure to open (the machine's).
 */
int tr_io_open_regular(const char *path, FILE **f, int64_t *size, tr_error *err);

/**
 * The one whole-file reader: read the regular file `path` into a malloc'd buffer (*buf, *len bytes, and a NUL at
 * (*buf)[*len], so text parses in place; the caller frees *buf). max_bytes > 0 refuses a larger file before
 * allocating. Errors naming the file: as tr_io_open_regular's, TR_E_CONFIG when it is over max_bytes, TR_E_RUNTIME when memory ran out or fewer bytes could be read than fstat gave (the byte offset
 * reached). On error *buf is NULL and *len 0 or the size. The readers that read otherwise, and why: csv.c and
 * data.c (gzip, through zlib: the size is known only once decompressed), npy.c (a header, then the data at its
 * offset into the caller's buffer), run_lock.c (/proc/self/mountinfo, whose size fstat gives as 0), config/
 * yaml_util.c (a layer below io/), the digests of fingerprint.c and util/hash.c and run_dir.c's copy of the model
 * spec (streamed), and the line readers (history.c, trace.c, cli/check.c's traces).
 */
int tr_io_read_file(const char *path, int64_t max_bytes, unsigned char **buf, size_t *len, tr_error *err);

#endif
