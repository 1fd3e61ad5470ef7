/* SPDX-License-Identifier: Apache-2.0 */
/* An installed libgsync against an installed gsyncd (test_packages.sh):
 * two ranks of one job on this host, forked, sum 4096 floats each; every
 * element checked. Built with `pkg-config --cflags --libs libgsync` only.
 * Exits 0 when both ranks saw the right sum. */
#include <gsync/gsync.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

enum { kCount = 4096 };

static int rank_main(int rank) {
  gsync_config_t cfg;
  gsync_config_init(&cfg);
  cfg.job_id = "packaged-c";
  cfg.world_size = 2;
  cfg.rank = rank;
  cfg.local_rank = rank;
  cfg.local_size = 2;
  gsync_comm_t *comm;
  if (gsync_connect(&cfg, &comm) != 0) {
    fprintf(stderr, "rank %d: gsync_connect: %s\n", rank, gsync_last_error());
    return 1;
  }
  float *x;
  if (gsync_alloc(comm, kCount * sizeof(float), (void **)&x) != 0) {
    fprintf(stderr, "rank %d: gsync_alloc: %s\n", rank, gsync_last_error());
    return 1;
  }
  for (int i = 0; i < kCount; i++) x[i] = (float)(i % 97) * (float)(rank + 1);
  gsync_request_t *req;
  if (gsync_allreduce(comm, 1, 0, x, kCount, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) != 0) {
    fprintf(stderr, "rank %d: gsync_allreduce: %s\n", rank, gsync_last_error());
    return 1;
  }
  if (gsync_wait(req, 30000) != 0) {
    fprintf(stderr, "rank %d: gsync_wait: %s\n", rank, gsync_request_error(req));
    return 1;
  }
  gsync_request_free(req);
  for (int i = 0; i < kCount; i++) {
    if (x[i] != (float)(i % 97) * 3.0f) {
      fprintf(stderr, "rank %d: element %d is %g, want %g\n", rank, i, x[i], (i % 97) * 3.0);
      return 1;
    }
  }
  gsync_free(comm, x);
  gsync_close(comm);
  return 0;
}

int main(void) {
  pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) _exit(rank_main(1));
  int rc = rank_main(0);
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    rc = 1;
  if (rc == 0) printf("allreduce.c: 2 ranks, %d floats summed right (libgsync %s)\n", kCount,
                      gsync_version());
  return rc;
}
