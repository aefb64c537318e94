/* attn_rel16.cuh's instances: one per padded head dim (16, 32, 64, 128),
 * padded P (16, 32, 64), heads in tiles of 8 (one or two) and type; eight
 * warps a block, a warp's heads (one or two) holding O in HPW HDP / 2
 * registers a lane, at most 64. */
#include "rel16.h"

namespace {

template <int HDP, int HT>
struct r16_shape {
    static constexpr int WH = 8;
    static constexpr int HPW = HT;
    static_assert(HPW * HDP <= 128, "O in at most 64 registers a lane");
};

template <int HDP, int PCAP, int HT, bool BF>
constexpr sgkc_rel16_fn r16_fn()
{
    return sgkc_attn_rel16_kernel<HDP, r16_shape<HDP, HT>::WH, r16_shape<HDP, HT>::HPW, PCAP, HT, BF>;
}

/* [hdp 16, 32, 64, 128][pcap 16, 32, 64][ht 1, 2][bf16, f16]; none at
 * head dim 128 with more than 8 heads, whose sixteen warps a block leave
 * a lane 128 registers, where the kernel spills */
#define R16_T(HDP, PCAP, HT) r16_fn<HDP, PCAP, HT, true>(), r16_fn<HDP, PCAP, HT, false>()
#define R16_P(HDP, PCAP) R16_T(HDP, PCAP, 1), R16_T(HDP, PCAP, 2)
#define R16_P1(HDP, PCAP) R16_T(HDP, PCAP, 1), nullptr, nullptr
#define R16_H(HDP) R16_P(HDP, 16), R16_P(HDP, 32), R16_P(HDP, 64)
const sgkc_rel16_fn r16_fns[] = {R16_H(16), R16_H(32), R16_H(64), R16_P1(128, 16), R16_P1(128, 32), R16_P1(128, 64)};
#undef R16_H
#undef R16_P1
#undef R16_P
#undef R16_T

} // namespace

sgkc_rel16_inst sgkc_rel16_of(const sgkc_layer *L)
{
    sgkc_rel16_inst r{};
    if (L->dtype == SGK_DTYPE_F32 || L->cc_major < 8 || L->hd > 128 || L->H > 16 || L->P > 64 ||
        (L->hd > 64 && L->H > 8))
        return r;
    const int hdi = L->hd <= 16 ? 0 : L->hd <= 32 ? 1 : L->hd <= 64 ? 2 : 3;
    const int pci = L->P <= 16 ? 0 : L->P <= 32 ? 1 : 2;
    const int ht = L->H <= 8 ? 1 : 2;
    const bool bf = L->dtype == SGK_DTYPE_BF16;
    r.hdp = 16 << hdi;
    r.warps = 8;
    r.smem = sgkc_ar16_smem(16 << pci, ht, L->H, r.hdp);
    if (r.smem > L->smem_optin)
        return r;
    r.fn = r16_fns[((hdi * 3 + pci) * 2 + (ht - 1)) * 2 + (bf ? 0 : 1)];
    r.pack = bf ? sgkc_ar16_pack_kernel<true> : sgkc_ar16_pack_kernel<false>;
    return r;
}

cudaError_t sgkc_rel16_prepare(int limit)
{
    for (sgkc_rel16_fn fn : r16_fns) {
        if (!fn)
            continue;
        const cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

int sgkc_rel16_ks(const sgkc_layer *L, int64_t B, int64_t N, int per_sm)
{
    const int64_t blocks = B * ((N + 15) / 16), slots = (int64_t)L->sm_count * (per_sm > 0 ? per_sm : 1);
    const int ktiles = (int)((N + 15) / 16);
    if (L->cc_major < 9 || blocks >= slots)
        return 1;
    int ks = (int)((slots + blocks - 1) / blocks);
    ks = ks < 8 ? ks : 8;
    ks = ks < ktiles ? ks : ktiles;
    const int per = (ktiles + ks - 1) / ks;
    return (ktiles + per - 1) / per;
}
