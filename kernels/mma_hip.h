/* The HIP target's tile product on AMD CDNA matrix cores (sgkgen.py pastes
 * this into relation_hip.hip; relation.sgk's `mm` calls it where
 * SGK_TC_MMA, which the HIP prelude sets for gfx908, gfx90a and gfx94x
 * device code only: RDNA has no MFMA).
 *
 * sgk_tc_mm computes what relation.sgk's tile_mm does, C = A B or
 * C = R + A B for NB independent products read and written through the
 * same strides, as mma_cuda.h's does, with v_mfma_f32_16x16x4f32: fp32
 * operands, fp32 accumulation. No operand is rounded (CUDA's tensor cores
 * take TF32, this instruction full fp32), so no big/small split is needed,
 * and one MFMA does the work of 16 x 16 x 4 FMAs.
 *
 * One wavefront (64 lanes) computes a 16 x (16 NT) block of one product at
 * a time, the group's wavefronts taking blocks in turn, so every work-item
 * of the group must call it (as every @for_local) and the group size must
 * be a multiple of SGK_TC_LANES (the caller checks): an MFMA reads all 64
 * lanes. Each lane loads its own operand elements through the strides,
 * from global or shared memory alike; rows past M repeat row M - 1 (read,
 * not written), and k past K and columns past NC read as zero, so nothing
 * past the operands is read.
 *
 * The lane layout is AMD's for this instruction (its matrix instruction
 * calculator, github.com/ROCm/amd_matrix_instruction_calculator, CDNA1 to
 * CDNA3, no CBSZ/ABID/BLGP modifiers; the AMD lab notes' matrix-cores
 * example for this instruction agrees): lane l holds
 * A[l % 16][l / 16] and B[l / 16][l % 16] of the 16 x 4 and 4 x 16
 * operands, and its accumulator register r is D[4 (l / 16) + r][l % 16].
 * The index math below is plain C (SGK_TC_FN), so that
 * tests/test_mfma_map.c runs it on the host against an emulation of the
 * instruction as documented.
 *
 * NaN and Inf: those documents say nothing of MFMA's special values, so an
 * output that comes out NaN or +-Inf is computed again on FMA, summed over
 * k as tile_mm sums it, as mma_cuda.h does: what the other targets give,
 * whatever the matrix core did with it. Exact fp32 products should keep
 * them as FMA would (inf * 0 is NaN, a NaN reaches every output of its
 * row or column), which is what makes the redo catch them. Zero weights
 * that must be skipped against a non-finite operand (ZSKIP: 0 * inf is
 * NaN on FMA too) take the FMA tile.
 *
 * Sums: how the matrix core adds its four products and the accumulator
 * they do not say either, so the accumulator is folded into a float sum
 * every SGK_TC_CHUNK of k and products longer than SGK_TC_MAX_K take the
 * FMA tile, as on CUDA, until a run on the hardware says they need not. */
#define SGK_TC_LANES 64
#define SGK_TC_CHUNK 128
#define SGK_TC_MAX_K 2048

#if defined(__HIP__)
#define SGK_TC_FN __device__ __forceinline__
#else
#define SGK_TC_FN static inline
#endif

/* v_mfma_f32_16x16x4f32's operands, lane l of 64 (register to element):
 * the A element (row, k) of the 16 x 4 slice, the B element (k, column) of
 * the 4 x 16 slice, and the output (row, column) of accumulator r. */
#define SGK_MFMA_A_ROW(l) ((l) % 16)
#define SGK_MFMA_A_K(l) ((l) / 16)
#define SGK_MFMA_B_K(l) ((l) / 16)
#define SGK_MFMA_B_COL(l) ((l) % 16)
#define SGK_MFMA_D_ROW(l, r) (4 * ((l) / 16) + (r))
#define SGK_MFMA_D_COL(l) ((l) % 16)

/* NT, the block width in MFMA columns (16): the width of 16, 32 or 64
 * columns that covers NC with the least to spare. */
SGK_TC_FN int sgk_tc_width(int NC) { return NC <= 16 ? 1 : NC <= 32 ? 2 : 4; }

/* Block task of a wavefront: batch entry b, first row i0, first column j0
 * of a 16 x (16 NT) block, blocks row-major within a product. */
SGK_TC_FN void sgk_tc_task(int task, int M, int NC, int NT, int *b, int *i0, int *j0)
{
    const int mt = (M + 15) / 16, nt = (NC + 16 * NT - 1) / (16 * NT);
    *b = task / (mt * nt);
    *i0 = task % (mt * nt) / nt * 16;
    *j0 = task % nt * (16 * NT);
}

SGK_TC_FN int sgk_tc_tasks(int NB, int M, int NC, int NT)
{
    return NB * ((M + 15) / 16) * ((NC + 16 * NT - 1) / (16 * NT));
}

/* The row of A lane l reads in the block at i0: past M, row M - 1. */
SGK_TC_FN int sgk_tc_arow(int M, int i0, int l)
{
    return i0 + SGK_MFMA_A_ROW(l) < M ? i0 + SGK_MFMA_A_ROW(l) : M - 1;
}

/* A(row, k0 + its k) as lane l loads it, zero past K. */
SGK_TC_FN float sgk_tc_aload(const float *arow, sgk_off ASK, int K, int k0, int l)
{
    const int k = k0 + SGK_MFMA_A_K(l);
    return k < K ? arow[(sgk_off)k * ASK] : 0.0f;
}

/* B(k0 + its k, j0 + 16 n + its column) as lane l loads it, zero past K or
 * NC. */
