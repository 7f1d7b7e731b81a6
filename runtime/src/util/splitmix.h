/*
 * splitmix.h -- splitmix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014;
 * constants from Sebastiano Vigna's public-domain reference splitmix64.c, prng.di.unimi.it): the one definition
 * the data order (data.c), the token windows (text.c) and the parameter sketches (drift.c) draw from. Changing it
 * changes every run's data order and every recorded trace.
 */
#ifndef TR_SPLITMIX_H
#define TR_SPLITMIX_H

#include <stdint.h>

/** splitmix64's increment: the state advances by it before each output. */
#define TR_SPLITMIX64_GOLDEN 0x9e3779b97f4a7c15ull

/** splitmix64's output function (a bijection of 64-bit words): what the generator returns for state z. */
static inline uint64_t tr_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/** The output of splitmix64 seeded with x on its first call: tr_mix64(x + TR_SPLITMIX64_GOLDEN). */
static inline uint64_t tr_splitmix64(uint64_t x) { return tr_mix64(x + TR_SPLITMIX64_GOLDEN); }

#endif
