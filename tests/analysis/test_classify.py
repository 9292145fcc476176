"""Tests for tracekit.analysis.classify.

The fixture table holds real kernel names (most copied verbatim from shared/traces/real/, the rest from
docs/kernel-names.md) with the trap each one sets; every DEVICE_RULES entry must be hit by a case.
A walk over every real trace then classifies every distinct device-event name found there.
"""

from __future__ import annotations

import dataclasses
import gc
import re

import pytest

from support.paths import REAL, real_trace_files, requires_real
from support.traces import read_events
from tracekit.analysis.classify import CATEGORIES, DEVICE_RULES, HOST_RULES, Classifier, Rule
from tracekit.analysis.classify import ChildRule
from tracekit.vocab import Category




# (name, kind, innermost launcher op, expected category, expected rule name or None for the fallback)
CASES = [
    pytest.param('Memset (Device)',
                 'memset', 'aten::addmm', 'memory', 'gemm-workspace-memset',
                 id='memset-under-addmm-is-cublas-workspace'),
    pytest.param('Memset (Device)',
                 'memset', 'aten::mm', 'memory', 'gemm-workspace-memset',
                 id='memset-under-mm'),
    pytest.param('Memset (Device)',
                 'memset', 'aten::zero_', 'memory', 'memcpy-memset',
                 id='memset-under-zero_'),
    pytest.param('Memset (Device)',
                 'memset', None, 'memory', 'memcpy-memset',
                 id='memset-unlinked-is-memory'),
    pytest.param('Memcpy DtoD (Device -> Device)',
                 'memcpy', 'aten::copy_', 'memory', 'memcpy-memset',
                 id='memcpy-dtod-under-copy_'),
    pytest.param('Memcpy DtoH (Device -> Pinned)',
                 'memcpy', 'aten::_local_scalar_dense', 'memory', 'memcpy-memset',
                 id='memcpy-dtoh-item'),
    pytest.param('Memset (Device)',
                 'memset', 'aten::cudnn_convolution_backward_weight', 'memory', 'memcpy-memset',
                 id='memset-under-cudnn-conv-wgrad'),
    pytest.param(('void cublasLt::splitKreduce_kernel<32, 16, int, __nv_bfloat16, __nv_bfloat16, float, __nv_bfloat'
                  '16, true, true, false>(cublasLt::cublasSplitKParams<float>, __nv_bfloat16 const*, __nv_bfloat16 '
                  'const*, __nv_bfloat16*, float const*, float const*, __nv_bfloat16 const*, __nv_bfloat16 const*, '
                  '__nv_bfloat16*, void*, long, float*, int*)'),
                 'kernel', 'aten::addmm', 'matmul', 'gemm-launcher',
                 id='splitKreduce-under-addmm-contains-reduce'),
    pytest.param(('void splitKreduce_kernel<float, float, float, float, true, false, false>(cublasSplitKParams<floa'
                  't>, float const*, float const*, float*, float const*, float const*, float const*, float const*, '
                  'float*, void*, long, float*, int*)'),
                 'kernel', None, 'matmul', 'gemm-kernel',
                 id='splitKreduce-unlinked-contains-reduce'),
    pytest.param(('void reduce_1Block_kernel<float, 128, 7, cublasGemvTensorStridedBatched<float>, cublasGemvTensor'
                  'StridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16> >(float const'
                  '*, float, cublasGemvTensorStridedBatched<float>, int, float const*, float, cublasGemvTensorStrid'
                  'edBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16>, cublasPointerMode'
                  '_t, cublasLtEpilogue_t, cublasGemvTensorStridedBatched<biasType<cublasGemvTensorStridedBatched<_'
                  '_nv_bfloat16>::value_type, float>::type const>)'),
                 'kernel', 'aten::mm', 'matmul', 'gemm-launcher',
                 id='reduce_1Block-under-mm'),
    pytest.param(('void reduce_1Block_kernel<float, 128, 7, cublasGemvTensorStridedBatched<float>, cublasGemvTensor'
                  'StridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16> >(float const'
                  '*, float, cublasGemvTensorStridedBatched<float>, int, float const*, float, cublasGemvTensorStrid'
                  'edBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16>, cublasPointerMode'
                  '_t, cublasLtEpilogue_t, cublasGemvTensorStridedBatched<biasType<cublasGemvTensorStridedBatched<_'
                  '_nv_bfloat16>::value_type, float>::type const>)'),
                 'kernel', None, 'matmul', 'gemm-kernel',
                 id='reduce_1Block-unlinked-is-cublas'),
    pytest.param(('void dot_kernel<float, 128, 0, cublasDotParams<cublasGemvTensorStridedBatched<__nv_bfloat16 cons'
                  't>, cublasGemvTensorStridedBatched<float> > >(cublasDotParams<cublasGemvTensorStridedBatched<__n'
                  'v_bfloat16 const>, cublasGemvTensorStridedBatched<float> >)'),
                 'kernel', 'aten::mm', 'matmul', 'gemm-launcher',
                 id='dot_kernel-under-mm'),
    pytest.param(('void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direc'
                  't_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::op'
                  'erator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_ke'
                  'rnel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()('
                  ') const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_no'
                  'cast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() co'
                  'nst::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::'
                  'native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lam'
                  'bda()#12}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1})'),
                 'kernel', 'aten::copy_', 'memory', 'copy-kernel',
                 id='direct-copy-under-copy_-inside-matmul'),
    pytest.param(('void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direc'
                  't_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::op'
                  'erator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_ke'
                  'rnel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()('
                  ') const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_no'
                  'cast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() co'
                  'nst::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::'
                  'native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lam'
                  'bda()#12}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1})'),
                 'kernel', 'aten::addmm', 'memory', 'copy-kernel',
                 id='direct-copy-launched-by-addmm-bias-copy'),
    pytest.param(('void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda(at::Tens'
                  'orIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::bfloat16_copy_ker'
                  'nel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul>)'),
                 'kernel', 'aten::copy_', 'memory', 'copy-kernel',
                 id='bf16-cast-copy'),
    pytest.param(('void at::native::(anonymous namespace)::CatArrayBatchedCopy_contig<at::native::(anonymous namesp'
                  'ace)::OpaqueType<2u>, unsigned int, 3, 128, 1>(at::native::(anonymous namespace)::OpaqueType<2u>'
                  '*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace'
                  ')::OpaqueType<2u>, unsigned int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<un'
                  'signed int, 4u>, int, unsigned int)'),
                 'kernel', 'aten::cat', 'memory', 'cat-kernel',
                 id='cat-kv-concat'),
    pytest.param(('void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::BFloat16>, std::a'
                  'rray<char*, 1ul> >(int, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>)'),
                 'kernel', 'aten::fill_', 'memory', 'fill-kernel',
                 id='fill-says-elementwise'),
    pytest.param(('void at::native::index_elementwise_kernel<128, 4, at::native::index_copy_kernel_impl<at::native:'
                  ':OpaqueType<4> >(at::TensorIterator&, long, long, long)::{lambda(int)#1}>(int, at::native::index'
                  '_copy_kernel_impl<at::native::OpaqueType<4> >(at::TensorIterator&, long, long, long)::{lambda(in'
                  't)#1})'),
                 'kernel', None, 'memory', 'index-gather-scatter',
                 id='index-copy'),
    pytest.param('batched_transpose_32x32_half',
                 'kernel', 'aten::miopen_convolution', 'memory', 'layout-transform',
                 id='miopen-batched-transpose-in-conv'),
    pytest.param(('void nchwToNhwcKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>(int, int, int,'
                  ' int, float const*, float*, float, float)'),
                 'kernel', 'aten::cudnn_convolution', 'memory', 'layout-transform',
                 id='cudnn-nchw-to-nhwc-in-conv'),
    pytest.param('__amd_rocclr_fillBufferAligned',
                 'kernel', 'Torch-Compiled Region: 0/0', 'memory', 'rocclr-blit',
                 id='rocclr-fill-as-kernel'),
    pytest.param('__amd_rocclr_copyBuffer',
                 'kernel', None, 'memory', 'rocclr-blit',
                 id='rocclr-copy-buffer'),
    pytest.param('MEMORY_COPY_DEVICE_TO_DEVICE',
                 'kernel', None, 'memory', 'rocclr-blit',
                 id='rocm71-memory-copy-kernel'),
    pytest.param(('sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k'
                  '_off_kernel__5x_cublas'),
                 'kernel', None, 'matmul', 'gemm-kernel',
                 id='sm90-xmma'),
    pytest.param('nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT',
                 'kernel', None, 'matmul', 'gemm-kernel',
                 id='nvjet-b200'),
    pytest.param(('void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_nn_align1>(cutlass_75_tens'
                  'orop_bf16_s1688gemm_bf16_128x128_nn_align1::Params)'),
                 'kernel', 'aten::bmm', 'matmul', 'gemm-launcher',
                 id='eager-bmm-cutlass-kernel2'),
    pytest.param(('void cutlass::Kernel2<cutlass_75_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_nn_align1>(cutla'
                  'ss_75_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_nn_align1::Params)'),
                 'kernel', None, 'matmul', 'gemm-kernel',
                 id='eager-bmm-wmma-unlinked'),
    pytest.param(('void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(cutlass_80_tensorop_s16'
                  '88gemm_64x64_16x6_nn_align4::Params)'),
                 'kernel', None, 'matmul', 'gemm-kernel',
                 id='cutlass-kernel-tf32'),
    pytest.param(('void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>'
                  ', cutlass::gemm::collective::CollectiveMma<...> > >(...::Params)'),
                 'kernel', None, 'matmul', 'gemm-kernel',
                 id='cutlass3-device-kernel-gemm'),
    pytest.param('volta_sgemm_128x32_nt',
                 'kernel', None, 'matmul', 'gemm-kernel',
                 id='volta-sgemm'),
    pytest.param('ampere_sgemm_128x64_nn',
                 'kernel', None, 'matmul', 'gemm-kernel',
                 id='ampere-sgemm'),
    pytest.param(('Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT128x160x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_A'
                  'SEM1_CLR1_CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA942_IU1_K1_LBSPPA512_L'
                  'BSPPB128_LBSPPM0_LPA16_LPB16_LPM0_LRVW8_LWPMn1_MIAV0_MIWT4_5_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_'
                  'NEPBS16_NLCA1_NLCB1_ONLL1_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW4_SK0_SKXCCM0_TLDS1_ULSGRO0'
                  '_USL1_UIOFGRO0_USFGROn1_VSn1_VWA4_VWB1_WSGRA0_WSGRB0_WS64_WG32_8_1'),
                 'kernel', None, 'matmul', 'gemm-kernel',
                 id='hipblaslt-cijk'),
    pytest.param(('void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4,'
                  ' 4, false, false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, c'
                  'ublasGemvTensorStridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16'
                  '>, float> >(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, cublasG'
                  'emvTensorStridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16>, flo'
                  'at>, float, float)'),
                 'kernel', None, 'matmul', 'gemm-kernel',
                 id='gemv-skinny'),
    pytest.param(('std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, __nv_bfloat16, __nv_bfloa'
                  't16, __nv_bfloat16, float, false, true, true, false, 7, false, cublasGemvParamsEx<int, cublasGem'
                  'vTensorStridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16 const>,'
                  ' cublasGemvTensorStridedBatched<__nv_bfloat16>, float> >(cublasGemvParamsEx<int, cublasGemvTenso'
                  'rStridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, cubla'
                  'sGemvTensorStridedBatched<__nv_bfloat16>, float>)'),
                 'kernel', 'aten::addmm', 'matmul', 'gemm-launcher',
                 id='gemvx-skinny'),
    pytest.param(('bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_tran'
                  'sOut_schedP2x1x2x3_biasM_bN_tmaOpt_clmp_dynBatch_sm100f'),
                 'kernel', 'vllm::moe_forward', 'matmul', 'gemm-kernel',
                 id='trtllm-fp4-bmm'),
    pytest.param('kernel_gemm_xdl_cshuffle_v3',
                 'kernel', None, 'matmul', 'gemm-kernel',
                 id='ck-gemm-xdl'),
    pytest.param('void wvSplitK_hf_sml_<__hip_bfloat16, 64, 2, 16, 8, 2, 1>(...)',
                 'kernel', None, 'matmul', 'gemm-kernel',
                 id='vllm-rocm-wvSplitK'),
    pytest.param(('void epilogue::impl::globalKernel<float, float, float, true, true>(int, int, long, float*, cubla'
                  'sLtEpilogue_t, int, float*, long, void*, long, long, long, float*, long, int*)'),
                 'kernel', None, 'matmul', 'gemm-kernel',
                 id='cublaslt-epilogue'),
    pytest.param('void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int const*, int*)',
                 'kernel', None, 'other', None,
                 id='fbgemm-is-not-gemm'),
    pytest.param(('void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc'
                  '_align8>(cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_align8::Params)'),
                 'kernel', 'aten::cudnn_convolution', 'other', 'conv-kernel',
                 id='conv-cutlass-fprop'),
    pytest.param(('_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22Impl'
                  'icitGemmMultistageE'),
                 'kernel', None, 'other', 'conv-kernel',
                 id='conv-implicit-gemm-mangled'),
    pytest.param(('sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage'
                  '4_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn'),
                 'kernel', None, 'other', 'conv-kernel',
                 id='conv-xmma-fprop-contains-gemm'),
    pytest.param(('igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2_ta1x8x2x1_1x4x1x64_tb1x8x2x'
                  '1_1x4x1x64'),
                 'kernel', 'aten::miopen_convolution', 'other', 'conv-kernel',
                 id='conv-miopen-igemm'),
    pytest.param(('_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv_fwd_xdl_cshuffle_v3INS_34Grid'
                  'wiseGemmMultiD_xdl_cshuffle_v3INS_13tensor_layout4gemm8RowMajorENS6_11ColumnMajorENS_5TupleIJEEE'
                  'S7_ttftSA_tNS0_12element_wise11PassThroughESC_SC_LNS1_18GemmSpecializationE7ELi256ELi128ELi128EL'
                  'i64ELi8ELi8ELi32ELi32ELi2ELi2ENS_8SequenceIJLi8ELi32ELi1EEEENSE_IJLi1ELi0ELi2EEEESG_Li2ELi8ELi8E'
                  'Lb0ELi0ESF_SG_SG_Li2ELi8ELi8ELb0ELi0ELi1ELi1ENSE_IJLi1ELi32ELi1ELi8EEEENSE_IJLi8EEEELNS_26BlockG'
                  'emmPipelineSchedulerE0ELNS_24BlockGemmPipelineVersionE2EttttLb0ELb0EEENS1_30ComputePtrOffsetOfSt'
                  'ridedBatchILi1ELi1ELi0EvEENS_16TensorDescriptorINS9_IJNS_5EmbedINS9_IJiiiiEEESQ_Lb0EEENS_11PassT'
                  'hroughIiEENS_3PadIiiiLb0EEESV_ST_ST_NSP_INS9_IJiiEEESW_Lb0EEESX_ST_NS_23Merge_v2_magic_divisionI'
                  'NS9_IJiiiEEEEES10_NS_8RightPadIiiLb0EEES12_NS_7UnMergeISW_Lb0EEEST_EEENS9_IJNSE_IJLi0EEEENSE_IJL'
                  'i1EEEENSE_IJLi2EEEENSE_IJLi3EEEENSE_IJLi4EEEENSE_IJLi5EEEENSE_IJLi6EEEENSE_IJLi7EEEESI_NSE_IJLi9'
                  'ELi11ELi13EEEENSE_IJLi10ELi12ELi14EEEENSE_IJLi15EEEENSE_IJLi16EEEENSE_IJLi18EEEENSE_IJLi17EEEEEE'
                  'ENS9_IJNSE_IJLi1ELi2ELi3ELi4EEEES1B_S1C_S1D_SI_NSE_IJLi9EEEENSE_IJLi10ELi11EEEENSE_IJLi12ELi13EE'
                  'EENSE_IJLi14EEEES1G_S1H_S1J_S1I_NSE_IJLi19ELi20EEEENSE_IJLi21EEEEEEENSE_IJLi19ELi21ELi20EEEElEEN'
                  'SO_INS9_IJS14_S12_S12_S14_ST_EEENS9_IJS16_S17_S18_S1A_S19_EEENS9_IJNSE_IJLi1ELi2EEEES19_S1A_NSE_'
                  'IJLi5ELi6EEEES1D_EEENSE_IJLi5ELi7ELi6EEEElEESA_NSO_INS9_IJSX_S12_S12_EEENS9_IJS16_S17_S18_EEENS9'
                  '_IJS1X_S19_S1A_EEENSE_IJLi3ELi4EEEElEELb1ELNS_25InMemoryDataOperationEnumE0ELi1ELNS_10TailNumber'
                  'E10EEEvNT_8ArgumentET1_T2_T3_T4_T0_S2F_'),
                 'kernel', 'aten::miopen_convolution', 'other', 'conv-kernel',
                 id='conv-ck-grouped-conv-long-mangled'),
    pytest.param('volta_scudnn_128x64_relu_interior_nn_v1',
                 'kernel', 'aten::cudnn_convolution', 'other', 'conv-kernel',
                 id='conv-scudnn'),
    pytest.param('volta_sgemm_128x64_nn',
                 'kernel', 'aten::cudnn_convolution', 'other', 'conv-launcher',
                 id='sgemm-launched-by-cudnn-conv'),
    pytest.param(('Cijk_Ailk_Bljk_BBS_BH_MT64x64x64_MI16x16x16x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS0_ASE_'
                  'ASGT_ASLT_ASM_ASAE01_ASCE01_ASEM1_AAC0_BL1_BS1_CLR1_DTLA0_DTLB0_DTVA0_DTVB0_DVO0_ETSP_EPS1_ELFLR'
                  '0_EMLL0_FSSC10_FL0_GLVWA2_GLVWB8_GRCGA1_GRCGB1_GRPM1_GRVWn1_GSU1_GSUASB_GLS0_ISA942_IU1_K1_KLA_L'
                  'BSPPA1024_LBSPPB128_LPA16_LPB16_LDL1_LRVW8_LWPMn1_LDW0_FMA_MIAV0_MDA2_MO40_MMFSC_MKFGSU256_NTA0_'
                  'NTB0_NTC0_NTD0_NEPBS0_NLCA1_NLCB1_ONLL1_OPLV0_PK0_PAP0_PGR1_PLR5_PKA0_SIA3_SLW1_SS0_SU16_SUM0_SU'
                  'S512_SCIUI1_SPO0_SRVW0_SSO0_SVW4_SNLL0_TSGRA0_TSGRB0_TT1_64_TLDS1_UMLDSA0_UMLDSB1_U64SL1_USFGROn'
                  '1_VAW1_VSn1_VW1_VWB1_VFLRP1_WSGRA0_WSGRB0_WS64_WG64_4_1_WGMn16'),
                 'kernel', 'aten::miopen_convolution', 'other', 'conv-launcher',
                 id='cijk-launched-by-miopen-conv'),
    pytest.param(('void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, fal'
                  'se, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfl'
                  'oat16_t> >, false, true, false, false, false, true, false>(pytorch_flash::Flash_fwd_params)'),
                 'kernel', 'aten::_flash_attention_forward', 'fused_attention', 'flash-attention',
                 id='sdpa-flash-pytorch_flash'),
    pytest.param(('void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, fal'
                  'se, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfl'
                  'oat16_t> >, false, true, false, false, false, true, false>(pytorch_flash::Flash_fwd_params)'),
                 'kernel', None, 'fused_attention', 'flash-attention',
                 id='sdpa-flash-unlinked'),
    pytest.param(('void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::Collectiv'
                  'eMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, '
                  'cute::C<128>, cute::C<128> >, 128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false,'
                  ' false, false, false, false, true, true, false, false, false>, flash::CollectiveEpilogueFwd<cute'
                  '::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<'
                  '1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 256, false, false, false>, flash::StaticPersiste'
                  'ntTileScheduler> > > >(flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<...> >::Params)'),
                 'kernel', None, 'fused_attention', 'fa3-device-kernel',
                 id='fa3-is-a-cutlass-device-kernel'),
    pytest.param(('void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutl'
                  'ass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false'
                  ', false, true, true, false, false>(Flash_fwd_params)'),
                 'kernel', None, 'fused_attention', 'flash-attention',
                 id='fa2-splitkv-paged'),
    pytest.param(('void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, fal'
                  'se, cutlass::bfloat16_t>, 4, 1, true>(Flash_fwd_params)'),
                 'kernel', None, 'fused_attention', 'flash-attention',
                 id='fa2-splitkv-combine'),
    pytest.param(('void flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, fa'
                  'lse, cutlass::bfloat16_t> >(Flash_bwd_params)'),
                 'kernel', None, 'fused_attention', 'flash-attention',
                 id='fa2-bwd-helper'),
    pytest.param(('void flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false,'
                  ' cutlass::bfloat16_t> >(Flash_bwd_params, int)'),
                 'kernel', None, 'fused_attention', 'flash-attention',
                 id='fa2-bwd-convert-dq-not-conv'),
    pytest.param(('void flash::prepare_varlen_num_blocks_kernel<true>(int, int, int, int const*, int const*, int co'
                  'nst*, int const*, int const*, int const*, int, int, int, int, int, cutlass::FastDivmod, cutlass:'
                  ':FastDivmod, int*, int*, bool)'),
                 'kernel', None, 'fused_attention', 'flash-attention',
                 id='fa3-varlen-helper'),
    pytest.param(('fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloa'
                  't16_t, cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)'),
                 'kernel', 'aten::_efficient_attention_forward', 'fused_attention', 'fmha',
                 id='mem-efficient-fmha-cutlassF'),
    pytest.param(('fmha_cutlassB_bf16_aligned_128x128_k128_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cut'
                  'lass::arch::Sm80, cutlass::bfloat16_t, true, false, true, 128, 128, 128, false>::Params)'),
                 'kernel', None, 'fused_attention', 'fmha',
                 id='mem-efficient-fmha-cutlassB'),
    pytest.param('fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext',
                 'kernel', 'vllm::unified_attention_with_output', 'fused_attention', 'fmha',
                 id='b200-fmhaSm100a'),
    pytest.param('aiter::fmha_fwd_hd128_bf16_rtz',
                 'kernel', 'Torch-Compiled Region: 0/0', 'fused_attention', 'fmha',
                 id='aiter-fmha-fwd'),
    pytest.param(('_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_40BlockFmhaBatchPrefillPip'
                  'elineQRKSVSAsyncINS_36BlockFmhaBatchPrefillPipelineProblemIDF16bDF16bDF16bffDF16bhfDF16bfDF16bNS'
                  '_13TileFmhaShapeINS_8sequenceIJLi128ELi128ELi32ELi128ELi32ELi128EEEENS5_IJLi4ELi1ELi1EEEENS5_IJL'
                  'i32ELi32ELi16EEEES7_S8_Lb1EEELb1ENS_17ComposedAttentionILj0ELb1EEENS_30SimplifiedGenericAttentio'
                  'nMaskILb1EEELb0ELi1ENS_26TileFmhaBatchPrefillTraitsILb1ELb1ELb1ELb1ELb0ELNS_22BlockAttentionBias'
                  'EnumE0ELb0ELb0ELb0ELNS_28BlockAttentionQuantScaleEnumE0ELin1ELb0ELb0ELi1ELNS_37BlockAttentionKVC'
                  'acheMemoryLayoutEnumE1ELNS_36BlockAttentionKVCacheLookupTableEnumE1ELNS_33BlockAttentionKVCacheL'
                  'oadModeEnumE0EEEEENS_53BlockFmhaBatchPrefillPipelineQRKSVSAsyncDefaultPolicyEEENS_17Default2DEpi'
                  'logueINS_24Default2DEpilogueProblemIfDF16bLb1ELb1ELb1EEEvEEEEJNSS_21FmhaFwdGroupModeKargsEEEEvDp'
                  'T1_'),
                 'kernel', 'aiter::mha_batch_prefill', 'fused_attention', 'fmha',
                 id='ck-tile-mangled-fmha-batch-prefill'),
    pytest.param('cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0',
                 'kernel', 'aten::_scaled_dot_product_cudnn_attention', 'fused_attention', 'cudnn-sdpa',
                 id='cudnn-sdpa-fprop-not-conv'),
    pytest.param('cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x1x1_kernel0_0',
                 'kernel', None, 'fused_attention', 'cudnn-sdpa',
                 id='cudnn-sdpa-bprop'),
    # issue 11: cuDNN SDPA backward's helper kernels (nsys breakdowns of cuDNN's backward, H100/H200)
    pytest.param('compute_dot_do_o_specialized', 'kernel', None, 'fused_attention', 'sdpa-backward-helpers',
                 id='cudnn-sdpa-bwd-dot-do-o'),
    pytest.param('convert_dq_to_16bits', 'kernel', None, 'fused_attention', 'sdpa-backward-helpers',
                 id='cudnn-sdpa-bwd-convert-dq'),
    pytest.param(('void paged_attention_ll4mi_QKV_mfma16_kernel<__hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDa'
                  'taType)0, 16, 128, 256, false, 4>(...)'),
                 'kernel', None, 'fused_attention', 'paged-unified-attention',
                 id='vllm-rocm-paged-attention'),
    pytest.param('kernel_unified_attention_2d',
                 'kernel', None, 'fused_attention', 'paged-unified-attention',
                 id='vllm-triton-unified-attention'),
    pytest.param('void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<...> >(...)',
                 'kernel', None, 'fused_attention', 'flashinfer',
                 id='flashinfer-batch-prefill'),
    pytest.param('void flashinfer::mla::BatchMLAPageAttentionHopperKernel<...>(...)',
                 'kernel', None, 'fused_attention', 'flashinfer',
                 id='flashinfer-mla'),
    pytest.param('attn_fwd',
                 'kernel', 'aten::_flash_attention_forward', 'fused_attention', 'triton-attn-rocm',
                 id='rocm-sdpa-attn_fwd'),
    pytest.param('attn_fwd.kd',
                 'kernel', 'aten::_flash_attention_forward', 'fused_attention', 'triton-attn-rocm',
                 id='rocm-sdpa-attn_fwd.kd'),
    pytest.param('_attn_bwd_dkdv',
                 'kernel', None, 'fused_attention', 'triton-attn-rocm',
                 id='triton-tutorial-attn_bwd'),
    pytest.param('sage_fwd',
                 'kernel', 'Torch-Compiled Region: 0/0', 'fused_attention', 'sage-attention',
                 id='sage-fwd'),
    pytest.param('sage_quant_kernel',
                 'kernel', 'Torch-Compiled Region: 0/0', 'fused_attention', 'sage-attention',
                 id='sage-quant-is-part-of-sage'),
    pytest.param('triton_tem_fused_flex_attention_0',
                 'kernel', None, 'fused_attention', 'flex-attention',
                 id='flex-attention-template-not-gemm'),
    pytest.param('bwd_kernel_dk_dv',
                 'kernel', 'aten::_efficient_attention_backward', 'fused_attention', 'fused-attention-launcher',
                 id='aotriton-bwd-by-fused-launcher'),
    pytest.param(('void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::BFloat16>, std::a'
                  'rray<char*, 1ul> >(int, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>)'),
                 'kernel', 'aten::_flash_attention_forward', 'memory', 'fill-kernel',
                 id='fill-under-flash-forward-is-memory'),
    pytest.param(('void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char, (vllm::Fp8KVCacheDataTyp'
                  'e)1>(__nv_bfloat16 const*, __nv_bfloat16 const*, unsigned char*, unsigned char*, long const*, lo'
                  'ng, long, long, long, long, int, int, int, float const*, float const*)'),
                 'kernel', '_C_cache_ops::reshape_and_cache_flash', 'memory', 'kv-cache-write',
                 id='kv-write-contains-flash-nv'),
    pytest.param(('void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDataT'
                  'ype)0>(__hip_bfloat16 const*, __hip_bfloat16 const*, __hip_bfloat16*, __hip_bfloat16*, long cons'
                  't*, long, long, long, long, long, int, int, int, float const*, float const*, int)'),
                 'kernel', 'vllm::unified_attention_with_output', 'memory', 'kv-cache-write',
                 id='kv-write-contains-flash-under-attention-op'),
    pytest.param(('void vllm::concat_and_cache_mla_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0'
                  '>(...)'),
                 'kernel', None, 'memory', 'kv-cache-write',
                 id='kv-write-mla'),
    pytest.param(('void (anonymous namespace)::store_kvcache<2048l, 4, false, long>((anonymous namespace)::StoreKVC'
                  'acheParams)'),
                 'kernel', 'sglang::store_cache', 'memory', 'kv-cache-write',
                 id='sglang-store-kvcache'),
    pytest.param('triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_view_10',
                 'kernel', None, 'memory', 'inductor-layout',
                 id='inductor-poi-embeds-sdpa-flash-name'),
    pytest.param('triton_poi_fused__to_copy_add_cat_fmha_v3_fwd_mul_neg_stack_unbind_unsqueeze_view_13',
                 'kernel', 'Torch-Compiled Region: 0/0', 'elementwise', 'inductor-pointwise',
                 id='inductor-poi-embeds-fmha-rope'),
    pytest.param('triton_poi_fused__to_copy_add_aiter_sage_attn_cat_mul_neg_stack_transpose_unbind_unsqueeze_view_14',
                 'kernel', 'Torch-Compiled Region: 0/0', 'elementwise', 'inductor-pointwise',
                 id='inductor-poi-embeds-sage-attn'),
    pytest.param(('triton_red_fused__to_copy_add_addmm_as_strided_fmha_v3_fwd_mean_mul_neg_pow_rsqrt_stack_unbind_u'
                  'nsqueeze_view_24'),
                 'kernel', 'Torch-Compiled Region: 0/0', 'other', 'inductor-norm',
                 id='inductor-red-embeds-fmha-and-addmm-is-a-qk-norm'),
    pytest.param('triton_red_fused_add_mean_mul_pow_rsqrt_0',
                 'kernel', None, 'other', 'inductor-norm',
                 id='inductor-rms-norm-is-other-like-aten-norms'),
    pytest.param('triton_poi_fused_addmm_gelu_view_17',
                 'kernel', None, 'elementwise', 'inductor-pointwise',
                 id='inductor-poi-addmm-epilogue'),
    pytest.param('triton_poi_fused_clone_transpose_15',
                 'kernel', None, 'memory', 'inductor-layout',
                 id='inductor-clone-transpose'),
    pytest.param('triton_poi_fused__to_copy_1',
                 'kernel', None, 'memory', 'inductor-layout',
                 id='inductor-cast-only'),
    pytest.param('triton_poi_fused__unsafe_view_clone_slice_transpose_11',
                 'kernel', None, 'memory', 'inductor-layout',
                 id='inductor-unsafe-view-clone'),
    pytest.param('triton_per_fused__softmax_add_masked_fill_0',
                 'kernel', None, 'softmax', 'inductor-softmax',
                 id='inductor-softmax'),
    pytest.param('triton_red_fused__log_softmax_3',
                 'kernel', None, 'other', 'inductor-log-softmax',
                 id='inductor-log-softmax'),
    pytest.param('triton_tem_fused_addmm_2',
                 'kernel', None, 'matmul', 'inductor-template-gemm',
                 id='inductor-template-addmm'),
    pytest.param('triton_tem_fused__fused_rms_norm_mm_t_4',
                 'kernel', None, 'matmul', 'inductor-template-gemm',
                 id='inductor-template-rms-mm'),
    pytest.param(('void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 3, false, '
                  'false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)'),
                 'kernel', 'aten::_softmax', 'softmax', 'softmax',
                 id='softmax-warp-bf16'),
    pytest.param(('void (anonymous namespace)::softmax_warp_forward<float, float, float, 9, false, false>(float*, f'
                  'loat const*, int, int, int, bool const*, int, bool)'),
                 'kernel', None, 'softmax', 'softmax',
                 id='softmax-warp-unlinked'),
    pytest.param(('void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat'
                  '16, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 con'
                  'st*, int)'),
                 'kernel', 'aten::_softmax', 'softmax', 'softmax',
                 id='cunn-softmax-forward'),
    pytest.param(('void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<c10::BFloat16, float, c10::BFloat'
                  '16, at::native::(anonymous namespace)::SoftMaxForwardEpilogue, long, 6>(c10::BFloat16*, c10::BFl'
                  'oat16 const*, long)'),
                 'kernel', 'aten::_softmax', 'softmax', 'softmax',
                 id='cunn-softmax-forward-reg-rocm'),
    pytest.param(('void (anonymous namespace)::softmax_warp_backward<float, float, float, 1, false, false>(float*, '
                  'float const*, float const*, int, int, int, bool const*)'),
                 'kernel', None, 'softmax', 'softmax',
                 id='softmax-warp-backward-not-log'),
    pytest.param(('void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, f'
                  'loat const*, int, int, int, bool const*, int, bool)'),
                 'kernel', None, 'other', 'log-softmax-kernel',
                 id='log-softmax-template-arg-true'),
    pytest.param(('void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true>(float*, float co'
                  'nst*, int, int, int)'),
                 'kernel', None, 'other', 'log-softmax-kernel',
                 id='log-softmax-5-arg-2021'),
    pytest.param(('void (anonymous namespace)::softmax_warp_backward<float, float, float, 10, true, false>(float*, '
                  'float const*, float const*, int, int, int, bool const*)'),
                 'kernel', None, 'other', 'log-softmax-kernel',
                 id='log-softmax-backward'),
    pytest.param(('void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, f'
                  'loat const*, int, int, int, bool const*, int, bool)'),
                 'kernel', 'aten::_log_softmax', 'other', 'log-softmax-launcher',
                 id='log-softmax-by-launcher'),
    pytest.param(('void (anonymous namespace)::softmax_warp_backward<float, float, float, 10, true>(float*, float c'
                  'onst*, float const*, int, int, int)'),
                 'kernel', 'aten::_log_softmax_backward_data', 'other', 'log-softmax-launcher',
                 id='log-softmax-bwd-by-launcher'),
    pytest.param(('void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::'
                  '(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)'),
                 'kernel', None, 'other', 'log-softmax-kernel',
                 id='log-softmax-epilogue'),
    pytest.param('void tensorrt_llm::kernels::topkGatingSoftmax<float, 128, 4, 8, 16, int, false>(...)',
                 'kernel', None, 'other', 'moe-router-softmax',
                 id='moe-router-trtllm'),
    pytest.param('void vllm::moe::topkGatingSoftmax<4, 64, 4, 16, __nv_bfloat16>(...)',
                 'kernel', '_moe_C::topk_softmax', 'other', 'moe-router-softmax',
                 id='moe-router-vllm'),
    pytest.param('aiter::topk_softmax',
                 'kernel', None, 'other', 'moe-router-softmax',
                 id='moe-router-aiter'),
    pytest.param(('void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<c10::BFloat16, c10::'
                  'BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul'
                  '> >(int, at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::bina'
                  'ry_internal::MulFunctor<float> >, std::array<char*, 2ul>)'),
                 'kernel', 'aten::mul', 'elementwise', 'elementwise',
                 id='scale-mul-functor'),
    pytest.param(('void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::masked_fill'
                  '_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#7}'
                  '::operator()() const::{lambda(float, bool)#1}, std::array<char*, 3ul> >(int, at::native::(anonym'
                  'ous namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::opera'
                  'tor()() const::{lambda()#7}::operator()() const::{lambda(float, bool)#1}, std::array<char*, 3ul>'
                  ')'),
                 'kernel', 'aten::masked_fill_', 'elementwise', 'elementwise',
                 id='mask-masked-fill'),
    pytest.param(('void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, st'
                  'd::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)'),
                 'kernel', 'aten::add_', 'elementwise', 'elementwise',
                 id='additive-mask-add'),
    pytest.param(('void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int, 1, '
                  '4, bool>(at::cuda::detail::TensorInfo<float, unsigned int>, at::cuda::detail::TensorInfo<float, '
                  'unsigned int>, at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, at::Philox'
                  'CudaState)'),
                 'kernel', None, 'elementwise', 'dropout',
                 id='dropout'),
    pytest.param(('void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat'
                  '16*, c10::BFloat16 const*, int, long, long, long, int, int, int)'),
                 'kernel', '_C::rotary_embedding', 'elementwise', 'elementwise',
                 id='rope-vllm'),
    pytest.param(('void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, '
                  'float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BF'
                  'loat16*)'),
                 'kernel', 'aten::native_layer_norm', 'other', 'norm',
                 id='layer-norm'),
    pytest.param(('std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type vllm::fused_a'
                  'dd_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*, c10::BFloat16 const*,'
                  ' float, int, int)'),
                 'kernel', '_C::fused_add_rms_norm', 'other', 'norm',
                 id='rms-norm-typeConvert-is-not-conv'),
    pytest.param(('void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, fl'
                  'oat, float, float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::MeanOps'
                  '<float, float, float, float>, unsigned int, float, 4, 4>)'),
                 'kernel', 'aten::mean', 'other', 'reduce-scan',
                 id='mean-reduce-embeds-functor'),
    pytest.param('ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)',
                 'kernel', None, 'other', 'comm',
                 id='nccl-allreduce'),
    pytest.param(('void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsign'
                  'ed long, unsigned int**, unsigned long, unsigned long)'),
                 'kernel', 'symm_mem::multimem_all_reduce_', 'other', 'comm',
                 id='symm-mem-all-reduce'),
    pytest.param('SubTensorOpWithScalar1d',
                 'kernel', None, 'other', None,
                 id='unknown-miopen-helper'),
    # linear attention and SSM mixers (issue 22; more must-fire and must-not cases in
    # tests/analysis/test_classify_misfilings.py)
    pytest.param('chunk_scaled_dot_kkt_fwd_kernel',
                 'kernel', 'vllm::gdn_attention_core', 'other', 'linear-attention-gated-delta',
                 id='gdn-kkt-says-scaled-dot-but-is-linear-attention'),
    pytest.param(('void selective_scan_fwd_kernel<Selective_Scan_fwd_kernel_traits<32, 16, 1, true, true, true, '
                  'false, c10::BFloat16, float, c10::BFloat16> >(SSMParamsBase)'),
                 'kernel', None, 'other', 'mamba-selective-scan',
                 id='mamba-selective-scan-cuda'),
    pytest.param('_bmm_chunk_fwd_kernel',
                 'kernel', None, 'other', 'mamba-ssd',
                 id='mamba2-ssd-bmm-chunk-is-not-an-attention-gemm'),
    pytest.param(('void causal_conv1d_fwd_kernel<Causal_conv1d_fwd_kernel_traits<128, 4, true, c10::BFloat16, '
                  'c10::BFloat16> >(ConvParamsBase)'),
                 'kernel', 'DaoAILab::_causal_conv1d_fwd_cpp', 'other', 'causal-conv1d',
                 id='causal-conv1d-is-the-mixer-not-a-cnn-conv'),
    pytest.param('_fwd_diag_kernel',
                 'kernel', 'vllm::linear_attention', 'other', 'ssm-launcher',
                 id='minimax-lightning-kernel-by-its-linear-attention-launcher'),
]

