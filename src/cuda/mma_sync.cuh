/* The mma.sync kernels' PTX wrappers (conv_sm90_mma.cu, conv_rows2d.cu): 16-byte cp.async with zero fill, its
 * groups, ldmatrix, mma.sync m16n8k16 bf16 (or fp16: mma_16<true>) -> fp32, and the 128-byte-row XOR swizzle both
 * kernels' shared-memory tiles use. */
#ifndef W22_MMA_SYNC_CUH
#define W22_MMA_SYNC_CUH

#include "cuda_internal.h"
#include "conv_tiles.h"

#define ROW_BYTES (W22_CONV_BK * 2) /* one smem row: 64 bf16 */

static __device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool valid) {
    int bytes = valid ? 16 : 0; /* 0: no global read, the 16 bytes are zero-filled */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
static __device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
static __device__ __forceinline__ void mma_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
static __device__ __forceinline__ void mma_f16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* The operands' type as a template parameter: fp16 (w22_mm.f16) or bf16; the same fragments and registers. */
template <bool F16>
static __device__ __forceinline__ void mma_16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    if (F16)
        mma_f16(d, a, b0, b1);
    else
        mma_bf16(d, a, b0, b1);
}
/* Byte offset of 16-byte chunk `chunk` of smem row `row`: chunks XOR-swizzled by row so that the 8 rows an
 * ldmatrix reads at one logical chunk land in 8 different bank groups. */
static __device__ __forceinline__ uint32_t swz(int row, int chunk) {
    return (uint32_t)(row * ROW_BYTES + ((chunk ^ (row & 7)) << 4));
}

#endif
