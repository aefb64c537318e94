/* The CUDA target's tile product on tensor cores (sgkgen.py pastes this
 * into relation_cuda.cu; relation.sgk's `mm` calls it where SGK_TC_MMA).
 *
 * sgk_tc_mm computes what relation.sgk's tile_mm does, C = A B or
 * C = R + A B for NB independent products read and written through the
 * same strides, with 3xTF32 m16n8k8 MMAs accumulating in float: each
 * operand x is split into big = x rounded to TF32 and small = x - big
 * (exact), and a product is big*big + big*small + small*big, which keeps
 * about 21 bits of each product (the dropped small*small is below 2^-22 of
 * it), enough for SPEC section 6's fp32 contract; single-pass TF32 is not.
 *
 * One warp computes a 16 x (8 NT) block of one product at a time, the
 * group's warps taking blocks in turn, so every work-item of the group must
 * call it (as every @for_local) and the group size must be a multiple of 32
 * (the caller checks). Lane (g, t) = (lane / 4, lane % 4) loads its own
 * fragment elements through the strides, from global or shared memory
 * alike; rows past M repeat row M - 1 (read, not written), and k past K
 * and columns past NC read as zero, so nothing past the operands is read.
 *
 * NaN and Inf: an output that comes out NaN or +-Inf is computed again on
 * FMA, summed over k as tile_mm sums it, so that it is what the other
 * targets give. The split cannot carry them itself: an Inf in big meets
 * the other operand's small part (inf * 0, or inf * -w where w's small part
 * has the other sign, is NaN where the product is +-inf). What it must do
 * is keep them non-finite, so that every output they reach is redone: a
 * NaN or Inf goes whole into small, since rounding the GPU's NaN,
 * 0x7fffffff, carries into the sign and leaves big = small = -0, and the
 * NaN vanished from the product (its rows came out finite). A finite
 * operand that rounds to Inf (|x| >= 0x7f7ff000) gives a non-finite output
 * too, redone alike. The finite path pays a check of the block's outputs
 * before it stores them. Zero weights that must be skipped against a
 * non-finite operand (ZSKIP: 0 * inf is NaN on FMA too) take the FMA tile.
 *
 * small is rounded to TF32 here (the tensor core would truncate it, which
 * doubles its error), and the MMA accumulator, whose additions do not round
 * to nearest, is added into a float sum every SGK_TC_CHUNK of k, so that no
 * chain of them is long. What remains, about 2^-22 of each product against
 * fp32's exact products, is still larger than a sum over thousands of rows
 * with cancellation can take (weight gradients over B N rows): the caller
 * runs products with K above SGK_TC_MAX_K on the FMA tile. */
#define SGK_TC_LANES 32
#define SGK_TC_CHUNK 128
#define SGK_TC_MAX_K 2048
#if SGK_TC_MMA
/* big = x rounded to TF32, small = x - big rounded to TF32; a NaN or an
 * Inf whole in small (big may have lost a NaN to the rounding's carry). */
__device__ __forceinline__ void sgk_tc_split(float x, unsigned &big, unsigned &small)
{
    const unsigned u = __float_as_uint(x);
    big = (u + 0x1000u) & 0xffffe000u;
    small = (__float_as_uint(x - __uint_as_float(big)) + 0x1000u) & 0xffffe000u;
    if ((u & 0x7f800000u) == 0x7f800000u)
        small = u;
}

