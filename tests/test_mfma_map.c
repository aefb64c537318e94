/* The lane mapping of the HIP target's matrix-core tile product
 * (kernels/mma_hip.h), on the host.
 *
 * No AMD GPU runs in this suite, so this checks the index math of
 * sgk_tc_mm (which operand elements lane l loads at a k-step, which output
 * each of its accumulators is, the block tasks, rows past M, k past K and
 * columns past NC) against v_mfma_f32_16x16x4f32 as AMD documents it (the
 * matrix instruction calculator's element-to-register mapping, CDNA1 to
 * CDNA3): D = C + A B with A[i][k] in lane 16 k + i, B[k][j] in lane
 * 16 k + j, and D[i][j] in register i % 4 of lane 16 (i / 4) + j. It
 * checks the mapping against the documented semantics, not the hardware:
 * what the matrix core does with rounding, NaN and Inf is not modelled.
 *
 * The products run through the header's own functions, over 64 emulated
 * lanes, for odd shapes (M, NC, K not multiples of 16 or 4, several
 * products, strided and transposed A and C, B with padded rows, a residual
 * apart from C and in place) and every block width; the operands hold
 * small integers, so every sum is exact in float in any order and the
 * result must equal a plain triple loop's bit for bit. Everything in the
 * buffers that is not an operand element is NaN, up to a tail past their
 * ends, so a load outside the operands shows in the accumulators (stored
 * or not), and output cells that are not written must keep their
 * sentinel. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef long long sgk_off;
#define SGK_TC_MMA 0
#include "mma_hip.h"

#define LANES 64

/* v_mfma_f32_16x16x4f32 per the documented element-to-register mapping:
 * c (64 lanes x 4 registers) += A B, A and B one register of 64 lanes. */
static void mfma_16x16x4(const float a[LANES], const float b[LANES], float c[LANES][4])
{
    float d[LANES][4];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float s = c[16 * (i / 4) + j][i % 4];
            for (int k = 0; k < 4; k++)
                s += a[16 * k + i] * b[16 * k + j];
            d[16 * (i / 4) + j][i % 4] = s;
        }
    memcpy(c, d, sizeof d);
}

/* The header's register-to-element direction is the inverse of the
 * documented element-to-register one, for all three operands. */
static int check_layout(void)
{
    int bad = 0;
    for (int l = 0; l < LANES; l++) {
        bad += 16 * SGK_MFMA_A_K(l) + SGK_MFMA_A_ROW(l) != l;
        bad += 16 * SGK_MFMA_B_K(l) + SGK_MFMA_B_COL(l) != l;
        for (int r = 0; r < 4; r++) {
            const int i = SGK_MFMA_D_ROW(l, r), j = SGK_MFMA_D_COL(l);
            bad += i < 0 || i >= 16 || j < 0 || j >= 16 || i % 4 != r || 16 * (i / 4) + j != l;
        }
    }
    if (bad)
        fprintf(stderr, "mma_hip.h's lane layout is not the inverse of the documented one (%d mismatches)\n", bad);
    return bad;
}

typedef struct {
    int NB, M, NC, K, ACC, inplace;
    sgk_off ABS, ARS, ASK, BBS, LDB, CBS, CRS, CCS, RBS, RRS;
} shape;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float small_int(void) { return (float)((int)(rnd() % 15) - 7); }

/* Floats a buffer must hold to reach its last element. */
static size_t span(int nb, sgk_off bs, int n1, sgk_off s1, int n2, sgk_off s2)
{
    return (size_t)((nb - 1) * bs + (n1 - 1) * s1 + (n2 - 1) * s2 + 1);
}

/* NaN past the operand's end too (a stray load there shows in the
 * accumulators; under a sanitizer, one past the tail stops the test). */
enum { TAIL = 64 };
static float *nan_buffer(size_t n)
{
    float *p = malloc((n + TAIL) * sizeof *p);
    for (size_t i = 0; p && i < n + TAIL; i++)
        p[i] = NAN;
    return p;
}

/* sgk_tc_mm_nt's wavefront program over 64 emulated lanes, through the
 * header's index functions, without the FMA redo of non-finite outputs.
 * The operands are finite, and rows past M and columns past NC load
 * finite values or zeros, so every accumulator, stored or not, must come
 * out finite: a non-finite one loaded something outside the operands.
 * Returns how many did. */
