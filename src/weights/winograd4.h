/* Winograd F(4x4, 3x3)'s matrices, in one place for the weights' transform (layout.c, weights_gpu.cu: U = G g G^T)
 * and the data's (winograd.cu: V = B^T d B, Y = A^T M A), and for the tests that check them against the direct conv.
 *
 * The points are 0, 1, -1, 1/2, -2 and infinity, not Lavin's 0, +-1, +-2: with fp16 operands and an fp16 M their
 * error is 1.2-1.3x the direct conv's where Lavin's is 1.8x rms and 3.2x max, and bf16 operands are x5-13 on either
 * (dev/winograd_f4_probe.py; docs/PERF.md). B^T and A^T hold only dyadic values (exact in fp32: the transforms add no
 * rounding of their coefficients); G's thirds and fifteenths round once in fp32, before U's rounding to fp16.
 * The transform keeps |V| within ~7x the input's largest value and |M| within ~4.2x the output's (the probe), far
 * inside fp16's range for the decoder's normed inputs. */
#ifndef W22_WINOGRAD4_H
#define W22_WINOGRAD4_H

#define W22_W4_N 6 /* input tile side: 4 outputs + 2 */
#define W22_W4_K 36 /* components */

/* B^T (6 x 6): V = B^T d B over the 6 x 6 input window at rows 4 ty - 1.., cols 4 tx - 1.. */
#define W22_W4_BT                                                                                                     \
    {                                                                                                                 \
        {1.f, -1.5f, -2.f, 1.5f, 1.f, 0.f}, {0.f, -1.f, .5f, 2.5f, 1.f, 0.f}, {0.f, 1.f, -2.5f, .5f, 1.f, 0.f},      \
            {0.f, -2.f, -1.f, 2.f, 1.f, 0.f}, {0.f, .5f, -1.f, -.5f, 1.f, 0.f}, {0.f, 1.f, -1.5f, -2.f, 1.5f, 1.f}    \
    }
/* G (6 x 3): U = G g G^T per temporal tap */
#define W22_W4_G                                                                                                      \
    {                                                                                                                 \
        {1.f, 0.f, 0.f}, {1.f / 3, 1.f / 3, 1.f / 3}, {-1.f / 3, 1.f / 3, -1.f / 3},                                  \
            {-16.f / 15, -8.f / 15, -4.f / 15}, {1.f / 15, -2.f / 15, 4.f / 15}, {0.f, 0.f, 1.f}                      \
    }
/* A^T (4 x 6): Y = A^T M A */
#define W22_W4_AT                                                                                                     \
    {                                                                                                                 \
        {1.f, 1.f, 1.f, 1.f, 1.f, 0.f}, {0.f, 1.f, -1.f, .5f, -2.f, 0.f}, {0.f, 1.f, 1.f, .25f, 4.f, 0.f},           \
            {0.f, 1.f, -1.f, .125f, -8.f, 1.f}                                                                        \
    }

#endif
