/*
 * run_lock.c -- the run directory's one-writer lock (run_lock.h): flock on RUN_DIR/trainrun.lock, the holder's
 * pid, host and start time in the file, and what a network file system does to it.
 */
#define _GNU_SOURCE /* realpath, O_CLOEXEC, statfs */
#include "run_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "config.h" /* TR_PATH_MAX */
#include "sys.h"

#define NFS_SUPER_MAGIC_ 0x6969 /* linux/magic.h's NFS_SUPER_MAGIC (NFSv2, v3 and v4 alike) */

/* The next line of the text at *at (up to its '\n' or its end) that fits in buf[size], copied there NUL-terminated;
 * longer lines are skipped. *at moves past the line. Returns 1 with a line in buf, 0 after the last one. */
static int next_line(const char **at, char *buf, size_t size)
{
    while (*at && **at) {
        const char *line = *at, *nl = strchr(line, '\n');
        const size_t len = nl ? (size_t)(nl - line) : strlen(line);
        *at = nl ? nl + 1 : NULL;
        if (len < size) {
            memcpy(buf, line, len);
            buf[len] = '\0';
            return 1;
        }
    }
    return 0;
}

void tr_run_lock_parse(const char *text, tr_run_lock_holder_info *who)
{
    who->pid = -1;
    who->host[0] = who->started[0] = '\0';
    char buf[320];
    for (const char *at = text; next_line(&at, buf, sizeof buf);) {
        const size_t len = strlen(buf);
        long pid;
        char end;
        if (sscanf(buf, "pid %ld%c", &pid, &end) == 1 && pid > 0) who->pid = pid;
        else if (strncmp(buf, "host ", 5) == 0 && len - 5 < sizeof who->host) memcpy(who->host, buf + 5, len - 4);
        else if (strncmp(buf, "started ", 8) == 0 && len - 8 < sizeof who->started)
            memcpy(who->started, buf + 8, len - 7);
    }
}

/* The holder's text, read through our own descriptor of the lock file. The holder writes it just after taking the
 * lock: a process that finds the lock taken in between reads an empty file, so an empty read is retried briefly
 * (at most 100 ms; the holder's write is one pwrite). */
static void read_holder(int fd, tr_run_lock_holder_info *who)
{
    char text[1024];
    for (int attempt = 0; attempt < 50; attempt++) {
        const ssize_t n = pread(fd, text, sizeof text - 1, 0);
        text[n > 0 ? n : 0] = '\0';
        tr_run_lock_parse(text, who);
        if (who->pid > 0) return;
        nanosleep(&(struct timespec){.tv_nsec = 2 * 1000 * 1000}, NULL);
    }
}

/* /proc/self/mountinfo's escapes (\040 for a space, \011, \012, \134) undone in place. */
static void unescape_octal(char *s)
{
    char *o = s;
    for (const char *i = s; *i;) {
        if (i[0] == '\\' && i[1] >= '0' && i[1] <= '3' && i[2] >= '0' && i[2] <= '7' && i[3] >= '0' && i[3] <= '7') {
            *o++ = (char)((i[1] - '0') * 64 + (i[2] - '0') * 8 + (i[3] - '0'));
            i += 4;
        } else {
            *o++ = *i++;
        }
    }
    *o = '\0';
}

