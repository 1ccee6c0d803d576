/*
 * clockshim: an LD_PRELOAD library that fakes the wall clock of one process
 * (redis-server) for clock-fault tests. See doc.go for the why; this comment
 * is the how.
 *
 * Overridden: gettimeofday, time, and clock_gettime for CLOCK_REALTIME and
 * CLOCK_REALTIME_COARSE. Every other clock id (MONOTONIC, BOOTTIME, the CPU
 * clocks, ...) is passed through untouched.
 *
 * Control file: its path is in $REDLOCK_CLOCK_FILE, one line of decimal
 * fields separated by blanks:
 *
 *     offset_ns rate [skew_ns anchor_ns [epoch]]
 *
 * and the clock it describes is, for a real time t (Unix ns):
 *
 *     fake(t) = t + offset_ns + skew_ns + (t - anchor_ns) * (rate - 1)
 *
 * offset_ns is the sum of all deliberate jumps; skew_ns is the drift that
 * earlier rates accumulated up to anchor_ns; epoch is bumped by the writer
 * on every deliberate step (Jump, Reset). A hand-written line with only
 * "offset_ns rate" works too: skew is 0, the anchor is the moment this
 * process first saw the line, and later edits apply from when they are seen
 * (a new rate runs on from the current fake time; an offset change is added
 * to it).
 *
 * The file is re-read at most every RECHECK_NS of real time (open + read +
 * close, three syscalls, so at most ~300 syscalls a second however often
 * Redis asks for the time). When a line with an anchor changed:
 *   - on the first read, or when epoch or offset_ns changed (a jump or a
 *     reset), the process adopts the file's clock exactly;
 *   - otherwise only the rate (and its folding) changed: the process adopts
 *     the file's clock if that is not behind its current clock, and else
 *     re-anchors at the current real time, folding the skew it accumulated
 *     into its offset, so that its clock never steps back on a rate change
 *     (the file is seen up to RECHECK_NS late, during which the old rate
 *     ran on).
 *
 * Concurrency and signals: the clock parameters live in two slots, each
 * behind its own sequence counter, and an index says which slot is current.
 * Readers copy the current slot and retry if its sequence moved; the one
 * thread that refreshes (guarded by a try-lock, never waited for) writes the
 * other slot and then flips the index. A signal handler that interrupts the
 * refresh therefore reads a slot nobody is writing. No malloc, no stdio, no
 * locks that can block; errno is preserved.
 *
 * Early start-up: the real clock_gettime is looked up with
 * dlsym(RTLD_NEXT, ...) on first use. jemalloc calls clock_gettime while it
 * initialises, and dlsym may allocate; while the lookup is in progress (or
 * if it fails) every call goes straight to the kernel with
 * syscall(SYS_clock_gettime), which needs nothing and cannot recurse.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_SEC 1000000000LL
#define RECHECK_NS (10LL * 1000 * 1000) /* re-read the file at most every 10 ms */
#define PATH_CAP 4096
#define LINE_CAP 256

/* ---- the real clock -------------------------------------------------- */

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static clock_gettime_fn real_clock_gettime_fn; /* atomic */
static int resolve_started;                    /* atomic: 0, then 1 forever */

static int sys_clock_gettime(clockid_t id, struct timespec *ts) {
	return (int)syscall(SYS_clock_gettime, id, ts);
}

