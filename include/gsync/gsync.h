/* SPDX-License-Identifier: Apache-2.0
 *
 * libgsync: the C API a training process uses to hand gradients to gsyncd.
 *
 * Conventions (after liburing): every function that can fail returns 0 or a
 * negative GSYNC_ERR_* code; the text of the last failure on this thread,
 * naming what went wrong and where, is gsync_last_error(). The ABI is
 * versioned by libgsync.map; structs passed in carry their own size so new
 * fields can be appended without breaking old callers.
 */
#ifndef GSYNC_GSYNC_H
#define GSYNC_GSYNC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GSYNC_VERSION_MAJOR 0
#define GSYNC_VERSION_MINOR 2
#define GSYNC_VERSION_PATCH 0

/* Default daemon socket; overridden by gsync_config.socket_path or $GSYNC_SOCKET. */
#define GSYNC_DEFAULT_SOCKET "/run/gsync/gsyncd.sock"

/* Error codes. Stable: values never change meaning. */
enum gsync_error {
  GSYNC_OK = 0,
  GSYNC_ERR_INVALID = -1,     /* bad argument from the caller */
  GSYNC_ERR_CONNECT = -2,     /* cannot reach the daemon socket */
  GSYNC_ERR_REFUSED = -3,     /* daemon refused the session (auth, job shape) */
  GSYNC_ERR_VERSION = -4,     /* protocol version mismatch */
  GSYNC_ERR_NOMEM = -5,       /* shared arena (or host memory) exhausted */
  GSYNC_ERR_TIMEOUT = -6,     /* op did not complete in time (ranks missing) */
  GSYNC_ERR_RANK_DEAD = -7,   /* a rank of the job died or disconnected */
  GSYNC_ERR_MISMATCH = -8,    /* ranks disagree on count / dtype / op / root */
  GSYNC_ERR_PROTOCOL = -9,    /* malformed message or ring entry */
  GSYNC_ERR_CLOSED = -10,     /* the daemon closed the session */
  GSYNC_ERR_AGAIN = -11,      /* not complete yet (gsync_test, wait timeout) */
  GSYNC_ERR_BUSY = -12,       /* too many operations in flight */
  GSYNC_ERR_UNSUPPORTED = -13,/* dtype/op combination not supported */
  GSYNC_ERR_PERMISSION = -14, /* uid/gid not allowed by the daemon */
  GSYNC_ERR_INTERNAL = -15,   /* a bug in gsync; the text says where */
  GSYNC_ERR_HOST_LOST = -16,  /* a host of the job was lost (dead or unreachable) */
  GSYNC_ERR_ANOMALY = -17,    /* the reduced gradient is non-finite or a norm spike (the
                                 anomaly guard); every rank gets it alike: skip the step */
  GSYNC_ERR_WORLD_CHANGED = -18 /* an elastic job's world changed (a host left or joined):
                                   call gsync_world for this rank's new rank and world
                                   size, then go on from the next step */
};

enum gsync_dtype {
  GSYNC_FLOAT32 = 0,
  GSYNC_FLOAT16 = 1,
  GSYNC_BFLOAT16 = 2,
  GSYNC_FLOAT64 = 3,
  GSYNC_INT32 = 4,
  /* Since 0.8: unsigned bytes, for sum (wrapping mod 256), min and max
   * (what a reproducible allreduce's exponents travel as). */
  GSYNC_UINT8 = 5
};

enum gsync_redop {
  GSYNC_SUM = 0,
  GSYNC_AVG = 1,          /* sum / number of ranks */
  GSYNC_WEIGHTED_AVG = 2, /* sum(w_r * x_r) / sum(w_r), w_r given per rank */
  GSYNC_MIN = 3,
  GSYNC_MAX = 4
};

