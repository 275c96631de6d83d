/* The decode's work, counted from the layer list: 2 FLOPs per multiply-add of every conv, matrix product and
 * attention product (norms and elementwise work are not counted, as in shared/docs/wan22-decoder.md). */
#include "model/model.h"

double w22_decode_flops(const w22_config *cfg, int T, int h, int w) {
    if (w22_config_check(cfg) != W22_OK || T < 1 || h < 1 || w < 1) return 0;
    w22_model m;
    w22_model_build(cfg, &m);
    int frames[4];
    w22_model_stage_frames(&m, T, frames);
    double total = 0;
    for (int i = 0; i < m.nlayers; i++) {
        const w22_layer *l = &m.layers[i];
        double px = (double)h * (1 << l->level) * (double)w * (1 << l->level); /* in double: h << 3 may overflow */
        double f = frames[l->level];
        double ci = l->cin, co = l->cout;
        switch (l->kind) {
        case W22_L_POST_QUANT: total += 2 * ci * co * f * px; break;
        case W22_L_CONV_IN: total += 2 * 27 * ci * co * f * px; break;
        case W22_L_RESBLOCK:
            total += 2 * 27 * ci * co * f * px + 2 * 27 * co * co * f * px;
            if (l->cin != l->cout) total += 2 * ci * co * f * px;
            break;
        case W22_L_ATTN:
            total += 2 * ci * 3 * ci * f * px + 2 * 2 * px * px * ci * f + 2 * ci * ci * f * px;
            break;
        case W22_L_UPSAMPLE: {
            double fo = f;
            if (l->temporal) {
                total += 2 * 3 * ci * 2 * ci * (f - 1) * px;
                fo = 2 * f - 1;
            }
            total += 2 * 9 * ci * co * fo * px * 4;
            break;
        }
        case W22_L_HEAD: total += 2 * 27 * ci * co * f * px; break;
        default: break;
        }
    }
    return total;
}
