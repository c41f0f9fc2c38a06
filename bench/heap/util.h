/*
 * util.h: clock, random numbers, keys, errors and argument parsing shared by the harnesses.
 */
#ifndef KV_BENCH_UTIL_H
#define KV_BENCH_UTIL_H

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pm.h"

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "[%s] FATAL: ", PM_BACKEND);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
	exit(1);
}

/* A library call failed: name it, with the library's own message. */
#define die_pm(what, err) \
	die("%s failed (%s:%d): error %d: %s", (what), __FILE__, __LINE__, (int)(err), pm_errormsg())

/* splitmix64's finalizer: a bijection on 64-bit integers. */
static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* xorshift64* generator. */
typedef struct {
	uint64_t s;
} rng_t;

static inline void rng_seed(rng_t *r, uint64_t seed)
{
	r->s = mix64(seed + 0x9e3779b97f4a7c15ull) | 1;
}

static inline uint64_t rng_next(rng_t *r)
{
	uint64_t x = r->s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	r->s = x;
	return x * 0x2545f4914f6cdd1dull;
}

/* Uniform in [0, n). */
static inline uint64_t rng_below(rng_t *r, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

static inline void shuffle_u64(uint64_t *a, uint64_t n, rng_t *r)
{
	for (uint64_t i = n; i > 1; i--) {
		uint64_t j = rng_below(r, i);
		uint64_t t = a[i - 1];
		a[i - 1] = a[j];
		a[j] = t;
	}
}

/*
 * Key i of a run: mix64 is a bijection, so distinct (i, seed) pairs with the same seed give
 * distinct keys; they look uniformly random over 64 bits.
 */
static inline uint64_t key_of(uint64_t i, uint64_t seed)
{
	return mix64(i + (seed << 40) + 1);
}

/* The value stored with a key (checked by the verifier). */
static inline uint64_t value_of(uint64_t key)
{
	return key ^ 0x5a5a5a5a5a5a5a5aull;
}

static inline uint64_t parse_u64(const char *flag, const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	uint64_t mult = 1;
	if (*end == 'k' || *end == 'K')
		mult = 1000, end++;
	else if (*end == 'm' || *end == 'M')
		mult = 1000000, end++;
	if (errno != 0 || end == s || *end != '\0')
		die("bad value '%s' for %s", s, flag);
	return (uint64_t)v * mult;
}

#endif /* KV_BENCH_UTIL_H */
