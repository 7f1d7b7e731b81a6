/*
 * run_lock.h -- one writer per run directory: the process that owns a run directory holds an advisory lock on
 * RUN_DIR/trainrun.lock for as long as it writes into it (docs/run_directory.md).
 *
 * The lock is flock(2) LOCK_EX on the lock file, taken without waiting. The kernel releases it when the holder's
 * last descriptor of that open file goes away -- tr_run_lock_release, exit, or death by any signal, SIGKILL
 * included -- so a killed run leaves no stale lock, and the file itself is never removed (removing a lock file
 * races with a process that has just opened it). The descriptor is O_CLOEXEC: a program the holder starts does
 * not inherit it. The holder writes "pid P\nhost H\nstarted T\n" into the file after taking the lock, so that a
 * process that finds it held can name who holds it; the text is only true while the lock is held.
 *
 * Network file systems: on Linux NFS, flock is carried to the server as a whole-file byte-range lock (lockd for
 * NFSv3, the protocol itself for NFSv4), so it excludes processes on other hosts too -- unless the file system is
 * mounted with local_lock=flock or local_lock=all (NFSv3's `nolock` mounts show as local_lock=all), where it
 * excludes only processes on the same host; tr_run_lock_acquire detects that from /proc/self/mountinfo and warns.
 * A server without a working lock daemon answers ENOLCK: the run goes on unprotected, with a warning.
 */
#ifndef TR_RUN_LOCK_H
#define TR_RUN_LOCK_H

#include <stddef.h>

#include "error.h"

/** The lock file's name inside a run directory. */
#define TR_RUN_LOCK_FILE "trainrun.lock"

/** A held (or not held) run-directory lock. Zero-initialised: not held. */
typedef struct tr_run_lock {
    int fd; /**< the lock file's descriptor + 1 while held (0: not held; the +1 keeps zero-initialised "not held") */
} tr_run_lock;

/** Who holds a run directory's lock, as its lock file says (tr_run_lock_holder). */
typedef struct tr_run_lock_holder_info {
    long pid;         /**< the holder's process id, -1 when the file does not say (yet) */
    char host[256];   /**< its host name, "" when the file does not say               */
    char started[32]; /**< when it took the lock, UTC "YYYY-MM-DDTHH:MM:SSZ", or ""    */
} tr_run_lock_holder_info;

/** Called with one warning line (the lock is not enforced on this file system, and why). */
typedef void (*tr_run_lock_warn_fn)(void *ctx, const char *msg);

/**
 * Take run_dir's lock without waiting, before anything else in run_dir is written. TR_OK: held by *lk until
 * tr_run_lock_release or the end of the process. TR_E_LOCKED: another process (or another open run of this process)
 * holds it; err names run_dir, the holder's pid, host and start time, and how to proceed; nothing was written.
 * TR_E_RUNTIME: the lock file cannot be created or written (naming it and strerror). When the file system cannot
 * lock (ENOLCK, EOPNOTSUPP: NFS without a lock daemon) or locks only per host (NFS local_lock), `warn` says so and
 * TR_OK is returned: the run goes on, but one writer per run directory is not enforced for it. warn may be NULL.
 */
int tr_run_lock_acquire(tr_run_lock *lk, const char *run_dir, tr_run_lock_warn_fn warn, void *ctx, tr_error *err);

/** Release the lock (not held: no-op). The lock file stays. */
void tr_run_lock_release(tr_run_lock *lk);

/**
 * The warning for a run directory at real path `path` when /proc/self/mountinfo's text `mountinfo` puts it on an
 * NFS mount (fstype nfs or nfs4, the mount point the longest prefix of `path`) whose super options say
 * local_lock=all or local_lock=flock: 1 and the warning in out[n]; else 0 and out = "". Pure: no I/O.
 */
int tr_run_lock_nfs_note(const char *mountinfo, const char *path, char *out, size_t n);

/** Parse a lock file's text into *who (fields it lacks: pid -1, ""). Pure: no I/O. */
void tr_run_lock_parse(const char *text, tr_run_lock_holder_info *who);

#endif
