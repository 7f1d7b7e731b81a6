/*
 * io.c -- checked file I/O for the run directory, the atomic replace of a run file, the whole-file reader, and (in
 * test builds only) the fault hook (io.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECTORY, O_CLOEXEC */
#endif
#include "io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h" /* TR_PATH_MAX */

/* ---- the fault hook: test builds only ---- */

/* The fault hook is compiled only into the test suite's copy of this file (CMake's trainrun_test_io object library,
 * -DTR_TEST_HOOKS=1), linked into the test programs and the test copy of the command line (build/tests/trainrun):
 * libtrainrun.so, libtrainrun.a and the trainrun executable, built from the same tree in the same build, carry none
 * of it, and tests/hooks_check.sh proves it on the very files `cmake --install` ships. One compile of one C file,
 * where a build option would need a second build of the whole library to test what users get. The product's
 * counted calls cost nothing: fault() is the constant 0 there. */
#ifdef TR_TEST_HOOKS

/* At most one save runs at a time (the run's thread or its background writer, ckpt_saver.h), so the counters
 * are plain; whether the calling thread is inside a save is per thread, so the run's own file writes (summary.json)
 * made while a background save is in flight are never counted as the save's. `fired` is read by every thread (a
 * sticky fault fails them all). */
static struct {
    int env_read;
    int64_t saves;      /* saves begun since arming                 */
    int64_t calls;      /* counted calls of the current / last save */
    int64_t arm_save, arm_call;
    int arm_errno, sticky;
    atomic_int fired;
} g_fault;
static _Thread_local int t_in_save;

static void read_env(void)
{
    g_fault.env_read = 1;
    const char *s = getenv("TRAINRUN_TEST_IO_FAULT");
    if (!s || !*s) return;
    long long save = 0, call = 0;
    char name[32] = "", sticky[16] = "";
    if (sscanf(s, "%lld:%lld:%31[A-Z0-9]:%15s", &save, &call, name, sticky) < 3) return;
    int e = atoi(name);
    if (strcmp(name, "EIO") == 0) e = EIO;
    else if (strcmp(name, "ENOSPC") == 0) e = ENOSPC;
    else if (strcmp(name, "KILL") == 0) e = TR_IO_FAULT_KILL;
    tr_io_fault_arm(save, call, e, strcmp(sticky, "sticky") == 0);
}

void tr_io_fault_arm(int64_t save, int64_t call, int errnum, int sticky)
{
    g_fault.env_read = 1;
    g_fault.saves = t_in_save ? 1 : 0;
    g_fault.arm_save = save;
    g_fault.arm_call = call;
    g_fault.arm_errno = errnum;
    g_fault.sticky = sticky;
    g_fault.fired = 0;
}

void tr_io_save_begin(void)
{
    if (!g_fault.env_read) read_env();
    t_in_save = 1;
    g_fault.saves++;
    g_fault.calls = 0;
}

void tr_io_save_end(void) { t_in_save = 0; }

int64_t tr_io_save_calls(void) { return g_fault.calls; }

int tr_io_fault_fired(void) { return g_fault.fired; }

/* Count one call; nonzero (errno set) when it is to fail. */
static int fault(void)
{
    if (g_fault.fired && g_fault.sticky) {
        errno = g_fault.arm_errno;
        return 1;
    }
    if (!t_in_save) return 0;
    g_fault.calls++;
    if (g_fault.arm_errno && g_fault.saves == g_fault.arm_save && g_fault.calls == g_fault.arm_call) {
        g_fault.fired = 1;
        if (g_fault.arm_errno == TR_IO_FAULT_KILL) raise(SIGKILL); /* a kill at this exact point of a save */
        errno = g_fault.arm_errno;
        return 1;
    }
    return 0;
}

#else /* the product: the save markers mark nothing, no call fails */

void tr_io_save_begin(void) {}
void tr_io_save_end(void) {}
static inline int fault(void) { return 0; }

#endif

/* ---- the calls ---- */

int tr_io_open(const char *path, int flags, mode_t mode)
{
    if (fault()) return -1;
    int fd;
    do fd = open(path, flags | O_CLOEXEC, mode);
    while (fd < 0 && errno == EINTR);
    return fd;
}

int tr_io_write_all(int fd, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len > 0) {
        if (fault()) return -1;
        const size_t chunk = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
        const ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int tr_io_fsync(int fd) { return fault() ? -1 : fsync(fd); }
int tr_io_rename(const char *from, const char *to) { return fault() ? -1 : rename(from, to); }
int tr_io_mkdir(const char *path, mode_t mode) { return fault() ? -1 : mkdir(path, mode); }
int tr_io_unlink(const char *path) { return fault() ? -1 : unlink(path); }
int tr_io_rmdir(const char *path) { return fault() ? -1 : rmdir(path); }

int tr_io_fsync_path(const char *path, int dir, tr_error *err)
{
    const int fd = tr_io_open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY, 0);
    if (fd < 0) return tr_error_set(err, TR_E_RUNTIME, "%s: cannot open to fsync: %s", path, strerror(errno));
    const int rc = tr_io_fsync(fd);
    const int e = errno;
    close(fd);
    return rc == 0 ? TR_OK : tr_error_set(err, TR_E_RUNTIME, "%s: fsync failed: %s", path, strerror(e));
}

