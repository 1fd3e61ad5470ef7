/* SPDX-License-Identifier: Apache-2.0
 *
 * How every timed allreduce in gsync-perf and in the peer drivers
 * (mpi_allreduce.c, gloo_allreduce.cc) is sampled, so that a ratio between
 * them compares one measure, and the same one ../shared/peers uses for the
 * reference figures (docs/performance.md, "How a time is measured"):
 *
 *   a sample = a barrier, then k back-to-back ops; its time per op is the
 *   sample's time / k; the slowest rank's time per sample counts; the
 *   printed time is the median over samples.
 *
 * k grows as the tensor shrinks (up to 32 ops for 32 KiB and less) because
 * a single small op timed alone mostly measures how far apart the ranks
 * left the barrier, not the op; a large op is timed alone. C and C++ both
 * include this file.
 *
 * The CPU of the timed ops (gsync-perf --cpu) is each process's CPU time
 * across the samples, barriers included, summed over the ranks (and, for
 * gsync, its daemons): one window for every system.
 */
#ifndef GSYNC_TOOLS_PEERS_SAMPLING_H_
#define GSYNC_TOOLS_PEERS_SAMPLING_H_

#include <stddef.h>
#include <time.h>

/* Back-to-back ops in one sample for a tensor of `bytes`. */
static inline int gsync_ops_per_sample(size_t bytes) {
  const size_t budget = (size_t)1 << 20; /* about 1 MiB of tensor per sample */
  size_t k = bytes == 0 ? 32 : budget / bytes;
  return k < 1 ? 1 : (k > 32 ? 32 : (int)k);
}

/* Samples that cover at least `iters` timed ops, and at least 5 (or
 * `iters`, when fewer are asked for) so that the median has something to
 * choose from. */
static inline int gsync_samples_for(int iters, size_t bytes) {
  const int k = gsync_ops_per_sample(bytes);
  int s = (iters + k - 1) / k;
  if (s < 5) s = iters < 5 ? iters : 5;
  return s < 1 ? 1 : s;
}

/* This process's CPU time so far, user and system, every thread (seconds):
 * read before and after the samples, it gives the CPU the timed ops cost
 * the process - gsync-perf --cpu compares it per GB reduced. */
static inline double gsync_process_cpu_s(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0.0;
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif /* GSYNC_TOOLS_PEERS_SAMPLING_H_ */