static int real_clock_gettime(clockid_t id, struct timespec *ts) {
	clock_gettime_fn f = __atomic_load_n(&real_clock_gettime_fn, __ATOMIC_ACQUIRE);
	if (f)
		return f(id, ts);
	int zero = 0;
	if (__atomic_compare_exchange_n(&resolve_started, &zero, 1, 0,
	                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		/* Only the first caller looks up; any call made meanwhile (by
		 * dlsym itself, by malloc's initialisation, by another thread)
		 * takes the syscall below. */
		f = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
		if (f == clock_gettime)
			f = 0;
		if (f) {
			__atomic_store_n(&real_clock_gettime_fn, f, __ATOMIC_RELEASE);
			return f(id, ts);
		}
	}
	return sys_clock_gettime(id, ts);
}

static int64_t ts_ns(const struct timespec *ts) {
	return (int64_t)ts->tv_sec * NS_PER_SEC + ts->tv_nsec;
}

/* floor division, so that times before 1970 would still split correctly */
static void ns_split(int64_t ns, int64_t *sec, int64_t *rem) {
	int64_t s = ns / NS_PER_SEC, r = ns % NS_PER_SEC;
	if (r < 0) {
		r += NS_PER_SEC;
		s--;
	}
	*sec = s;
	*rem = r;
}

/* ---- the fake clock's parameters ------------------------------------- */

/* fake(t) = t + off + (t - anchor) * (rate - 1) */
struct params {
	int64_t off;
	int64_t anchor;
	double rate;
};

static struct params slot[2] = {{0, 0, 1.0}, {0, 0, 1.0}};
static unsigned slot_seq[2]; /* odd while the slot is being written */
static int current;          /* index of the slot readers use */

static void params_load(struct params *p) {
	for (int tries = 0; tries < 64; tries++) {
		int i = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
		unsigned s1 = __atomic_load_n(&slot_seq[i], __ATOMIC_ACQUIRE);
		p->off = __atomic_load_n(&slot[i].off, __ATOMIC_RELAXED);
		p->anchor = __atomic_load_n(&slot[i].anchor, __ATOMIC_RELAXED);
		__atomic_load(&slot[i].rate, &p->rate, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		unsigned s2 = __atomic_load_n(&slot_seq[i], __ATOMIC_RELAXED);
		if (s1 == s2 && !(s1 & 1))
			return;
	}
	/* Only reachable if this thread kept losing to two complete refreshes
	 * (20 ms apart at least) inside a copy of three words: keep the last
	 * copy. */
}

/* Called only by the refreshing thread (which holds refresh_busy). */
static void params_publish(const struct params *p) {
	int i = 1 - __atomic_load_n(&current, __ATOMIC_RELAXED);
	__atomic_store_n(&slot_seq[i], slot_seq[i] + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&slot[i].off, p->off, __ATOMIC_RELAXED);
	__atomic_store_n(&slot[i].anchor, p->anchor, __ATOMIC_RELAXED);
	__atomic_store(&slot[i].rate, (double *)&p->rate, __ATOMIC_RELAXED);
	__atomic_store_n(&slot_seq[i], slot_seq[i] + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&current, i, __ATOMIC_RELEASE);
}

static int64_t params_apply(const struct params *p, int64_t real) {
	int64_t v = real + p->off;
	if (p->rate != 1.0)
		v += (int64_t)((double)(real - p->anchor) * (p->rate - 1.0));
	return v;
}

/* ---- the control file ------------------------------------------------- */

/* The last line read, as parsed. Touched only under refresh_busy. */
static struct {
	int loaded;
	int fields;
	int64_t offset, skew, anchor, epoch;
	double rate;
} seen;

static int refresh_busy;    /* atomic try-lock (a child forked while another
                             * thread held it never re-reads the file) */
static int64_t next_check;  /* atomic: real ns of the next file read */
static int path_state;      /* 0 unknown, 1 set, 2 not set (shim inert) */
static char path[PATH_CAP]; /* copied: Redis rewrites its environ area */

static int parse_int(const char **sp, int64_t *out) {
	const char *s = *sp;
	int neg = 0;
	uint64_t v = 0;
	if (*s == '-' || *s == '+')
		neg = *s++ == '-';
	if (*s < '0' || *s > '9')
		return 0;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (v > (UINT64_MAX - 9) / 10)
			return 0;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	if (v > (uint64_t)INT64_MAX + (uint64_t)neg)
		return 0;
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	*sp = s;
	return 1;
}

/* A non-negative decimal with an optional fraction and no exponent, as Go's
 * strconv.FormatFloat(r, 'f', -1, 64) writes it. Digits beyond the 17th
 * significant one, or the 18th decimal, are dropped. */
static int parse_rate(const char **sp, double *out) {
	static const double pow10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6,
	                               1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13,
	                               1e14, 1e15, 1e16, 1e17, 1e18};
	const char *s = *sp;
	uint64_t m = 0;
	int frac = 0, any = 0, dot = 0;
	if (*s == '+')
		s++;
	for (;; s++) {
		if (*s == '.' && !dot) {
			dot = 1;
			continue;
		}
		if (*s < '0' || *s > '9')
			break;
		any = 1;
		if (m >= 10000000000000000ULL || (dot && frac >= 18)) {
			if (!dot)
				return 0; /* a rate of 1e17 or more is nonsense */
			continue;
		}
		m = m * 10 + (uint64_t)(*s - '0');
		frac += dot;
	}
	if (!any)
		return 0;
	*out = (double)m / pow10[frac];
	*sp = s;
	return 1;
}

static void skip_blanks(const char **sp) {
	while (**sp == ' ' || **sp == '\t' || **sp == '\r')
		(*sp)++;
}

static int read_line(char *buf, int cap) {
	int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int n = 0;
	while (n < cap - 1) {
		long r = syscall(SYS_read, fd, buf + n, (long)(cap - 1 - n));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (int)r;
	}
	syscall(SYS_close, fd);
	buf[n] = 0;
	return n;
}

static void refresh(int64_t now) {
	if (path_state == 0) {
		const char *p = getenv("REDLOCK_CLOCK_FILE");
		size_t n = 0;
		if (p)
			while (p[n] && n < PATH_CAP)
				n++;
		if (!p || n == 0 || n >= PATH_CAP) {
			path_state = 2;
			return;
		}
		for (size_t i = 0; i <= n; i++)
			path[i] = p[i];
		path_state = 1;
	}
	if (path_state != 1)
		return;

	char buf[LINE_CAP];
	if (read_line(buf, sizeof buf) <= 0)
		return; /* missing or empty (never, with atomic writes): keep going */

	const char *s = buf;
	int64_t offset, skew = 0, anchor = 0, epoch = 0;
	double rate;
	int fields = 2;
	skip_blanks(&s);
	if (!parse_int(&s, &offset))
		return;
	skip_blanks(&s);
	if (!parse_rate(&s, &rate))
		return;
	skip_blanks(&s);
	if (*s != '\n' && *s != 0) {
		if (!parse_int(&s, &skew))
			return;
		skip_blanks(&s);
		if (!parse_int(&s, &anchor))
			return;
		fields = 4;
		skip_blanks(&s);
		if (*s != '\n' && *s != 0) {
			if (!parse_int(&s, &epoch))
				return;
			fields = 5;
		}
	}
	skip_blanks(&s);
	if (*s != '\n' && *s != 0)
		return; /* trailing junk: a line we do not understand */

	if (seen.loaded && seen.fields == fields && seen.offset == offset &&
	    seen.rate == rate && seen.skew == skew && seen.anchor == anchor &&
	    seen.epoch == epoch)
		return; /* unchanged */

	struct params next = {offset + skew, fields >= 4 ? anchor : now, rate};
	if (seen.loaded && seen.fields == fields && seen.epoch == epoch) {
		struct params cur;
		params_load(&cur);
		int64_t was = params_apply(&cur, now);
		if (fields < 4) {
			/* No anchor in the file: carry on from the current
			 * clock, plus whatever the offset moved by. */
			next.off = was - now + (offset - seen.offset);
			next.anchor = now;
		} else if (offset == seen.offset && params_apply(&next, now) < was) {
			/* A rate change seen late: never step back. */
			next.off = was - now;
			next.anchor = now;
		}
	}
	params_publish(&next);
	seen.loaded = 1;
	seen.fields = fields;
	seen.offset = offset;
	seen.rate = rate;
	seen.skew = skew;
	seen.anchor = anchor;
	seen.epoch = epoch;
}

static void maybe_refresh(int64_t real) {
	int64_t at = __atomic_load_n(&next_check, __ATOMIC_RELAXED);
	/* due, or the real clock was stepped back by more than a recheck */
	if (real < at && real > at - 2 * RECHECK_NS)
		return;
	if (__atomic_exchange_n(&refresh_busy, 1, __ATOMIC_ACQUIRE))
		return; /* someone else is at it; their result shows up shortly */
	int saved = errno;
	__atomic_store_n(&next_check, real + RECHECK_NS, __ATOMIC_RELAXED);
	refresh(real);
	errno = saved;
	__atomic_store_n(&refresh_busy, 0, __ATOMIC_RELEASE);
}

static int64_t fake_ns(int64_t real) {
	maybe_refresh(real);
	struct params p;
	params_load(&p);
	return params_apply(&p, real);
}

/* ---- the overrides ---------------------------------------------------- */

int clock_gettime(clockid_t id, struct timespec *ts) {
	if (id != CLOCK_REALTIME && id != CLOCK_REALTIME_COARSE)
		return real_clock_gettime(id, ts);
	int rc = real_clock_gettime(id, ts);
	if (rc != 0)
		return rc;
	int64_t sec, nsec;
	ns_split(fake_ns(ts_ns(ts)), &sec, &nsec);
	ts->tv_sec = (time_t)sec;
	ts->tv_nsec = (long)nsec;
	return 0;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	if (tz) {
		/* the obsolete timezone: whatever the kernel says */
		struct timeval ignored;
		if (syscall(SYS_gettimeofday, &ignored, tz) != 0)
			return -1;
	}
	struct timespec ts; /* tv is nonnull, as glibc declares it */
	int rc = real_clock_gettime(CLOCK_REALTIME, &ts);
	if (rc != 0)
		return rc;
	int64_t sec, nsec;
	ns_split(fake_ns(ts_ns(&ts)), &sec, &nsec);
	tv->tv_sec = (time_t)sec;
	tv->tv_usec = (suseconds_t)(nsec / 1000);
	return 0;
}

time_t time(time_t *tloc) {
	struct timespec ts;
	time_t t;
	if (real_clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return (time_t)-1;
	int64_t sec, nsec;
	ns_split(fake_ns(ts_ns(&ts)), &sec, &nsec);
	t = (time_t)sec;
	if (tloc)
		*tloc = t;
	return t;
}