# Cases whose name is copied verbatim from a trace under shared/traces/real/ (checked by the walk).
VERBATIM_IDS = frozenset({
    'additive-mask-add', 'aiter-fmha-fwd', 'ampere-sgemm', 'b200-fmhaSm100a', 'bf16-cast-copy', 'cat-kv-concat',
    'cijk-launched-by-miopen-conv', 'ck-tile-mangled-fmha-batch-prefill', 'conv-ck-grouped-conv-long-mangled',
    'conv-cutlass-fprop', 'conv-miopen-igemm', 'conv-scudnn', 'conv-xmma-fprop-contains-gemm',
    'cublaslt-epilogue', 'cudnn-nchw-to-nhwc-in-conv', 'cunn-softmax-forward', 'cunn-softmax-forward-reg-rocm',
    'cutlass-kernel-tf32', 'direct-copy-launched-by-addmm-bias-copy', 'direct-copy-under-copy_-inside-matmul',
    'dot_kernel-under-mm', 'dropout', 'eager-bmm-cutlass-kernel2', 'eager-bmm-wmma-unlinked',
    'fbgemm-is-not-gemm', 'fill-says-elementwise', 'fill-under-flash-forward-is-memory', 'gemv-skinny',
    'gemvx-skinny', 'hipblaslt-cijk', 'index-copy', 'inductor-cast-only', 'inductor-clone-transpose',
    'inductor-poi-addmm-epilogue', 'inductor-poi-embeds-fmha-rope', 'inductor-poi-embeds-sage-attn',
    'inductor-red-embeds-fmha-and-addmm-is-a-qk-norm', 'inductor-rms-norm-is-other-like-aten-norms',
    'kv-write-contains-flash-nv',
    'kv-write-contains-flash-under-attention-op', 'layer-norm', 'log-softmax-5-arg-2021', 'log-softmax-backward',
    'log-softmax-bwd-by-launcher', 'log-softmax-by-launcher', 'log-softmax-template-arg-true', 'mask-masked-fill',
    'mean-reduce-embeds-functor', 'memcpy-dtod-under-copy_', 'memcpy-dtoh-item',
    'memset-under-addmm-is-cublas-workspace', 'memset-under-cudnn-conv-wgrad', 'memset-under-mm',
    'memset-under-zero_', 'memset-unlinked-is-memory', 'miopen-batched-transpose-in-conv', 'nccl-allreduce',
    'nvjet-b200', 'reduce_1Block-under-mm', 'reduce_1Block-unlinked-is-cublas',
    'rms-norm-typeConvert-is-not-conv', 'rocclr-fill-as-kernel', 'rocm-sdpa-attn_fwd', 'rocm-sdpa-attn_fwd.kd',
    'rope-vllm', 'sage-fwd', 'sage-quant-is-part-of-sage', 'scale-mul-functor', 'sdpa-flash-pytorch_flash',
    'sdpa-flash-unlinked', 'sgemm-launched-by-cudnn-conv', 'sglang-store-kvcache', 'sm90-xmma',
    'softmax-warp-backward-not-log', 'softmax-warp-bf16', 'softmax-warp-unlinked',
    'splitKreduce-under-addmm-contains-reduce', 'splitKreduce-unlinked-contains-reduce', 'symm-mem-all-reduce',
    'trtllm-fp4-bmm', 'unknown-miopen-helper', 'vllm-triton-unified-attention', 'volta-sgemm'
})


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return Classifier()