/* Lossy compression of fp32 gradients between hosts (docs/compression.md). */
typedef enum gsync_codec {
  GSYNC_CODEC_NONE = 0, /* fp32 as is */
  GSYNC_CODEC_FP16 = 1, /* IEEE half, nearest-even */
  GSYNC_CODEC_BF16 = 2, /* bfloat16, nearest-even */
  GSYNC_CODEC_INT8 = 3, /* int8 with one fp32 scale per block */
  GSYNC_CODEC_TOPK = 4  /* the largest magnitudes, as index + value */
} gsync_codec_t;

/* Which hops between hosts a codec applies to. */
typedef enum gsync_hops {
  GSYNC_HOPS_CROSS_RACK = 0, /* between racks only (the default: the uplink) */
  GSYNC_HOPS_CROSS_HOST = 1, /* every hop between hosts */
  GSYNC_HOPS_ALL = 2         /* the same as CROSS_HOST: ranks on one host share memory */
} gsync_hops_t;

/* The job's own (gsync_config_t.compression) in gsync_allreduce_opts_t. */
#define GSYNC_CODEC_JOB (-1)

/* How an allreduce's fp32 data is compressed between hosts
 * (docs/compression.md). Only for GSYNC_FLOAT32 with GSYNC_SUM, GSYNC_AVG or
 * GSYNC_WEIGHTED_AVG; a job on one host has no hop to compress. */
typedef struct gsync_compression {
  int32_t codec;          /* gsync_codec_t; GSYNC_CODEC_NONE: off */
  int32_t hops;           /* gsync_hops_t */
  uint32_t block;         /* int8: values per scale, a multiple of 64; 0: 1024 */
  float topk_fraction;    /* topk: the share of values sent, in (0, 1]; 0: 0.01 */
  int32_t error_feedback; /* nonzero (the default): what a codec drops is kept
                             by the daemon and added to the next step */
} gsync_compression_t;

/* Parameter-server mode (docs/parameter-server.md): how the workers of a
 * job wait for each other, and the optimizer the servers apply. */
typedef enum gsync_sync_mode {
  GSYNC_SYNC_BSP = 0, /* every worker's push of a clock applied before any pull of the next */
  GSYNC_SYNC_ASP = 1, /* pushes applied as they come; pulls answered at once */
  GSYNC_SYNC_SSP = 2  /* as ASP, but a pull waits until no worker is more than
                         `staleness` clocks behind */
} gsync_sync_mode_t;

typedef enum gsync_optimizer {
  GSYNC_OPT_SGD = 0,  /* with momentum and weight decay, as torch.optim.SGD */
  GSYNC_OPT_ADAM = 1, /* as torch.optim.Adam (weight decay added to the gradient) */
  GSYNC_OPT_ADAMW = 2 /* as torch.optim.AdamW (decoupled weight decay) */
} gsync_optimizer_t;

typedef struct gsync_comm gsync_comm_t;
typedef struct gsync_request gsync_request_t;

