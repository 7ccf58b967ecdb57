// Helpers shared by the GPU tests and benches: cuda_rig.h.
#include "cuda_rig.h"

#include "cuda/cuda.h"
#include "engine/routes.h"

fd_backend *cuda_rig_new_gpu(void) {
    fd_backend *be = fd_backend_cuda_create(0);
    FD_CHECK(routes_backend_preset(be, NULL, 0) == 0, "%s", fd_error_msg());
    return be;
}