@pytest.mark.parametrize("name, kind, launcher, expected, rule", CASES)
def test_device_case(clf, name, kind, launcher, expected, rule):
    got = clf.device_rule(name, kind, launcher)
    assert (got.name if got else None) == rule
    assert clf.device(name, kind, launcher) == expected


def test_every_device_rule_has_a_case(clf):
    hit = {r.name for p in CASES if (r := clf.device_rule(*p.values[:3])) is not None}
    missing = [r.name for r in DEVICE_RULES if r.name not in hit]
    assert not missing, f"rules without a fixture case (no evidence): {missing}"


def test_rules_are_well_formed():
    names = [r.name for r in DEVICE_RULES + HOST_RULES]
    assert len(names) == len(set(names)), "rule names must be unique"
    for r in DEVICE_RULES + HOST_RULES:
        assert r.why, f"rule {r.name} must say why"
        for pat in (r.kernel, r.launcher):
            if pat is not None:
                re.compile(pat)
    for r in HOST_RULES:
        assert r.launcher is None and r.kernel.startswith("^") and r.kernel.endswith("$"), f"{r.name}: anchor it"
    assert all(r.kernel is not None or r.launcher is not None or r.kinds != {"kernel", "memcpy", "memset"}
               for r in DEVICE_RULES), "a catch-all rule would hide the 'other' fallback"