typedef struct gsync_config {
  uint32_t struct_size;    /* set by gsync_config_init; keeps the ABI open */
  const char *socket_path; /* NULL: $GSYNC_SOCKET, else GSYNC_DEFAULT_SOCKET */
  const char *job_id;      /* jobs are isolated by this name (<= 63 bytes) */
  int32_t world_size;      /* ranks of the job on all hosts */
  int32_t rank;            /* 0 .. world_size-1 */
  int32_t local_rank;      /* 0 .. local_size-1 */
  int32_t local_size;      /* ranks of the job on this host */
  uint64_t arena_bytes;    /* shared tensor arena; 0: daemon default */
  uint32_t timeout_ms;     /* per-op timeout; 0: daemon default */
  /* Since 0.2: the job's compression, for every gsync_allreduce of this
   * session (gsync_allreduce_ex may choose another per op). $GSYNC_COMPRESSION
   * overrides it: "none", "fp16", "bf16", "int8[:BLOCK]", "topk[:FRACTION]",
   * then optionally "@cross_rack" / "@cross_host" / "@all" and ",noef". */
  gsync_compression_t compression;
  /* Since 0.2: the job's sync mode for its parameter-server ops (every rank
   * of the job must say the same); staleness is the bound of GSYNC_SYNC_SSP. */
  int32_t sync_mode;
  uint32_t staleness;
  /* Since 0.3: the anomaly guard of the job's allreduces
   * (docs/fault-tolerance.md): nonzero anomaly_guard checks every reduced
   * sum, average or weighted average for NaN/Inf and for a norm more than
   * anomaly_sigmas (default 6) standard deviations above its mean over the
   * last anomaly_window (default 128) steps of the same key; such an op
   * completes on every rank with GSYNC_ERR_ANOMALY. Every rank of the job
   * must say the same. */
  int32_t anomaly_guard;
  uint32_t anomaly_sigmas;
  uint32_t anomaly_window;
  /* Since 0.4: the job's cross-host algorithm, "ring", "hier", "direct",
   * "tree" or "doubling" (docs/algorithms.md); NULL or "auto": the daemon
   * chooses (its configured algorithm, else its tuning table, else its
   * built-in rule). chunk_bytes: the pipelining unit, a multiple of 4096 up
   * to 1 GiB; 0: chosen per tensor. Every rank of the job must say the same.
   * $GSYNC_ALGORITHM and $GSYNC_CHUNK_BYTES override them. */
  const char *algorithm;
  uint64_t chunk_bytes;
  /* Since 0.5: an elastic job (docs/membership.md, "Elastic jobs"): with
   * min_hosts > 0 the daemons number the ranks (world_size and rank must
   * be 0; local_rank and local_size say where the rank is on its host),
   * the job runs on as many hosts as have all their local ranks connected,
   * up to max_hosts (0: no bound), and shrinks or grows at a step boundary
   * when a host leaves or joins: the op in flight fails (GSYNC_ERR_HOST_LOST
   * naming the host, or GSYNC_ERR_WORLD_CHANGED), the next submission gets
   * GSYNC_ERR_WORLD_CHANGED, gsync_world tells the new world. Fewer hosts
   * than min_hosts end the job: its ops fail naming the hosts left. Every
   * rank of the job must say the same. $GSYNC_MIN_HOSTS and
   * $GSYNC_MAX_HOSTS override them. */
  int32_t min_hosts;
  int32_t max_hosts;
  /* Since 0.8: nonzero makes every sum, average and weighted average of
   * float32, float16 and bfloat16 that this rank submits reproducible
   * (docs/reproducibility.md): its result depends only on each rank's
   * contribution - not on hosts, racks, ranks per host, algorithm, chunk
   * size, tensor size or transport - at the cost of a second op for large
   * tensors. Such ops are never compressed. Every rank of the job must say
   * the same. $GSYNC_REPRODUCIBLE (0 or 1) overrides it;
   * gsync_allreduce_opts_t.reproducible chooses per op. */
  int32_t reproducible;
} gsync_config_t;

/* The world of a job as this rank is in it (gsync_world). */
typedef struct gsync_world {
  uint32_t struct_size; /* set by the caller: sizeof(gsync_world_t) */
  uint64_t epoch;       /* grows with every change of an elastic job's world; 0: a fixed job */
  int32_t world_size;   /* ranks on all hosts of the world */
  int32_t rank;         /* this rank's number in it */
  int32_t local_rank;
  int32_t local_size;
  int32_t hosts;        /* hosts in the world */
} gsync_world_t;

/* A parameter's optimizer (gsync_ps_declare); fields may be appended. */
typedef struct gsync_ps_opts {
  uint32_t struct_size; /* set by gsync_ps_opts_init */
  int32_t optimizer;    /* gsync_optimizer_t; default SGD */
  float lr;             /* default 0.01; a push may give its own */
  float momentum;       /* SGD, in [0, 1); default 0 */
  float weight_decay;   /* >= 0; default 0 */
  float beta1, beta2;   /* Adam: in [0, 1); default 0.9, 0.999 */
  float eps;            /* Adam: > 0; default 1e-8 */
  /* Since 0.3: checkpoints of the servers' state (docs/fault-tolerance.md),
   * written by each daemon to its checkpoint.dir every checkpoint_clocks
   * clocks and/or every checkpoint_ms milliseconds (0 and 0: none). With
   * resume (the default), a declaration resumes from the newest checkpoint
   * every host holds: the request completes with buf holding the
   * parameters of that clock, which gsync_ps_resume_clock tells. */
  uint32_t checkpoint_clocks;
  uint32_t checkpoint_ms;
  int32_t resume;
} gsync_ps_opts_t;