SGK_TC_FN float sgk_tc_bload(const float *bb, sgk_off LDB, int K, int NC, int k0, int j0, int n, int l)
{
    const int k = k0 + SGK_MFMA_B_K(l), j = j0 + 16 * n + SGK_MFMA_B_COL(l);
    return k < K && j < NC ? bb[(sgk_off)k * LDB + j] : 0.0f;
}

/* The output row and column of lane l's accumulator r of sub-block n. */
SGK_TC_FN int sgk_tc_orow(int i0, int l, int r) { return i0 + SGK_MFMA_D_ROW(l, r); }
SGK_TC_FN int sgk_tc_ocol(int j0, int n, int l) { return j0 + 16 * n + SGK_MFMA_D_COL(l); }

/* Output (i, j) of product b = v, plus the residual where ACC. */
SGK_TC_FN void sgk_tc_put(float *C, sgk_off CBS, sgk_off CRS, sgk_off CCS, const float *R, sgk_off RBS,
                          sgk_off RRS, int ACC, int b, int i, int j, float v)
{
    const sgk_off o = (sgk_off)b * CBS + (sgk_off)i * CRS + (sgk_off)j * CCS;
    C[o] = ACC ? R[(sgk_off)b * RBS + (sgk_off)i * RRS + (sgk_off)j * CCS] + v : v;
}

#if SGK_TC_MMA
typedef float sgk_tc_f4 __attribute__((ext_vector_type(4)));

template <int NT>
__device__ __forceinline__ void sgk_tc_mm_nt(int NB, int M, int NC, int K, const float *A, sgk_off ABS,
                                             sgk_off ARS, sgk_off ASK, const float *B, sgk_off BBS,
                                             sgk_off LDB, float *C, sgk_off CBS, sgk_off CRS, sgk_off CCS,
                                             const float *R, sgk_off RBS, sgk_off RRS, int ACC)
{
    const int l = (int)threadIdx.x % SGK_TC_LANES, wave = (int)threadIdx.x / SGK_TC_LANES;
    const int waves = (int)blockDim.x / SGK_TC_LANES;
    const int tasks = sgk_tc_tasks(NB, M, NC, NT);
    for (int task = wave; task < tasks; task += waves) {
        int b, i0, j0;
        sgk_tc_task(task, M, NC, NT, &b, &i0, &j0);
        const float *arow = A + (sgk_off)b * ABS + (sgk_off)sgk_tc_arow(M, i0, l) * ARS;
        const float *bb = B + (sgk_off)b * BBS;
        const sgk_tc_f4 zero = {0.0f, 0.0f, 0.0f, 0.0f};
        sgk_tc_f4 acc[NT], sum[NT];
#pragma unroll
        for (int n = 0; n < NT; n++)
            acc[n] = sum[n] = zero;
        for (int k0 = 0; k0 < K; k0 += 4) {
            if (k0 % SGK_TC_CHUNK == 0 && k0) {
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    sum[n] += acc[n];
                    acc[n] = zero;
                }
            }
            const float a = sgk_tc_aload(arow, ASK, K, k0, l);
#pragma unroll
            for (int n = 0; n < NT; n++)
                acc[n] = __builtin_amdgcn_mfma_f32_16x16x4f32(a, sgk_tc_bload(bb, LDB, K, NC, k0, j0, n, l), acc[n],
                                                              0, 0, 0);
        }
        unsigned redo = 0u;
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int i = sgk_tc_orow(i0, l, r), j = sgk_tc_ocol(j0, n, l);
                const float v = sum[n][r] + acc[n][r];
                if (i < M && j < NC) {
                    if (fabsf(v) < __builtin_huge_valf())
                        sgk_tc_put(C, CBS, CRS, CCS, R, RBS, RRS, ACC, b, i, j, v);
                    else
                        redo |= 1u << (n * 4 + r);
                }
            }
        // outputs that came out NaN or +-Inf: again on FMA, summed over k as
        // tile_mm sums them (R not yet written where it is C)
#pragma unroll 1
        for (int q = 0; redo != 0u; q++, redo >>= 1)
            if (redo & 1u) {
                const int i = sgk_tc_orow(i0, l, q % 4), j = sgk_tc_ocol(j0, q / 4, l);
                const float *ai = A + (sgk_off)b * ABS + (sgk_off)i * ARS;
                float v = 0.0f;
                for (int k = 0; k < K; k++)
                    v = fmaf(ai[(sgk_off)k * ASK], bb[(sgk_off)k * LDB + j], v);
                sgk_tc_put(C, CBS, CRS, CCS, R, RBS, RRS, ACC, b, i, j, v);
            }
    }
}

/* Runs the product with the block width sgk_tc_width picks. */
__device__ __forceinline__ void sgk_tc_mm(int NB, int M, int NC, int K, const float *A, sgk_off ABS,
                                          sgk_off ARS, sgk_off ASK, const float *B, sgk_off BBS,
                                          sgk_off LDB, float *C, sgk_off CBS, sgk_off CRS, sgk_off CCS,
                                          const float *R, sgk_off RBS, sgk_off RRS, int ACC)
{
    const int nt = sgk_tc_width(NC);
    if (nt == 1)
        sgk_tc_mm_nt<1>(NB, M, NC, K, A, ABS, ARS, ASK, B, BBS, LDB, C, CBS, CRS, CCS, R, RBS, RRS, ACC);
    else if (nt == 2)
        sgk_tc_mm_nt<2>(NB, M, NC, K, A, ABS, ARS, ASK, B, BBS, LDB, C, CBS, CRS, CCS, R, RBS, RRS, ACC);
    else
        sgk_tc_mm_nt<4>(NB, M, NC, K, A, ABS, ARS, ASK, B, BBS, LDB, C, CBS, CRS, CCS, R, RBS, RRS, ACC);
}
#endif