typedef struct fsync_job {
    int fd;
    int rc, err;       /* fsync's result and errno */
    pthread_t thread;
    int threaded;      /* run on a thread of its own (else inline) */
} fsync_job;

static void *fsync_job_run(void *arg)
{
    fsync_job *j = arg;
    j->rc = fsync(j->fd);
    j->err = errno;
    return NULL;
}

int tr_io_fsync_paths(const char *const *paths, const int *dir, size_t n, tr_error *err)
{
    fsync_job *jobs = calloc(n ? n : 1, sizeof *jobs);
    if (!jobs) return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory to fsync", n ? paths[0] : "(none)");
    int rc = TR_OK;
    size_t opened = 0;
    for (size_t i = 0; i < n && !rc; i++) { /* the counted calls, in tr_io_fsync_path's order */
        jobs[i].fd = tr_io_open(paths[i], dir[i] ? O_RDONLY | O_DIRECTORY : O_RDONLY, 0);
        if (jobs[i].fd < 0) {
            rc = tr_error_set(err, TR_E_RUNTIME, "%s: cannot open to fsync: %s", paths[i], strerror(errno));
            break;
        }
        opened = i + 1;
        if (fault()) rc = tr_error_set(err, TR_E_RUNTIME, "%s: fsync failed: %s", paths[i], strerror(errno));
    }
    if (!rc) {
        for (size_t i = 1; i < n; i++)
            jobs[i].threaded = pthread_create(&jobs[i].thread, NULL, fsync_job_run, &jobs[i]) == 0;
        for (size_t i = 0; i < n; i++)
            if (!jobs[i].threaded) fsync_job_run(&jobs[i]); /* the first, and any no thread could be made for */
        for (size_t i = 1; i < n; i++)
            if (jobs[i].threaded) pthread_join(jobs[i].thread, NULL);
        for (size_t i = 0; i < n && !rc; i++)
            if (jobs[i].rc != 0)
                rc = tr_error_set(err, TR_E_RUNTIME, "%s: fsync failed: %s", paths[i], strerror(jobs[i].err));
    }
    for (size_t i = 0; i < opened; i++) close(jobs[i].fd);
    free(jobs);
    return rc;
}

int tr_io_write_file_atomic(const char *path, const void *data, size_t len, tr_error *err)
{
    char dir[TR_PATH_MAX], tmp[TR_PATH_MAX + 64];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (slash) {
        if ((size_t)(slash - path) >= sizeof dir) return tr_error_set(err, TR_E_RUNTIME, "%s: path too long", path);
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
        if (!dir[0]) snprintf(dir, sizeof dir, "/");
    } else {
        snprintf(dir, sizeof dir, ".");
    }
    if (snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%ld", dir, base, (long)getpid()) >= (int)sizeof tmp)
        return tr_error_set(err, TR_E_RUNTIME, "%s: path too long", path);
    /* what a failure leaves, said exactly: the earlier file, or none at all */
    struct stat st;
    char left[TR_PATH_MAX + 64];
    if (stat(path, &st) == 0) snprintf(left, sizeof left, "the previous %s is unchanged", base);
    else snprintf(left, sizeof left, "there is no %s: none was written before", base);
    const int fd = tr_io_open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return tr_error_set(err, TR_E_RUNTIME, "%s: cannot create: %s (%s)", tmp, strerror(errno), left);
    const char *what = NULL;
    if (tr_io_write_all(fd, data, len) != 0) what = "write failed";
    else if (tr_io_fsync(fd) != 0) what = "fsync failed";
    int e = errno;
    if (close(fd) != 0 && !what) {
        what = "close failed";
        e = errno;
    }
    if (!what && tr_io_rename(tmp, path) != 0) {
        what = "rename failed";
        e = errno;
    }
    if (what) {
        unlink(tmp); /* not counted: a cleanup must not be failed by the hook that it recovers from */
        return tr_error_set(err, TR_E_RUNTIME, "%s: %s: %s (%s)", path, what, strerror(e), left);
    }
    return tr_io_fsync_path(dir, 1, err);
}

int tr_io_write_atomic_with(const char *path, int (*write_fn)(const void *arg, FILE *f), const void *arg,
                            tr_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
    const int rc = write_fn(arg, f);
    if (fclose(f) != 0) {
        free(buf);
        return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory", path);
    }
    if (rc != TR_OK) {
        free(buf);
        return tr_error_set(err, TR_E_RUNTIME, "%s: cannot produce the contents", path);
    }
    const int wrc = tr_io_write_file_atomic(path, buf, len, err);
    free(buf);
    return wrc;
}

/* Remove a flat directory: unlink each entry, then rmdir. `counted`: through the fault hook's tr_io_unlink /
 * tr_io_rmdir, going on past a failure and returning -1 with the first failure's errno; else the plain calls (a
 * cleanup's removal, which a fault it recovers from must not stop), best effort. */
static int remove_flat_dir(const char *path, int counted)
{
    int rc = 0, first = 0;
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        char p[TR_PATH_MAX + 300];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
                snprintf(p, sizeof p, "%s/%s", path, e->d_name) >= (int)sizeof p)
                continue;
            if ((counted ? tr_io_unlink(p) : unlink(p)) != 0 && !rc) {
                rc = -1;
                first = errno;
            }
        }
        closedir(d);
    }
    if ((counted ? tr_io_rmdir(path) : rmdir(path)) != 0 && !rc) {
        rc = -1;
        first = errno;
    }
    if (rc) errno = first;
    return rc;
}