/* A push's options; fields may be appended. */
typedef struct gsync_push_opts {
  uint32_t struct_size; /* set by gsync_push_opts_init */
  uint32_t timeout_ms;  /* 0: the session's */
  double weight;        /* the samples this rank's gradient averages over; default 1 */
  float lr;             /* this step's learning rate; 0 (default): the declared one */
} gsync_push_opts_t;

/* Options of one allreduce (gsync_allreduce_ex); fields may be appended. */
typedef struct gsync_allreduce_opts {
  uint32_t struct_size;  /* set by gsync_allreduce_opts_init */
  uint32_t timeout_ms;   /* 0: the session's */
  double weight;         /* GSYNC_WEIGHTED_AVG: this rank's weight */
  /* codec GSYNC_CODEC_JOB (what gsync_allreduce_opts_init sets): the job's */
  gsync_compression_t compression;
  /* Since 0.8: 1 reproducible, 0 not, -1 (what gsync_allreduce_opts_init
   * sets) the session's (gsync_config_t.reproducible). A reproducible op
   * takes sum, avg or weighted avg of float32, float16 or bfloat16
   * (GSYNC_ERR_UNSUPPORTED otherwise), host memory, a key below 2^48
   * (the keys above carry its own two ops) and no codec. */
  int32_t reproducible;
} gsync_allreduce_opts_t;

/* Library version "MAJOR.MINOR.PATCH". */
const char *gsync_version(void);
/* Static text for a code. Never NULL. */
const char *gsync_strerror(int code);
/* Text of the last failure on the calling thread ("" if none). */
const char *gsync_last_error(void);

void gsync_config_init(gsync_config_t *cfg);

/* Connect to gsyncd, authenticate, map the shared rings and arena. */
int gsync_connect(const gsync_config_t *cfg, gsync_comm_t **out);
/* Close the session. Pending requests complete with GSYNC_ERR_CLOSED. */
int gsync_close(gsync_comm_t *comm);

/* Tensor memory in the shared arena: buffers here are reduced in place by
 * the daemon with no copy (zero-copy path). Memory elsewhere works too but
 * is staged through the arena (one copy in, one copy out). */
int gsync_alloc(gsync_comm_t *comm, size_t bytes, void **out);
int gsync_free(gsync_comm_t *comm, void *ptr);
/* Arena capacity and bytes currently free (either pointer may be NULL). */
int gsync_arena_info(gsync_comm_t *comm, size_t *capacity, size_t *free_bytes);

/* GPU memory the daemon reduces in place, on the GPU (docs/gpu.md): `bytes`
 * on the calling thread's current CUDA device (cudaSetDevice), allocated in
 * this process and shared with the daemon. A tensor anywhere in it goes to
 * gsync_allreduce / gsync_broadcast like arena memory, with no copy to the
 * host; order the kernels that write it before the submission
 * (cudaStreamSynchronize or cudaDeviceSynchronize), as the daemon reads it
 * on its own stream. The local ranks' buffers of an op may be on several
 * GPUs (with peer access between them the GPUs fold it, else it goes
 * through host memory, as do float64 and int32, host memory in the same op
 * and a job with an anomaly guard); across hosts it travels from pinned
 * host memory. Not for the parameter server's ops (host memory only).
 * GSYNC_ERR_UNSUPPORTED where there is no GPU or NVIDIA
 * driver, in this process or in the daemon (the text says which);
 * GSYNC_ERR_NOMEM when the GPU is full. Neither process writing into freed
 * memory: the memory stays until both the client and the daemon's ops over
 * it let go. libgsync links no CUDA library: it finds libcuda.so.1 at run
 * time. Not to race with gsync_close. */