static int emulated_mm(int NT, const shape *s, const float *A, const float *B, float *C, const float *R)
{
    const int tasks = sgk_tc_tasks(s->NB, s->M, s->NC, NT);
    int stray = 0;
    for (int task = 0; task < tasks; task++) {
        int b, i0, j0;
        sgk_tc_task(task, s->M, s->NC, NT, &b, &i0, &j0);
        const float *bb = B + (sgk_off)b * s->BBS;
        float acc[4][LANES][4], sum[4][LANES][4];
        memset(acc, 0, sizeof acc);
        memset(sum, 0, sizeof sum);
        for (int k0 = 0; k0 < s->K; k0 += 4) {
            if (k0 % SGK_TC_CHUNK == 0 && k0)
                for (int n = 0; n < NT; n++)
                    for (int l = 0; l < LANES; l++)
                        for (int r = 0; r < 4; r++) {
                            sum[n][l][r] += acc[n][l][r];
                            acc[n][l][r] = 0.0f;
                        }
            float a[LANES], bv[LANES];
            for (int l = 0; l < LANES; l++) {
                const float *arow = A + (sgk_off)b * s->ABS + (sgk_off)sgk_tc_arow(s->M, i0, l) * s->ARS;
                a[l] = sgk_tc_aload(arow, s->ASK, s->K, k0, l);
            }
            for (int n = 0; n < NT; n++) {
                for (int l = 0; l < LANES; l++)
                    bv[l] = sgk_tc_bload(bb, s->LDB, s->K, s->NC, k0, j0, n, l);
                mfma_16x16x4(a, bv, acc[n]);
            }
        }
        for (int n = 0; n < NT; n++)
            for (int l = 0; l < LANES; l++)
                for (int r = 0; r < 4; r++) {
                    const int i = sgk_tc_orow(i0, l, r), j = sgk_tc_ocol(j0, n, l);
                    stray += !isfinite(sum[n][l][r] + acc[n][l][r]);
                    if (i < s->M && j < s->NC)
                        sgk_tc_put(C, s->CBS, s->CRS, s->CCS, R, s->RBS, s->RRS, s->ACC, b, i, j,
                                   sum[n][l][r] + acc[n][l][r]);
                }
    }
    return stray;
}

static const float SENTINEL = -12345.0f;

/* One shape at one block width: 0 when the emulated product is the triple
 * loop's, exactly, and nothing else in C changed. */
static int run_case(const shape *s, int NT)
{
    const size_t na = span(s->NB, s->ABS, s->M, s->ARS, s->K, s->ASK);
    const size_t nb = span(s->NB, s->BBS, s->K, s->LDB, s->NC, 1);
    const size_t nc = span(s->NB, s->CBS, s->M, s->CRS, s->NC, s->CCS);
    const size_t nr = s->inplace ? nc : span(s->NB, s->RBS, s->M, s->RRS, s->NC, s->CCS);
    float *A = nan_buffer(na), *B = nan_buffer(nb), *C = malloc(nc * sizeof(float));
    float *Rs = s->inplace ? NULL : nan_buffer(nr), *want = malloc(nc * sizeof(float));
    char *cell = calloc(nc, 1);
    int bad = 0;
    if (!A || !B || !C || !want || !cell || (!s->inplace && !Rs)) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (int b = 0; b < s->NB; b++)
        for (int i = 0; i < s->M; i++)
            for (int k = 0; k < s->K; k++)
                A[b * s->ABS + i * s->ARS + k * s->ASK] = small_int();
    for (int b = 0; b < s->NB; b++)
        for (int k = 0; k < s->K; k++)
            for (int j = 0; j < s->NC; j++)
                B[b * s->BBS + k * s->LDB + j] = small_int();
    for (size_t q = 0; q < nc; q++)
        C[q] = SENTINEL;
    float *R = s->inplace ? C : Rs;
    for (int b = 0; b < s->NB; b++)
        for (int i = 0; i < s->M; i++)
            for (int j = 0; j < s->NC; j++) {
                const sgk_off o = b * s->CBS + i * s->CRS + j * s->CCS;
                if (s->ACC)
                    R[s->inplace ? o : b * s->RBS + i * s->RRS + j * s->CCS] = small_int();
                double v = 0.0;
                for (int k = 0; k < s->K; k++)
                    v += (double)A[b * s->ABS + i * s->ARS + k * s->ASK] * B[b * s->BBS + k * s->LDB + j];
                if (s->ACC)
                    v += R[s->inplace ? o : b * s->RBS + i * s->RRS + j * s->CCS];
                want[o] = (float)v;
                cell[o] = 1;
            }
    const int stray = emulated_mm(NT, s, A, B, C, R);
    if (stray) {
        fprintf(stderr, "NT %d NB %d M %d NC %d K %d: %d accumulators loaded from outside the operands\n", NT, s->NB,
                s->M, s->NC, s->K, stray);
        bad++;
    }
    for (size_t q = 0; q < nc && bad < 5; q++) {
        const float expect = cell[q] ? want[q] : SENTINEL;
        if (!(C[q] == expect)) {
            fprintf(stderr,
                    "NT %d NB %d M %d NC %d K %d ACC %d in place %d A (%lld,%lld,%lld) LDB %lld C (%lld,%lld,%lld):"
                    " C[%zu] = %g, want %g%s\n",
                    NT, s->NB, s->M, s->NC, s->K, s->ACC, s->inplace, (long long)s->ABS, (long long)s->ARS,
                    (long long)s->ASK, (long long)s->LDB, (long long)s->CBS, (long long)s->CRS,
                    (long long)s->CCS, q, C[q], expect, cell[q] ? "" : " (not an output: must stay untouched)");
            bad++;
        }
    }
    free(A), free(B), free(C), free(Rs), free(want), free(cell);
    return bad;
}