@pytest.mark.parametrize("category", ["attention", "Softmax", "softmax ", "", "fused-attention"])
def test_rule_with_an_unknown_category_is_refused(category):
    with pytest.raises(ValueError, match="unknown category"):
        Rule("bad", category)


def test_every_category_is_produced_by_some_rule():
    """A category no rule produces is dead vocabulary (or a rule table lost its entries)."""
    produced = {r.category for r in DEVICE_RULES + HOST_RULES}
    assert produced == set(CATEGORIES)


def test_categories():
    assert CATEGORIES == ("matmul", "softmax", "fused_attention", "memory", "elementwise", "other")
    from tracekit.results.attribution import CATEGORIES as result_categories
    assert CATEGORIES == result_categories


def test_rule_is_frozen_and_slotted():
    r = DEVICE_RULES[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.category = "matmul"
    assert not hasattr(r, "__dict__")
    with pytest.raises(ValueError):
        Rule("bad", "attention")
    with pytest.raises(ValueError):
        Rule("bad", "other", kinds=frozenset({"Kernel"}))


def test_launcher_rules_never_match_unknown_launcher():
    for rule in DEVICE_RULES:
        if rule.launcher is not None:
            one = Classifier(device_rules=(rule,))
            for kind in sorted(rule.kinds):
                assert one.device_rule("Memset (Device)" if kind != "kernel" else "x", kind, None) is None, rule.name


def test_rules_are_data():
    only = Rule("only-foo", "softmax", kernel="foo", kinds=frozenset({"kernel"}))
    c = Classifier(device_rules=(only,), host_rules=())
    assert c.device("xfoox", "kernel", None) == "softmax"
    assert c.device("xfoox", "memcpy", None) == "other"
    assert c.device_rule("bar", "kernel", "aten::mm") is None
    assert c.host("aten::mm") == "other"
    with pytest.raises(ValueError, match="duplicate"):
        Classifier(device_rules=(Rule("a", "other"), Rule("a", "matmul")))


def test_unknown_kind_raises(clf):
    with pytest.raises(ValueError):
        clf.device("attn_fwd", "gpu_memcpy", None)


def test_cache_per_distinct_key():
    c = Classifier()
    long_name = max((p.values[0] for p in CASES), key=len)
    assert len(long_name) > 500
    keys = [(long_name, "kernel", None), ("attn_fwd", "kernel", "aten::_flash_attention_forward"),
            ("Memset (Device)", "memset", "aten::addmm"), ("Memset (Device)", "memset", None)]
    first = [c.device_rule(*k) for k in keys]
    for _ in range(1000):
        assert [c.device_rule(*k) for k in keys] == first
    assert c.device_rule(*keys[1]) is first[1]
    assert len(c._dcache) == len(keys)
    assert c.host("aten::bmm") == c.host("aten::bmm") == "matmul" and len(c._hcache) == 1


HOST_CASES = [
    ("aten::mm", "matmul", "host-matmul"), ("aten::bmm", "matmul", "host-matmul"),
    ("aten::addmm", "matmul", "host-matmul"), ("aten::addmm_", "matmul", "host-matmul"),
    ("aten::baddbmm", "matmul", "host-matmul"), ("aten::matmul", "matmul", "host-matmul"),
    ("aten::linear", "matmul", "host-matmul"), ("aten::einsum", "matmul", "host-matmul"),
    ("aten::_addmm_activation", "matmul", "host-matmul"), ("aten::mkldnn_linear", "matmul", "host-matmul"),
    ("mkldnn::_linear_pointwise", "matmul", "host-matmul"), ("quantized::linear_dynamic", "matmul", "host-matmul"),
    ("quantized::linear", "matmul", "host-matmul"),
    ("aten::softmax", "softmax", "host-softmax"), ("aten::_softmax", "softmax", "host-softmax"),
    ("aten::_safe_softmax", "softmax", "host-softmax"), ("aten::_softmax_backward_data", "softmax", "host-softmax"),
    ("aten::_log_softmax", "other", "host-log-softmax"), ("aten::log_softmax", "other", "host-log-softmax"),
    ("aten::scaled_dot_product_attention", "fused_attention", "host-fused-attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "fused_attention", "host-fused-attention"),
    ("aten::_scaled_dot_product_flash_attention", "fused_attention", "host-fused-attention"),
    ("aten::_scaled_dot_product_efficient_attention", "fused_attention", "host-fused-attention"),
    ("aten::_scaled_dot_product_cudnn_attention", "fused_attention", "host-fused-attention"),
    ("aten::_flash_attention_forward", "fused_attention", "host-fused-attention"),
    ("aten::_native_multi_head_attention", "fused_attention", "host-fused-attention"),
    ("flash_attn::_flash_attn_forward", "fused_attention", "host-fused-attention"),
    ("flex_attention", "fused_attention", "host-fused-attention"),
    ("aten::_scaled_dot_product_attention_math", "other", "host-sdpa-math"),
    ("aten::_grouped_mm", "matmul", "host-matmul"), ("aten::_scaled_grouped_mm", "matmul", "host-matmul"),
    ("vllm::gdn_attention_core", "other", "host-linear-attention-ssm"),
    ("MambaSplitConv1dScanCombinedFn", "other", "host-linear-attention-ssm"),
    ("DaoAILab::_causal_conv1d_fwd_cpp", "other", "host-linear-attention-ssm"),
    ("aten::copy_", "memory", "host-memory"), ("aten::contiguous", "memory", "host-memory"),
    ("aten::clone", "memory", "host-memory"), ("aten::_to_copy", "memory", "host-memory"),
    ("aten::to", "memory", "host-memory"), ("aten::cat", "memory", "host-memory"),
    ("aten::stack", "memory", "host-memory"), ("aten::fill_", "memory", "host-memory"),
    ("aten::zero_", "memory", "host-memory"), ("aten::zeros", "memory", "host-memory"),
    ("aten::empty", "memory", "host-memory"), ("aten::empty_strided", "memory", "host-memory"),
    ("aten::transpose", "memory", "host-memory"), ("aten::permute", "memory", "host-memory"),
    ("aten::view", "memory", "host-memory"), ("aten::reshape", "memory", "host-memory"),
    ("aten::_reshape_alias", "memory", "host-memory"), ("aten::expand", "memory", "host-memory"),
    ("aten::as_strided", "memory", "host-memory"), ("aten::t", "memory", "host-memory"),
    ("aten::unsqueeze", "memory", "host-memory"), ("aten::split", "memory", "host-memory"),
    ("aten::_unsafe_view", "memory", "host-memory"), ("aten::index_select", "memory", "host-memory"),
    ("aten::mul", "elementwise", "host-elementwise"), ("aten::div", "elementwise", "host-elementwise"),
    ("aten::add", "elementwise", "host-elementwise"), ("aten::add_", "elementwise", "host-elementwise"),
    ("aten::sub", "elementwise", "host-elementwise"), ("aten::masked_fill", "elementwise", "host-elementwise"),
    ("aten::masked_fill_", "elementwise", "host-elementwise"), ("aten::where", "elementwise", "host-elementwise"),
    ("aten::dropout", "elementwise", "host-elementwise"), ("aten::native_dropout", "elementwise", "host-elementwise"),
    ("aten::bernoulli_", "elementwise", "host-elementwise"), ("aten::gelu", "elementwise", "host-elementwise"),
    ("aten::silu", "elementwise", "host-elementwise"), ("aten::exp", "elementwise", "host-elementwise"),
    ("aten::tril", "elementwise", "host-elementwise"), ("aten::rsqrt", "elementwise", "host-elementwise"),
    ("aten::sum", "other", "host-reduction-norm"), ("aten::mean", "other", "host-reduction-norm"),
    ("aten::cumsum", "other", "host-reduction-norm"), ("aten::layer_norm", "other", "host-reduction-norm"),
    # anchoring traps: a prefix of another op name must not claim it
    ("aten::addcmul", "elementwise", "host-elementwise"), ("aten::addmv", "matmul", "host-matmul"),
    ("aten::tanh", "elementwise", "host-elementwise"), ("aten::topk", "other", "host-reduction-norm"),
    ("aten::multinomial", "other", None), ("aten::linear_backward", "other", None),
    ("aten::softmax_foo", "other", None), ("ProfilerStep#3", "other", None),
    ("nn.Module: Attention_0", "other", None), ("aten::scaled_dot_product_attention_x", "other", None),
    # torch.compile on CPU (issue 38): inductor's C++ kernels as cpp.enable_kernel_profile names them (torch 2.13)
    ("graph_1_cpp_fused__softmax_view_0", "softmax", "host-inductor-cpp-softmax"),
    ("cpp_fused__log_softmax_0", "other", "host-inductor-cpp-log-softmax"),
    ("graph_0_cpp_fused_add_mean_mul_pow_rsqrt_0", "other", "host-inductor-cpp-norm"),
    ("graph_0_cpp_fused_ones_zeros_0", "elementwise", "host-inductor-cpp"),
    ("Torch-Compiled Region: 1/0", "other", "host-compiled-code"),
    ("## Call CompiledFxGraph fybktpjmprjjmupjuhqek66ewiuxrkpxnexkwlc6uusenqypsobk ##", "other", "host-compiled-code"),
    ("graph_0_kernel", "other", None),  # CPU FlexAttention's template: its name says nothing
]


@pytest.mark.parametrize("op, expected, rule", HOST_CASES, ids=[c[0] for c in HOST_CASES])
def test_host_case(clf, op, expected, rule):
    got = clf.host_rule(op)
    assert (got.name if got else None) == rule
    assert clf.host(op) == expected


def test_every_host_rule_has_a_case():
    assert {r.name for r in HOST_RULES} <= {c[2] for c in HOST_CASES}


# ---- the walk over every real trace --------------------------------------------------------------------------

_KINDS = {"kernel": "kernel", "Kernel": "kernel", "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
          "gpu_memset": "memset", "Memset": "memset"}


@pytest.fixture(scope="module")
def real_names() -> dict[tuple[str, str], set[str]]:
    """(name, kind) -> files it occurs in, for every device event in every real trace (each file loaded once)."""
    found: dict[tuple[str, str], set[str]] = {}
    files = real_trace_files()
    assert files, f"no traces under {REAL}"
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the cyclic GC re-scans millions of fresh event dicts: 3x slower loads with it on
    try:
        for f in files:
            events = read_events(f)
            for e in events:
                kind = _KINDS.get(e.get("cat"))
                if kind is not None and isinstance(e.get("name"), str):
                    found.setdefault((e["name"], kind), set()).add(f.name)
            del events
    finally:
        if gc_was_enabled:
            gc.enable()
    return found


# (pattern over the name, expected category when the launcher is unknown)
REAL_EXPECTED = [
    (r"softmax_warp_forward<(?:[^,<>]+,){4}\s*false", "softmax"),
    (r"softmax_warp_(?:forward|backward)<(?:[^,<>]+,){4}\s*true", "other"),
    (r"cunn_SoftMaxForward<", "softmax"),
    (r"cunn_SoftMaxForwardReg<", "softmax"),
    (r"pytorch_flash::flash_fwd_kernel<", "fused_attention"),
    (r"^attn_fwd(?:\.kd)?$", "fused_attention"),
    (r"^(?!triton_).*[Ff]mha", "fused_attention"),
    (r"^triton_poi_.*(?:fmha|sage_attn)", "elementwise"),
    (r"^sage_fwd$|^sage_quant_kernel$", "fused_attention"),
    (r"^kernel_unified_attention_[23]d$", "fused_attention"),
    (r"reshape_and_cache_flash_kernel|store_kvcache", "memory"),
    (r"^Cijk_|^nvjet_|xmma_gemm|splitKreduce", "matmul"),
    (r"direct_copy_kernel|CatArrayBatchedCopy|FillFunctor", "memory"),
]


@requires_real
@pytest.mark.slow  # loads every real trace whole (~5 s)
def test_real_walk_classifies_every_name(real_names):
    c = Classifier()
    assert len(real_names) > 500
    bad = {}
    for name, kind in real_names:
        cat = c.device(name, kind, None)
        if cat not in CATEGORIES:
            bad[name] = cat
    assert not bad
    for name, kind in real_names:  # second pass is served from the cache
        c.device(name, kind, None)
    assert len(c._dcache) == len(real_names)


@requires_real
@pytest.mark.slow  # loads every real trace whole (~5 s)
@pytest.mark.parametrize("pattern, expected", REAL_EXPECTED, ids=[p for p, _ in REAL_EXPECTED])
def test_real_attention_kernels(clf, real_names, pattern, expected):
    rx = re.compile(pattern)
    hits = [(n, k) for n, k in real_names if rx.search(n)]
    assert hits, f"no real kernel matches {pattern!r}: the expectation is vacuous"
    wrong = {n[:120]: clf.device(n, k, None) for n, k in hits if clf.device(n, k, None) != expected}
    assert not wrong, f"expected {expected}"


@requires_real
@pytest.mark.slow  # loads every real trace whole (~5 s)
def test_verbatim_fixture_names_occur_in_real_traces(real_names):
    names = {n for n, _ in real_names}
    cases = {p.id: p.values[0] for p in CASES}
    assert VERBATIM_IDS <= cases.keys()
    missing = sorted(i for i in VERBATIM_IDS if cases[i] not in names)
    assert not missing, f"fixture names not found verbatim in {REAL}: {missing}"


# ---------------------------------------------------------------------------------------------
# Rules built at run time: their categories normalised to Category, and the errors that name what is wrong (the
# shipped rules are built at import, before any test runs)

def test_child_rule_category_becomes_a_category():
    r = ChildRule("sdpa-child", "softmax", r"^aten::x$", r"^aten::y$")
    assert type(r.category) is Category and r.category is Category.SOFTMAX
    c = Classifier(child_rules=(r,))
    assert c.host_child_rule("aten::x", "aten::y") is r
    assert c.host_child_rule("aten::x", "aten::z") is None


def test_child_rule_with_an_unknown_category_is_refused():
    with pytest.raises(ValueError, match=r"^rule 'bad-child': unknown category 'attention'$"):
        ChildRule("bad-child", "attention", r"^a$", r"^b$")


def test_rule_with_unknown_kinds_is_refused():
    with pytest.raises(ValueError, match=r"^rule 'bad-kinds': unknown kinds \['cpu_op', 'python'\]$"):
        Rule("bad-kinds", Category.OTHER, kinds=frozenset({"kernel", "python", "cpu_op"}))


# ---------------------------------------------------------------------------------------------
# The classifier refuses what it cannot hold, naming it

def test_duplicate_rule_names_are_named_in_the_error() -> None:
    """Three device rules, two with one name: the Classifier refuses them, naming the duplicate and only it."""
    from tracekit.analysis.classify import DEVICE_RULES, Classifier
    with pytest.raises(ValueError) as e:
        Classifier(device_rules=(DEVICE_RULES[0], DEVICE_RULES[1], DEVICE_RULES[0]))
    assert str(e.value) == f"duplicate rule names: {[DEVICE_RULES[0].name]}"  # only the name given twice


def test_a_device_event_of_an_unknown_kind_is_refused_by_name() -> None:
    """The classifier is public API: a device event kind outside DEVICE_KINDS is a ValueError that names it."""
    from tracekit.analysis.classify import Classifier
    with pytest.raises(ValueError, match="got 'bogus'"):
        Classifier().device_rule("void k()", "bogus", None)