int gsync_alloc_device(gsync_comm_t *comm, size_t bytes, void **out);
int gsync_free_device(gsync_comm_t *comm, void *ptr);

/* Operations are matched across ranks by (key, step): ranks may submit
 * different tensors in different orders. All are asynchronous: complete
 * them with gsync_wait or gsync_test, then release with gsync_request_free.
 * weight is used by GSYNC_WEIGHTED_AVG only. */
int gsync_allreduce(gsync_comm_t *comm, uint64_t key, uint64_t step, void *buf,
                    size_t count, int dtype, int op, double weight,
                    gsync_request_t **req);
/* gsync_allreduce with options (NULL: the defaults of
 * gsync_allreduce_opts_init). A bad option is GSYNC_ERR_INVALID naming the
 * field, and nothing is submitted. */
void gsync_allreduce_opts_init(gsync_allreduce_opts_t *opts);
int gsync_allreduce_ex(gsync_comm_t *comm, uint64_t key, uint64_t step, void *buf,
                       size_t count, int dtype, int op, const gsync_allreduce_opts_t *opts,
                       gsync_request_t **req);
/* A codec as text ("int8", "topk:0.01@cross_host,noef", as $GSYNC_COMPRESSION
 * takes it) into *out; GSYNC_ERR_INVALID naming what is wrong. */
int gsync_compression_parse(const char *text, gsync_compression_t *out);
/* Parameter server (docs/parameter-server.md). Every rank of the job
 * declares each parameter once, with the same key, count, dtype
 * (GSYNC_FLOAT32, GSYNC_FLOAT16 or GSYNC_BFLOAT16) and options; rank 0's buf
 * holds the initial values, and every rank's buf holds them when the
 * request completes. The daemons then keep fp32 master values and the
 * optimizer's state, each host a shard. A worker's clock counts its steps
 * from 0: gsync_ps_push_pull(key, c, buf) sends buf's gradient of step c
 * and fills buf with the parameters of step c + 1, as the job's sync mode
 * allows; gsync_ps_push sends without waiting for parameters;
 * gsync_ps_pull(key, c, out) fetches those of step c. A bad argument is
 * GSYNC_ERR_INVALID naming the field, with nothing sent. A push that the
 * daemon fails (a clock out of order is GSYNC_ERR_INVALID naming both
 * clocks, and changes nothing on any server) leaves in local rank 0's
 * buffer its host's fold of the gradients (the sum of weight x gradient
 * over the host's ranks; with one rank, its gradient times its weight), in
 * the other ranks' buffers what they held: fill it again before a retry. */
void gsync_ps_opts_init(gsync_ps_opts_t *opts);
void gsync_push_opts_init(gsync_push_opts_t *opts);
int gsync_ps_declare(gsync_comm_t *comm, uint64_t key, void *buf, size_t count, int dtype,
                     const gsync_ps_opts_t *opts, gsync_request_t **req);
int gsync_ps_push(gsync_comm_t *comm, uint64_t key, uint64_t clock, void *grad, size_t count,
                  int dtype, const gsync_push_opts_t *opts, gsync_request_t **req);
int gsync_ps_pull(gsync_comm_t *comm, uint64_t key, uint64_t clock, void *out, size_t count,
                  int dtype, gsync_request_t **req);
int gsync_ps_push_pull(gsync_comm_t *comm, uint64_t key, uint64_t clock, void *buf,
                       size_t count, int dtype, const gsync_push_opts_t *opts,
                       gsync_request_t **req);
/* The clock a completed declaration resumed from: 0 for a fresh start (the
 * initial values), c when buf holds the parameters of step c from a
 * checkpoint, and the worker's next push is at clock c. GSYNC_ERR_INVALID
 * for a request that is not a completed declaration. */
