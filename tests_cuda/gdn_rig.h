// The GDN core checks shared by tests_cuda/test_cuda_gdn.c (both gdn_core routes, fp32 kernels) and
// tests_cuda/test_cuda_gdn_bf16.c (the chunked route's bf16 kernels, cuda route gdn_chunk=bf16): the fp64
// recurrence written from the definition (DESIGN.md section 3, gates and norms in fp64 too) and a multi-call check
// against it and against the CPU reference. Inputs are drawn from the calling file's rig, in the order the check
// always drew them.
#ifndef FD_GDN_RIG_H
#define FD_GDN_RIG_H
#include <stddef.h>

#include "backend.h"
#include "cuda_rig.h"

// o [n, Hv, dv] and S [Hv, dk, dv] (in: the initial state, out: the final one) in fp64, token by token.
void gdn_rig_ref64(double *o, double *S, const float *qkv, const float *b, const float *a, const float *A_log,
                   const float *dt_bias, int n, int Hk, int Hv, int dk, int dv);
// rel-L2 of a (fp32) against b (fp64); INFINITY on any non-finite a.
double gdn_rig_rel_l2_64(const float *a, const double *b, size_t n);

// Consecutive gdn_core calls of calls[0], calls[1], ... tokens on the GPU from a random initial state (so the state
// carries across calls), the same on the CPU reference, and the whole sequence in fp64. With `slots`, the last call
// (if not the first) also writes per-token state slots (the CPU computes them with the serial route). `chunk` names
// the cuda route gdn_chunk's value in force (a label; the caller selects it). Every error (out and final state, vs
// fp64 and vs the CPU) is EXPECTed <= tol; returns the worst; `quiet` prints nothing unless a check fails.
double gdn_rig_check_calls(cuda_rig *r, fd_gdn_route route, const char *chunk, double tol, const int *calls, int ncalls,
                           int Hk, int Hv, int dk, int dv, int slots, int quiet);

// The GDN shapes both files check: n1, n2 (two consecutive calls; 0: one), Hk, Hv, dk, dv.
#define GDN_RIG_N_SHAPES 16
extern const int gdn_rig_shapes[GDN_RIG_N_SHAPES][6];

// Every n from 1 to 200 (all chunk tails), Hv / Hk cycling through 1, 2, 3, one chunked call each from a random
// state; every 5th n at the 27B head size 128/128, the others at 64/48, under the gdn_chunk value `chunk` in force
// (the caller selects it). One summary line "gdn <label> n=1..200 ..." with the worst error, EXPECTed <= tol.
void gdn_rig_sweep_n(cuda_rig *r, const char *label, const char *chunk, double tol);
#endif
