/* See fault_io.h. */
#define _GNU_SOURCE
/* Both the 32-bit-offset calls and their *64 forms are defined below, each forwarding to libc's
 * own definition of the same name. With _FILE_OFFSET_BITS=64 on a 32-bit target (armhf) glibc's
 * headers rename pwritev to pwritev64 (and ftruncate to ftruncate64): this file's pwritev would
 * then become pwritev64 while dlsym("pwritev") found the 32-bit one, which read the 64-bit
 * offset from the wrong registers, so every write of a test went to a garbage offset. */
#undef _FILE_OFFSET_BITS
#include "fault_io.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { call_count = 3, path_bytes_max = 4096 };

static char watched[path_bytes_max];
static atomic_int watching;
static atomic_long calls[call_count];
static atomic_int fail_err[call_count]; /* 0: not armed */
static atomic_long partial_left = -1;   /* pwritev: bytes of the short write still to come */
static void (*between_fn)(void*);
static void* between_arg;

static ssize_t (*next_pwritev)(int, const struct iovec*, int, off_t);
static ssize_t (*next_pwritev64)(int, const struct iovec*, int, off64_t);
static int (*next_fdatasync)(int);
static int (*next_ftruncate)(int, off_t);
static int (*next_ftruncate64)(int, off64_t);

/* Stores libc's definition of `name` in *fn_out (a function pointer; memcpy because ISO C has
 * no conversion from the void* that dlsym returns). */
static void find_real(const char* name, void* fn_out, size_t fn_bytes) {
    void* fn = dlsym(RTLD_NEXT, name);
    if (fn == NULL) {
        fprintf(stderr, "fault_io: no next definition of %s\n", name);
        _exit(99);
    }
    memcpy(fn_out, &fn, fn_bytes);
}

/* Before main(): the interposed calls then only read these. */
__attribute__((constructor)) static void find_real_calls(void) {
    find_real("pwritev", &next_pwritev, sizeof(next_pwritev));
    find_real("pwritev64", &next_pwritev64, sizeof(next_pwritev64));
    find_real("fdatasync", &next_fdatasync, sizeof(next_fdatasync));
    find_real("ftruncate", &next_ftruncate, sizeof(next_ftruncate));
    find_real("ftruncate64", &next_ftruncate64, sizeof(next_ftruncate64));
}

static int is_watched(int fd) {
    if (!atomic_load(&watching)) return 0;
    char link[64];
    char path[path_bytes_max];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
    return strstr(path, watched) != NULL;
}

void tm_fault_watch(const char* path_part) {
    tm_fault_clear();
    snprintf(watched, sizeof(watched), "%s", path_part);
    atomic_store(&watching, 1);
}

void tm_fault_arm_write(int err, long partial_bytes, void (*between)(void*), void* arg) {
    between_fn = between;
    between_arg = arg;
    atomic_store(&partial_left, partial_bytes > 0 ? partial_bytes : -1);
    atomic_store(&fail_err[TM_FAULT_PWRITEV], err);
}

void tm_fault_arm(enum tm_fault_call call, int err) {
    atomic_store(&fail_err[call], err);
}

long tm_fault_calls(enum tm_fault_call call) {
    return atomic_load(&calls[call]);
}

void tm_fault_clear(void) {
    atomic_store(&watching, 0);
    for (int i = 0; i < call_count; ++i) {
        atomic_store(&calls[i], 0);
        atomic_store(&fail_err[i], 0);
    }
    atomic_store(&partial_left, -1);
    between_fn = NULL;
    between_arg = NULL;
}

/* libc's pwritev of the width the caller used (the offset came from an off_t when !wide). */
static ssize_t forward_pwritev(int fd, const struct iovec* iov, int count, off64_t offset,
                               int wide) {
    if (wide) return next_pwritev64(fd, iov, count, offset);
    return next_pwritev(fd, iov, count, (off_t)offset);
}

/* The pwritev of either offset width: 64-bit offsets hold both. */
static ssize_t pwritev_with(int fd, const struct iovec* iov, int count, off64_t offset, int wide) {
    if (!is_watched(fd)) return forward_pwritev(fd, iov, count, offset, wide);
    atomic_fetch_add(&calls[TM_FAULT_PWRITEV], 1);
    int err = atomic_load(&fail_err[TM_FAULT_PWRITEV]);
    if (err == 0) return forward_pwritev(fd, iov, count, offset, wide);
    long partial = atomic_exchange(&partial_left, -1);
    if (partial <= 0) {
        atomic_store(&fail_err[TM_FAULT_PWRITEV], 0);
        errno = err;
        return -1;
    }
    /* The short write: the first `partial` bytes of the vector. */
    struct iovec cut[16];
    int cut_count = 0;
    long left = partial;
    for (int i = 0; i < count && i < 16 && left > 0; ++i) {
        cut[cut_count] = iov[i];
        if ((long)cut[cut_count].iov_len > left) cut[cut_count].iov_len = (size_t)left;
        left -= (long)cut[cut_count].iov_len;
        ++cut_count;
    }
    ssize_t written = forward_pwritev(fd, cut, cut_count, offset, wide);
    if (between_fn != NULL) between_fn(between_arg);
    return written;
}

ssize_t pwritev(int fd, const struct iovec* iov, int count, off_t offset) {
    return pwritev_with(fd, iov, count, offset, 0);
}

ssize_t pwritev64(int fd, const struct iovec* iov, int count, off64_t offset) {
    return pwritev_with(fd, iov, count, offset, 1);
}

int fdatasync(int fd) {
    int (*next)(int) = next_fdatasync;
    if (!is_watched(fd)) return next(fd);
    atomic_fetch_add(&calls[TM_FAULT_FDATASYNC], 1);
    int err = atomic_exchange(&fail_err[TM_FAULT_FDATASYNC], 0);
    if (err == 0) return next(fd);
    errno = err;
    return -1;
}

static int ftruncate_with(int fd, off64_t length, int wide) {
    if (is_watched(fd)) {
        atomic_fetch_add(&calls[TM_FAULT_FTRUNCATE], 1);
        int err = atomic_exchange(&fail_err[TM_FAULT_FTRUNCATE], 0);
        if (err != 0) {
            errno = err;
            return -1;
        }
    }
    if (wide) return next_ftruncate64(fd, length);
    return next_ftruncate(fd, (off_t)length);
}

int ftruncate(int fd, off_t length) {
    return ftruncate_with(fd, length, 0);
}

int ftruncate64(int fd, off64_t length) {
    return ftruncate_with(fd, length, 1);
}