static void make_shape(shape *s, int NB, int M, int NC, int K, int ACC, int inplace, int variant)
{
    memset(s, 0, sizeof *s);
    s->NB = NB, s->M = M, s->NC = NC, s->K = K, s->ACC = ACC, s->inplace = ACC && inplace;
    const int pa = variant & 1 ? 3 : 0, pc = variant & 2 ? 5 : 0;
    if (variant & 4) { /* A transposed: k-major, rows contiguous */
        s->ARS = 1, s->ASK = M + pa;
        s->ABS = (sgk_off)K * s->ASK + pa;
    } else {
        s->ARS = K + pa, s->ASK = 1;
        s->ABS = (sgk_off)M * s->ARS + 2;
    }
    s->LDB = NC + (variant & 1 ? 7 : 0);
    s->BBS = (sgk_off)K * s->LDB + (variant & 2 ? 1 : 0);
    if (variant & 8) { /* C transposed, as the MLP's per-head bias */
        s->CRS = 1, s->CCS = M + pc;
        s->CBS = (sgk_off)NC * s->CCS + pc;
    } else {
        s->CRS = NC + pc, s->CCS = 1;
        s->CBS = (sgk_off)M * s->CRS + pc;
    }
    if (s->inplace) {
        s->RBS = s->CBS, s->RRS = s->CRS;
    } else {
        /* R's columns are CCS apart as C's: its rows may spread where C's
         * rows are its columns' elements */
        s->RRS = s->CRS + (variant & 1 && s->CCS == 1 ? 2 : 0);
        s->RBS = (sgk_off)M * s->RRS + (sgk_off)NC * s->CCS + 3;
    }
}

int main(void)
{
    static const int Ms[] = {1, 5, 16, 17, 33};
    static const int NCs[] = {1, 7, 16, 17, 32, 40, 64, 70};
    static const int Ks[] = {1, 3, 4, 5, 131, 261};
    int bad = check_layout(), cases = 0, failed = 0;
    for (size_t m = 0; m < sizeof Ms / sizeof *Ms; m++)
        for (size_t c = 0; c < sizeof NCs / sizeof *NCs; c++)
            for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++) {
                shape s;
                const int variant = (int)(rnd() % 16), acc = (int)(rnd() % 3);
                const int NB = 1 + (int)(rnd() % 3);
                make_shape(&s, NB, Ms[m], NCs[c], Ks[k], acc != 0, acc == 2, variant);
                /* the width sgk_tc_mm picks, then the other two */
                const int pick = sgk_tc_width(s.NC);
                const int widths[3] = {pick, pick == 1 ? 2 : 1, pick == 4 ? 2 : 4};
                for (int w = 0; w < 3; w++) {
                    const int e = run_case(&s, widths[w]);
                    cases++;
                    failed += e != 0;
                    bad += e;
                }
            }
    if (bad) {
        fprintf(stderr, "test_mfma_map: %d of %d cases failed\n", failed, cases);
        return 1;
    }
    printf("test_mfma_map: %d cases (every block width, odd shapes, strides, residuals) match the triple loop "
           "exactly through mma_hip.h's lane mapping of v_mfma_f32_16x16x4f32 as documented\n",
           cases);
    return 0;
}
