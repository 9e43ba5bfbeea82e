/*
 * The wall clock of one redis-server, moved by a test: an LD_PRELOAD
 * library that answers clock_gettime(CLOCK_REALTIME[_COARSE]),
 * gettimeofday and time from a control file instead of the real clock.
 * Every other clock (CLOCK_MONOTONIC above all, which Redis times its
 * event loop with) is the real one.
 *
 * The control file is named by $REDLOCK_CLOCK_FILE and holds one line:
 *   offset <signed microseconds>    the real clock plus that much
 *   freeze <microseconds since epoch>  a clock that does not move
 * A missing or unreadable file means the real clock. The file is read
 * again at most once a millisecond (by the real monotonic clock), so a
 * change takes effect within a few ms; the writer replaces it by a rename,
 * so a read never sees half a line.
 *
 * The state is one 64-bit word (microseconds times 4 plus the mode), read
 * and written atomically: Redis reads the time from several threads.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

enum { MODE_REAL = 0, MODE_OFFSET = 1, MODE_FREEZE = 2 };

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime;
static char control_path[4096];
static int64_t state;       /* value * 4 + mode, atomic */
static int64_t next_read_ns; /* real CLOCK_MONOTONIC, atomic */

static clock_gettime_fn real(void) {
    clock_gettime_fn fn = __atomic_load_n(&real_clock_gettime, __ATOMIC_ACQUIRE);
    if (!fn) {
        fn = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
        __atomic_store_n(&real_clock_gettime, fn, __ATOMIC_RELEASE);
    }
    return fn;
}

__attribute__((constructor)) static void init(void) {
    const char *path = getenv("REDLOCK_CLOCK_FILE");
    if (path && strlen(path) < sizeof(control_path)) {
        strcpy(control_path, path);
    }
    real();
}

/* Parses a signed decimal; 0 on anything else. */
static int parse(const char *s, int64_t *out) {
    int negative = 0;
    int64_t v = 0;
    int digits = 0;
    while (*s == ' ') s++;
    if (*s == '-' || *s == '+') negative = *s++ == '-';
    for (; *s >= '0' && *s <= '9'; s++, digits++) v = v * 10 + (*s - '0');
    *out = negative ? -v : v;
    return digits > 0;
}

/* Reads the control file into `state` (no allocation: open/read/close). */
static void reload(void) {
    int64_t mode = MODE_REAL, value = 0;
    char buf[128];
    int fd = control_path[0] ? open(control_path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0) {
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n > 0) {
            buf[n] = 0;
            if (strncmp(buf, "offset ", 7) == 0 && parse(buf + 7, &value)) {
                mode = MODE_OFFSET;
            } else if (strncmp(buf, "freeze ", 7) == 0 && parse(buf + 7, &value)) {
                mode = MODE_FREEZE;
            }
        }
    }
    __atomic_store_n(&state, value * 4 + mode, __ATOMIC_RELEASE);
}

/* The mode and value now, the file read again if a millisecond passed. */
static int64_t current(void) {
    struct timespec mono;
    if (real()(CLOCK_MONOTONIC, &mono) == 0) {
        int64_t now = (int64_t)mono.tv_sec * 1000000000 + mono.tv_nsec;
        int64_t due = __atomic_load_n(&next_read_ns, __ATOMIC_ACQUIRE);
        /* One thread reloads; the others use the state as it was. */
        if (now >= due && __atomic_compare_exchange_n(&next_read_ns, &due, now + 1000000, 0,
                                                      __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            reload();
        }
    }
    return __atomic_load_n(&state, __ATOMIC_ACQUIRE);
}

/* The moved wall clock, in microseconds since the epoch. */
static int64_t moved_us(void) {
    int64_t word = current();
    int64_t mode = word & 3;
    int64_t value = (word - mode) / 4;
    if (mode == MODE_FREEZE) return value;
    struct timespec ts;
    real()(CLOCK_REALTIME, &ts);
    int64_t us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    return mode == MODE_OFFSET ? us + value : us;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    if (clock != CLOCK_REALTIME && clock != CLOCK_REALTIME_COARSE) {
        return real()(clock, ts);
    }
    int64_t word = current();
    if ((word & 3) == MODE_REAL) return real()(clock, ts);
    int64_t us = moved_us();
    ts->tv_sec = us / 1000000;
    ts->tv_nsec = (us % 1000000) * 1000;
    return 0;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;
    int64_t us = moved_us();
    tv->tv_sec = us / 1000000;
    tv->tv_usec = us % 1000000;
    return 0;
}

time_t time(time_t *out) {
    time_t now = (time_t)(moved_us() / 1000000);
    if (out) *out = now;
    return now;
}
