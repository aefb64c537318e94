/* The one case table every backend and every kernel variant is run on. */
#ifndef SGK_TESTS_CASES_H
#define SGK_TESTS_CASES_H

#include <stdint.h>

#include "sgk.h"
#include "util.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    SGKT_CASE_XL = 1u << 0, /* slow in the double reference: only with SGK_TEST_XL=1 */
    /* nodes rows of a large common offset and a spread near sqrt(eps):
     * LayerNorm's x - mean cancels most of its digits there */
    SGKT_CASE_LN_OFFSET = 1u << 1
};

typedef struct sgkt_case {
    const char *name;
    int64_t B, N, D, H, P;
    sgkt_mask_pattern mask;
    double density; /* for the random patterns */
    sgk_mask_type mask_type;
    unsigned flags;
} sgkt_case;

extern const sgkt_case sgkt_cases[];
extern const int sgkt_case_count;

/* 0 for a case this run leaves out: xl without SGK_TEST_XL=1, and with
 * SGK_TEST_QUICK=1 every case of more than about 5M multiply-adds. */
int sgkt_case_enabled(const sgkt_case *c);

#ifdef __cplusplus
}
#endif
#endif