int gsync_ps_resume_clock(gsync_request_t *req, uint64_t *clock);
/* After a gsync_ps_push or gsync_ps_push_pull completed with 0: 1 when
 * the job's anomaly guard rolled its clock back (every server dropped the
 * clock's update: a push_pull's buf holds the parameters as they were
 * before it; the worker's next clock is clock + 1 as usual), and *why (if
 * not NULL; valid until gsync_request_free) names the job, key, clock, the
 * norm and, for a NaN or Inf, whose gradient held the first one; 0 when
 * the clock was applied (*why ""). GSYNC_ERR_INVALID for a request that is
 * not a completed push. */
int gsync_ps_rolled_back(gsync_request_t *req, const char **why);
/* Batch leases (docs/fault-tolerance.md, "Batch leases"): a
 * parameter-server job may have the daemons hand out its data. Epoch
 * `epoch` is the batch ids 0 .. batches-1 (every rank says the same
 * batches; at most 2^28). gsync_lease asks for the next batch for the
 * rank's step `clock`; once the request completes, gsync_lease_batch gives
 * the batch id, or:
 *   GSYNC_LEASE_WAIT  no batch is free now, but some are leased and not
 *                     settled: take the step without data (push zeros with
 *                     weight 0) and ask again at the next clock;
 *   GSYNC_LEASE_END   every batch of the epoch is settled.
 * A lease is settled when the rank's pushes of `clock` (every declared
 * key) are applied. A rank that dies or closes has its unsettled leases
 * handed to the next ranks that ask, and the job goes on without it: every
 * batch is trained on exactly once per epoch. Declare the parameters first;
 * from the first lease on, a clock's pushes on a host begin together, once
 * every rank there has pushed every key at that clock. */
#define GSYNC_LEASE_WAIT UINT64_C(0xfffffffe)
#define GSYNC_LEASE_END UINT64_C(0xffffffff)
int gsync_lease(gsync_comm_t *comm, uint64_t epoch, uint64_t batches, uint64_t clock,
                gsync_request_t **req);
int gsync_lease_batch(gsync_request_t *req, uint64_t *batch);
int gsync_broadcast(gsync_comm_t *comm, uint64_t key, uint64_t step, void *buf,
                    size_t count, int dtype, int root, gsync_request_t **req);
int gsync_ibarrier(gsync_comm_t *comm, uint64_t step, gsync_request_t **req);
/* The job's world now (gsync_world_t): for an elastic job it waits, up to
 * timeout_ms (< 0: forever), until the daemons have formed one (enough
 * hosts, min_hosts), and from then on this rank's submissions are taken in
 * that world. After GSYNC_ERR_WORLD_CHANGED or GSYNC_ERR_HOST_LOST call it,
 * renumber what depends on the rank, bring the ranks' state into agreement
 * (broadcast it from rank 0) and go on. GSYNC_ERR_TIMEOUT while too few
 * hosts are there; GSYNC_ERR_HOST_LOST once the job ended below min_hosts. */
int gsync_world(gsync_comm_t *comm, gsync_world_t *out, int timeout_ms);
/* Blocking barrier over all ranks of the job. */
int gsync_barrier(gsync_comm_t *comm, uint64_t step, int timeout_ms);

/* 0 when done successfully, a negative code when it failed (the text is in
 * gsync_last_error and gsync_request_error), GSYNC_ERR_AGAIN when pending.
 * timeout_ms < 0 waits forever (the daemon's op timeout still applies). */
int gsync_test(gsync_request_t *req);
int gsync_wait(gsync_request_t *req, int timeout_ms);
/* Error text of a failed request ("" otherwise). Valid until freed. */
const char *gsync_request_error(gsync_request_t *req);
/* Release a request. Freeing a pending one abandons its result. */
void gsync_request_free(gsync_request_t *req);

/* Readable when completions may be ready; for event-loop integration. */
int gsync_completion_fd(gsync_comm_t *comm);

#ifdef __cplusplus
}
#endif

#endif /* GSYNC_GSYNC_H */
