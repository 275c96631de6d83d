/* The CPU backend's private pieces. */
#ifndef W22_CPU_H
#define W22_CPU_H

#include "backend.h"

struct w22_bweight {
    float *data; /* vectors: [n]; convs: taps [kt*kh*kw][cin][cout] */
    long n;
    int cout, cin, kt, kh, kw;
};

w22_status w22_cpu_conv(w22_backend *b, const w22_conv_args *a);

#endif
