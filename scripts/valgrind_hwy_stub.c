/*
 * A stand-in for libhwy.so.1 (Google Highway) under valgrind, used by scripts/memcheck-example.sh only.
 *
 * Debian's libtorch_cpu needs libavcodec, which needs libjxl, which needs libhwy; libhwy's static initializer
 * (hwy::platform::TimerResolution) executes RDTSCP whether or not the CPU advertises it. On a CPU (or VM) whose
 * CPUID hides `rdtscp`, valgrind's VEX refuses the instruction and the process dies of SIGILL before main(), so
 * no libtorch program can run under memcheck there. trainrun never decodes JPEG XL: the five symbols libjxl
 * imports from libhwy (all of them, version HWY_0) are defined here and abort if anything ever calls one, so a
 * memcheck run that gets past them is the real program minus an image codec it does not use.
 */
#include <stdio.h>
#include <stdlib.h>

static void stub_called(const char *name)
{
    fprintf(stderr, "valgrind_hwy_stub: %s called (libjxl used under memcheck?)\n", name);
    abort();
}

/* hwy::AlignedDeleter::DeleteAlignedArray(void*, void (*)(void*, void*), void*, void (*)(void*, unsigned long)) */
void _ZN3hwy14AlignedDeleter18DeleteAlignedArrayEPvPFvS1_S1_ES1_PFvS1_mE(void) { stub_called("DeleteAlignedArray"); }
/* hwy::GetChosenTarget() */
void _ZN3hwy15GetChosenTargetEv(void) { stub_called("GetChosenTarget"); }
/* hwy::FreeAlignedBytes(void const*, void (*)(void*, void*), void*) */
void _ZN3hwy16FreeAlignedBytesEPKvPFvPvS2_ES2_(void) { stub_called("FreeAlignedBytes"); }
/* hwy::SupportedTargets() */
void _ZN3hwy16SupportedTargetsEv(void) { stub_called("SupportedTargets"); }
/* hwy::AllocateAlignedBytes(unsigned long, void* (*)(void*, unsigned long), void*) */
void _ZN3hwy20AllocateAlignedBytesEmPFPvS0_mES0_(void) { stub_called("AllocateAlignedBytes"); }
