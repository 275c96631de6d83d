/* libFuzzer target for a VAE's config.json (w22_vae_config_parse: what the CLI, the Python package and
 * w22_weights_open_path read next to the weights of a diffusers folder): the JSON parse, the diffusers form and this
 * library's own keys, the defaults, the latents' statistics and w22_config_check. Any input must parse or fail with
 * a message, never crash, leak or read outside the buffer (ASan + UBSan); what parses must be a config that the
 * model accepts, with statistics that are either usable (z_dim finite numbers, std above 0) or said unusable. The
 * seeds (tests/fuzz_corpus_config/) are configs of both forms, with and without statistics. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "model/model.h"
#include "weights/source.h"

static volatile float sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    w22_vae_config vc;
    w22_clear_error();
    if (w22_vae_config_parse(data, size, "fuzz.json", &vc) != W22_OK) {
        if (!w22_last_error()[0]) abort(); /* a failure says why */
        if (vc.mean || vc.std) abort();    /* and keeps nothing */
        return 0;
    }
    if (w22_config_check(&vc.cfg) != W22_OK || w22_weight_count(&vc.cfg) < 1) abort();
    if (vc.nstats > 0) {
        if (vc.nstats != vc.cfg.z_dim || !vc.mean || !vc.std || !vc.diffusers) abort();
        float acc = 0;
        for (int i = 0; i < vc.nstats; i++) {
            if (!isfinite(vc.mean[i]) || !isfinite(vc.std[i]) || !(vc.std[i] > 0)) abort();
            acc += vc.mean[i] / vc.std[i];
        }
        sink = acc;
    } else if (vc.nstats == -1) {
        if (!vc.stats_problem[0] || !memchr(vc.stats_problem, 0, sizeof vc.stats_problem)) abort();
    } else if (vc.nstats != 0) {
        abort();
    }
    w22_vae_config_free(&vc);
    return 0;
}