int tr_io_remove_dir(const char *path) { return remove_flat_dir(path, 1); }

void tr_io_discard_dir(const char *path) { (void)remove_flat_dir(path, 0); }

/* mkdir -p of the parents of `path`, then `path` itself; *created = 1 if this call created the last component. */
int tr_io_make_dirs(const char *path, int *created, tr_error *err)
{
    char buf[TR_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    *created = 0;
    for (char *p = buf + 1;; p++) {
        const char c = *p;
        if (c == '/' || c == '\0') {
            *p = '\0';
            if (mkdir(buf, 0777) == 0) {
                *created = c == '\0';
            } else if (errno != EEXIST) {
                return tr_error_set(err, TR_E_RUNTIME, "%s: cannot create directory: %s", buf, strerror(errno));
            }
            *p = c;
        }
        if (c == '\0') break;
    }
    return TR_OK;
}

int tr_io_remove_stale(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    struct dirent *e;
    char path[TR_PATH_MAX + 300];
    while ((e = readdir(d))) {
        const char *n = e->d_name;
        if (strncmp(n, ".tmp-", 5) != 0 && strncmp(n, ".trash-", 7) != 0) continue;
        const char *dash = strrchr(n, '-');
        char *end;
        const long pid = strtol(dash + 1, &end, 10);
        if (*end || end == dash + 1 || pid <= 0) continue;
        if (pid != (long)getpid() && !(kill((pid_t)pid, 0) != 0 && errno == ESRCH)) continue; /* alive: its own */
        if (snprintf(path, sizeof path, "%s/%s", dir, n) >= (int)sizeof path) continue;
        struct stat st;
        if (lstat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode) ? remove_flat_dir(path, 0) == 0 : unlink(path) == 0) removed++;
    }
    closedir(d);
    return removed;
}

int tr_io_open_regular(const char *path, FILE **f, int64_t *size, tr_error *err)
{
    *f = fopen(path, "rb");
    if (!*f) {
        /* a path the user gave that names nothing readable is their input's fault (2); anything else the machine's */
        const int e = errno, user = e == ENOENT || e == ENOTDIR || e == EACCES || e == EISDIR || e == ENAMETOOLONG;
        return tr_error_set(err, user ? TR_E_CONFIG : TR_E_RUNTIME, "%s: cannot open: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fileno(*f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(*f);
        *f = NULL;
        return tr_error_set(err, TR_E_CONFIG, "%s: not a regular file", path);
    }
    *size = (int64_t)st.st_size;
    return TR_OK;
}

int tr_io_read_file(const char *path, int64_t max_bytes, unsigned char **buf, size_t *len, tr_error *err)
{
    *buf = NULL;
    *len = 0;
    FILE *f;
    int64_t size;
    const int rc = tr_io_open_regular(path, &f, &size, err);
    if (rc) return rc;
    if (max_bytes > 0 && size > max_bytes) {
        fclose(f);
        return tr_error_set(err, TR_E_CONFIG, "%s: %lld bytes, over the %lld bytes such a file may have", path,
                            (long long)size, (long long)max_bytes);
    }
    *len = (size_t)size;
    *buf = malloc(*len + 1);
    if (!*buf) {
        fclose(f);
        return tr_error_set(err, TR_E_RUNTIME, "%s: out of memory for %zu bytes", path, *len);
    }
    const size_t got = fread(*buf, 1, *len, f);
    fclose(f);
    if (got != *len) {
        free(*buf);
        *buf = NULL;
        return tr_error_set(err, TR_E_RUNTIME, "%s: byte %zu: read failed (the file shrank while read?)", path, got);
    }
    (*buf)[*len] = '\0'; /* text parses in place */
    return TR_OK;
}
