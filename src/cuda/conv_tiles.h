/* The tile table of the mma.sync implicit-GEMM conv (conv_sm90_mma.cu): every tile shape the kernel is built
 * for, and why. One place, so that a change of tiles is one edit here.
 *
 * All shapes use BK = 64 bf16 (K packed across the taps: a step of 64 may span two taps of cin % 64 != 0) (one 128-byte shared-memory row per pixel or output channel, XOR-swizzled in
 * 16-byte chunks so that cp.async stores and ldmatrix loads are bank-conflict free), and warps of
 * mma.sync.m16n8k16 with fp32 accumulators.
 *
 * | name  | BM x BN | warps (M x N) | warp tile | stages | smem   | used when  | why |
 * | mid   | 128x128 | 2 x 4         | 64 x 32   | 3      |  96 KB | N > 32 but 96 and 192 | every GEMM of N >= 256 the TMA conv does not take (the portable path's heavy convs, the Hopper path's conv_in and attention P V); 2 blocks per SM (2 x 96 KB): 16 warps an SM hide ldmatrix and cp.async latency better than the 128 x 256 tile's 8 (one 192 KB block: 38% slower on the portable path's f121, session 38) |
 * | small | 128x32  | 4 x 1         | 32 x 32   | 4      |  80 KB | N <= 32    | conv_out (N = 12): a 256-wide tile would waste 95% of the MMAs |
 * | n96   | 128x96  | 4 x 2         | 32 x 48   | 3      |  84 KB | 96 pads N less than 128 | the Wan2.1 decoder's 96- and 192-channel convs: 128x128 ran them with 25% of the MMAs on padding |
 *
 * Which tile a GEMM gets is route.h's w22_route_mma_tile, the same on both paths: every tile within the portable
 * path's W22_PORTABLE_SMEM. On the Hopper path this kernel takes only
 * the GEMMs the TMA wgmma conv does not (cin % 64 != 0, N % 128 != 0, upsample phases, the attention); on the
 * portable path it is the GEMM kernel of every conv the row kernels do not take. Measurements: docs/PERF.md (mid
 * ~300 TFLOP/s on the portable path's 256-channel convs at 352 x 624, an H100 at its power limit). */
#ifndef W22_CONV_TILES_H
#define W22_CONV_TILES_H

#define W22_CONV_BK 64

/* BM, BN, WARPS_M, WARPS_N, STAGES, MIN_BLOCKS (per SM, for __launch_bounds__) */
#define W22_TILE_MID   128, 128, 2, 4, 3, 2
#define W22_TILE_SMALL 128, 32, 4, 1, 4, 2
#define W22_TILE_N96   128, 96, 4, 2, 3, 2

#endif
