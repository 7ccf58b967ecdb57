// Helpers shared by the GPU tests and benches (tests_cuda/): backends made as a session makes them.
#ifndef FD_CUDA_RIG_H
#define FD_CUDA_RIG_H
#include "backend.h"

// A new CUDA backend on device 0 with the routes of the environment (FD_ROUTE_<NAME>) applied, as a CLI or server
// session applies them (engine/routes.c, the one reader of route variables); a retired name (FD_CUDA_GEMM_ACT, ...)
// is a fatal error naming its replacement.
fd_backend *cuda_rig_new_gpu(void);
#endif
