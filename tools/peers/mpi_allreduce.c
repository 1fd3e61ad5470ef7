/* SPDX-License-Identifier: Apache-2.0
 *
 * Open MPI's MPI_Allreduce measured the way gsync-perf measures gsync, so the
 * two can be set side by side in one run (tools/bench/compare-local.sh).
 * In-place float32 sum; per size one checked op, warm-up, then at least
 * `iters` timed ops in samples of k back-to-back ops after a barrier
 * (sampling.h); time = median over samples of the slowest rank's time per
 * op. Prints one JSON object per line from rank 0: bytes, time_us,
 * algbw_gbps, busbw_gbps, wrong.
 *
 *   mpirun -np 4 --mca pml ob1 --mca btl self,vader mpi-allreduce [min max iters]
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampling.h"

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* On a pinned test bed the launcher lists each rank's CPUs in
 * GSYNC_PEER_CPUS ("0;1;0;1": rank order, ';' between ranks, ',' between
 * CPUs), so this rank runs where gsync's ranks of its host run. */
static int pin_rank(int rank) {
  const char* all = getenv("GSYNC_PEER_CPUS");
  if (all == NULL || *all == '\0') return 0;
  for (int r = 0; r < rank && all != NULL; r++) {
    all = strchr(all, ';');
    if (all != NULL) all++;
  }
  if (all == NULL) return 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  int any = 0;
  for (const char* p = all; *p != '\0' && *p != ';';) {
    char* end;
    long c = strtol(p, &end, 10);
    if (end == p || c < 0 || c >= CPU_SETSIZE) return -1;
    CPU_SET((int)c, &set);
    any = 1;
    p = *end == ',' ? end + 1 : end;
  }
  return any && sched_setaffinity(0, sizeof set, &set) != 0 ? -1 : 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (pin_rank(rank) != 0) {
    fprintf(stderr, "mpi-allreduce rank %d: cannot pin to GSYNC_PEER_CPUS=%s\n", rank,
            getenv("GSYNC_PEER_CPUS"));
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  // Every rank is up: the launcher waits for this line before its own
  // deadline for the run (tools/peers/launch.cc, run_mpi_tcp).
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    printf("# mpi up: %d ranks\n", n);
    fflush(stdout);
  }
  size_t min = argc > 1 ? strtoull(argv[1], NULL, 0) : 4096;
  size_t max = argc > 2 ? strtoull(argv[2], NULL, 0) : (256u << 20);
  int iters = argc > 3 ? atoi(argv[3]) : 20;
  if (iters < 1) iters = 1;
  float* buf = malloc(max);
  double* times = malloc(sizeof(double) * (size_t)iters);
  double* slowest = malloc(sizeof(double) * (size_t)iters);
  for (size_t bytes = min; bytes <= max; bytes *= 4) {
    size_t count = bytes / sizeof(float);
    for (size_t i = 0; i < count; i++) buf[i] = (float)(rank + 1);
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long wrong = 0, total = 0;
    for (size_t i = 0; i < count; i++) wrong += buf[i] != (float)(n * (n + 1) / 2);
    MPI_Reduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    for (int w = 0; w < 3; w++)
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const int k = gsync_ops_per_sample(bytes), samples = gsync_samples_for(iters, bytes);
    const double cpu0 = gsync_process_cpu_s();
    for (int i = 0; i < samples; i++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int j = 0; j < k; j++)
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      times[i] = (MPI_Wtime() - t0) / k;
    }
    /* Every rank's CPU over the samples, summed (sampling.h). */
    double cpu = gsync_process_cpu_s() - cpu0, cpu_sum = 0;
    /* One reduction per size: the slowest rank per sample, as gsync-perf. */
    MPI_Reduce(times, slowest, samples, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&cpu, &cpu_sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      qsort(slowest, (size_t)samples, sizeof(double), cmp);
      double us = slowest[samples / 2] * 1e6, algbw = (double)bytes / us / 1e3;
      printf("{\"peer\": \"openmpi\", \"ranks\": %d, \"bytes\": %zu, \"time_us\": %.3f, "
             "\"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"wrong\": %ld, "
             "\"cpu_s\": %.6f, \"timed_ops\": %d}\n",
             n, bytes, us, algbw, n > 1 ? algbw * 2.0 * (n - 1) / n : 0.0, total, cpu_sum,
             samples * k);
      fflush(stdout);
    }
  }
  free(buf);
  free(times);
  free(slowest);
  MPI_Finalize();
  return 0;
}