__device__ __forceinline__ void sgk_tc_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int NT>
__device__ __forceinline__ void sgk_tc_mm_nt(int NB, int M, int NC, int K, const float *A, sgk_off ABS,
                                             sgk_off ARS, sgk_off ASK, const float *B, sgk_off BBS,
                                             sgk_off LDB, float *C, sgk_off CBS, sgk_off CRS, sgk_off CCS,
                                             const float *R, sgk_off RBS, sgk_off RRS, int ACC)
{
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5, warps = (int)blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int mt = (M + 15) / 16, nt = (NC + 8 * NT - 1) / (8 * NT);
    for (int task = warp; task < NB * mt * nt; task += warps) {
        const int b = task / (mt * nt), i0 = task % (mt * nt) / nt * 16, j0 = task % nt * (8 * NT);
        const float *a0 = A + (sgk_off)b * ABS + (sgk_off)min(i0 + g, M - 1) * ARS;
        const float *a1 = A + (sgk_off)b * ABS + (sgk_off)min(i0 + g + 8, M - 1) * ARS;
        const float *bb = B + (sgk_off)b * BBS;
        // output (i, j) = v, plus the residual where ACC
        auto put = [&](int i, int j, float v) {
            const sgk_off o = (sgk_off)b * CBS + (sgk_off)i * CRS + (sgk_off)j * CCS;
            C[o] = ACC ? R[(sgk_off)b * RBS + (sgk_off)i * RRS + (sgk_off)j * CCS] + v : v;
        };
        float acc[NT][4], sum[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[n][e] = sum[n][e] = 0.0f;
        for (int k0 = 0; k0 < K; k0 += 8) {
            if (k0 % SGK_TC_CHUNK == 0 && k0) {
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        sum[n][e] += acc[n][e];
                        acc[n][e] = 0.0f;
                    }
            }
            const int ka = k0 + t, kb = k0 + t + 4;
            unsigned ah[4], al[4];
            sgk_tc_split(ka < K ? a0[(sgk_off)ka * ASK] : 0.0f, ah[0], al[0]);
            sgk_tc_split(ka < K ? a1[(sgk_off)ka * ASK] : 0.0f, ah[1], al[1]);
            sgk_tc_split(kb < K ? a0[(sgk_off)kb * ASK] : 0.0f, ah[2], al[2]);
            sgk_tc_split(kb < K ? a1[(sgk_off)kb * ASK] : 0.0f, ah[3], al[3]);
#pragma unroll
            for (int n = 0; n < NT; n++) {
                const int j = j0 + n * 8 + g;
                unsigned bh0, bl0, bh1, bl1;
                sgk_tc_split(ka < K && j < NC ? bb[(sgk_off)ka * LDB + j] : 0.0f, bh0, bl0);
                sgk_tc_split(kb < K && j < NC ? bb[(sgk_off)kb * LDB + j] : 0.0f, bh1, bl1);
                sgk_tc_mma(acc[n], al, bh0, bh1);
                sgk_tc_mma(acc[n], ah, bl0, bl1);
                sgk_tc_mma(acc[n], ah, bh0, bh1);
            }
        }
        // v * 0 is 0 where v is finite, NaN where it is NaN or +-Inf
        float chk = 0.0f;
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                chk = fmaf(sum[n][e] + acc[n][e], 0.0f, chk);
        if (chk == 0.0f) {
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = i0 + g + (e >> 1) * 8, j = j0 + n * 8 + 2 * t + (e & 1);
                    if (i < M && j < NC)
                        put(i, j, sum[n][e] + acc[n][e]);
                }
        } else {
            unsigned redo = 0u;
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = i0 + g + (e >> 1) * 8, j = j0 + n * 8 + 2 * t + (e & 1);
                    if (i < M && j < NC) {
                        const float v = sum[n][e] + acc[n][e];
                        if (fabsf(v) < CUDART_INF_F)
                            put(i, j, v);
                        else
                            redo |= 1u << (n * 4 + e);
                    }
                }
            // outputs that came out NaN or +-Inf: again on FMA, summed over k
            // as tile_mm sums them (R not yet written where it is C)
#pragma unroll 1
            for (int q = 0; redo != 0u; q++, redo >>= 1)
                if (redo & 1u) {
                    const int i = i0 + g + (q & 3) / 2 * 8, j = j0 + q / 4 * 8 + 2 * t + (q & 1);
                    const float *ai = A + (sgk_off)b * ABS + (sgk_off)i * ARS;
                    float v = 0.0f;
                    for (int k = 0; k < K; k++)
                        v = fmaf(ai[(sgk_off)k * ASK], bb[(sgk_off)k * LDB + j], v);
                    put(i, j, v);
                }
        }
    }
}

/* The block width that covers NC with the least to spare: 8, 16 or 32
 * columns. */
__device__ __forceinline__ void sgk_tc_mm(int NB, int M, int NC, int K, const float *A, sgk_off ABS,
                                          sgk_off ARS, sgk_off ASK, const float *B, sgk_off BBS,
                                          sgk_off LDB, float *C, sgk_off CBS, sgk_off CRS, sgk_off CCS,
                                          const float *R, sgk_off RBS, sgk_off RRS, int ACC)
{
    if (NC <= 8)
        sgk_tc_mm_nt<1>(NB, M, NC, K, A, ABS, ARS, ASK, B, BBS, LDB, C, CBS, CRS, CCS, R, RBS, RRS, ACC);
    else if (NC <= 16)
        sgk_tc_mm_nt<2>(NB, M, NC, K, A, ABS, ARS, ASK, B, BBS, LDB, C, CBS, CRS, CCS, R, RBS, RRS, ACC);
    else
        sgk_tc_mm_nt<4>(NB, M, NC, K, A, ABS, ARS, ASK, B, BBS, LDB, C, CBS, CRS, CCS, R, RBS, RRS, ACC);
}
#endif
