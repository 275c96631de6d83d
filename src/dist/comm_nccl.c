/* NCCL across processes: not yet built (see the multi-GPU issue). */
#include "common.h"
#include "dist/comm.h"

w22_status w22_nccl_unique_id(unsigned char id[128]) {
    (void)id;
    return w22_fail(W22_ERR_UNSUPPORTED, "NCCL groups are not available in this build yet");
}

w22_status w22_comm_nccl(const unsigned char id[128], int rank, int world, int cuda_device, w22_comm **out) {
    (void)id; (void)rank; (void)world; (void)cuda_device;
    *out = NULL;
    return w22_fail(W22_ERR_UNSUPPORTED, "NCCL groups are not available in this build yet");
}