/* Whether mount point `mnt` contains `path` (both absolute, without a trailing slash but for "/"). */
static int contains(const char *mnt, const char *path)
{
    const size_t n = strlen(mnt);
    if (strcmp(mnt, "/") == 0) return 1;
    return strncmp(path, mnt, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

int tr_run_lock_nfs_note(const char *mountinfo, const char *path, char *out, size_t n)
{
    out[0] = '\0';
    size_t best_len = 0;
    char fstype[64] = "", options[1100] = "", source[256] = "";
    char buf[4096];
    for (const char *at = mountinfo; next_line(&at, buf, sizeof buf);) {
        /* "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS" */
        char mnt[2048], fs[64], src[256], sup[1024];
        const char *dash = strstr(buf, " - ");
        if (dash && sscanf(buf, "%*s %*s %*s %*s %2047s", mnt) == 1 &&
            sscanf(dash + 3, "%63s %255s %1023s", fs, src, sup) == 3) {
            unescape_octal(mnt);
            const size_t ml = strlen(mnt);
            if (contains(mnt, path) && ml >= best_len) {
                best_len = ml;
                snprintf(fstype, sizeof fstype, "%s", fs);
                snprintf(source, sizeof source, "%s", src);
                snprintf(options, sizeof options, ",%s,", sup);
            }
        }
    }
    if (strncmp(fstype, "nfs", 3) != 0) return 0;
    const char *mode = strstr(options, ",local_lock=all,")     ? "all"
                       : strstr(options, ",local_lock=flock,") ? "flock"
                                                               : NULL;
    if (!mode) return 0;
    snprintf(out, n,
             "%s is on NFS (%s) mounted with local_lock=%s%s: its lock excludes only processes on this host; "
             "a trainrun on another host could write into it at the same time (docs/run_directory.md)",
             path, source, mode, strcmp(mode, "all") == 0 ? " (the nolock mount option)" : "");
    return 1;
}

/* Warn when run_dir is on an NFS mount whose flock locks stay on this host. */
static void check_network_fs(const char *run_dir, tr_run_lock_warn_fn warn, void *ctx)
{
    struct statfs sf;
    if (!warn || statfs(run_dir, &sf) != 0 || sf.f_type != NFS_SUPER_MAGIC_) return;
    char real[PATH_MAX];
    if (!realpath(run_dir, real)) return;
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f) return;
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    for (size_t got; text && (got = fread(text + len, 1, cap - 1 - len, f)) > 0;) {
        len += got;
        if (len + 1 == cap) {
            char *bigger = cap < (16u << 20) ? realloc(text, cap *= 2) : NULL;
            if (!bigger) break;
            text = bigger;
        }
    }
    fclose(f);
    if (!text) return;
    text[len] = '\0';
    char note[TR_PATH_MAX + 512];
    if (tr_run_lock_nfs_note(text, real, note, sizeof note)) warn(ctx, note);
    free(text);
}

int tr_run_lock_acquire(tr_run_lock *lk, const char *run_dir, tr_run_lock_warn_fn warn, void *ctx, tr_error *err)
{
    lk->fd = 0;
    char path[TR_PATH_MAX + 32];
    if (snprintf(path, sizeof path, "%s/%s", run_dir, TR_RUN_LOCK_FILE) >= (int)sizeof path)
        return tr_error_set(err, TR_E_RUNTIME, "%s: path too long", run_dir);
    int fd;
    do fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return tr_error_set(err, TR_E_RUNTIME, "%s: cannot create the run directory's lock: %s", path, strerror(errno));
    int rc;
    do rc = flock(fd, LOCK_EX | LOCK_NB);
    while (rc != 0 && errno == EINTR);
    if (rc != 0 && errno == EWOULDBLOCK) {
        tr_run_lock_holder_info who;
        read_holder(fd, &who);
        close(fd);
        char me[256] = "";
        gethostname(me, sizeof me - 1);
        char holder[400];
        if (who.pid < 0) snprintf(holder, sizeof holder, "a process that has not written its pid and host yet");
        else if (who.pid == (long)getpid() && strcmp(who.host, me) == 0)
            snprintf(holder, sizeof holder, "another open run or trainer of this process (pid %ld on %s, since %s)", who.pid,
                     who.host, who.started[0] ? who.started : "?");
        else
            snprintf(holder, sizeof holder, "pid %ld on %s, since %s", who.pid, who.host[0] ? who.host : "?",
                     who.started[0] ? who.started : "?");
        return tr_error_set(err, TR_E_LOCKED,
                            "%s is in use by another trainrun (%s): a run directory has one writer, "
                            "and this process wrote nothing into it. Wait for that run to end or stop it, or use "
                            "another run directory (a run: another run.name). The lock: %s",
                            run_dir, holder, path);
    }
    if (rc != 0) {
        const int e = errno;
        close(fd);
        if (e == ENOLCK || e == EOPNOTSUPP || e == EINVAL) { /* NFS without a lock daemon, a FUSE fs without locks */
            if (warn) {
                char msg[TR_PATH_MAX + 400];
                snprintf(msg, sizeof msg,
                         "%s: cannot lock the run directory (%s): this file system has no working "
                         "locks (NFS without a lock daemon?); one writer per run directory is not "
                         "enforced for this run (docs/run_directory.md)",
                         path, strerror(e));
                warn(ctx, msg);
            }
            return TR_OK;
        }
        return tr_error_set(err, TR_E_RUNTIME, "%s: cannot lock the run directory: %s", path, strerror(e));
    }
    /* Held. Who holds it goes into the file for a process that finds it taken (best effort: the lock itself is
     * what excludes; a full disk only leaves the text out). */
    char host[256] = "", stamp[32] = "", text[400];
    gethostname(host, sizeof host - 1);
    tr_utc_stamp(stamp);
    const int len = snprintf(text, sizeof text, "pid %ld\nhost %s\nstarted %s\n", (long)getpid(), host, stamp);
    if (ftruncate(fd, 0) == 0 && pwrite(fd, text, (size_t)len, 0) != len) (void)ftruncate(fd, 0);
    check_network_fs(run_dir, warn, ctx);
    lk->fd = fd + 1;
    return TR_OK;
}

void tr_run_lock_release(tr_run_lock *lk)
{
    if (!lk || lk->fd <= 0) return;
    close(lk->fd - 1); /* the kernel releases the flock with the file's last descriptor */
    lk->fd = 0;
}
