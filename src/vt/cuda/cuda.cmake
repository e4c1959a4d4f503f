# The CUDA backend of vt (included by src/vt/CMakeLists.txt when VT_CUDA is ON): the
# runtime (streams, caching allocator, copies), the kernels, and the cuBLASLt GEMMs.
# Each optional feature prints one line; a kernel whose feature is disabled is not
# registered, so OpRegistered says false and dispatch refuses it by name.
set_target_properties(vtllm_vt PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON CUDA_EXTENSIONS OFF)

file(GLOB _vt_cuda_sources CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_LIST_DIR}/*.cu ${CMAKE_CURRENT_LIST_DIR}/*.cpp)
# NCCL (tensor parallelism): only its header at build time; the library is loaded with dlopen
# when a model is split (nccl_comm.cpp), so binaries do not depend on it.
find_path(VTLLM_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include
          /usr/local/cuda/include /usr/include)
if(VTLLM_NCCL_INCLUDE_DIR)
  message(STATUS "vt CUDA feature NCCL tensor parallelism (dlopen libnccl.so.2 at run time): ENABLED (${VTLLM_NCCL_INCLUDE_DIR}/nccl.h)")
  target_include_directories(vtllm_vt PRIVATE ${VTLLM_NCCL_INCLUDE_DIR})
  target_compile_definitions(vtllm_vt PRIVATE VT_WITH_NCCL=1)
  target_link_libraries(vtllm_vt PRIVATE ${CMAKE_DL_LIBS})
else()
  message(STATUS "vt CUDA feature NCCL tensor parallelism: DISABLED (nccl.h not found)")
  list(FILTER _vt_cuda_sources EXCLUDE REGEX "nccl_comm\\.cpp$")
endif()
target_sources(vtllm_vt PRIVATE ${_vt_cuda_sources})
target_compile_definitions(vtllm_vt PRIVATE VT_WITH_CUDA=1)
target_link_libraries(vtllm_vt PRIVATE CUDA::cudart_static)

# IEEE arithmetic only: the quantizers and fused recipes must match the CPU bit for bit, so
# no fast-math, no contraction of a*b+c into fma (kernels write the fmas they mean).
set(_vt_cuda_flags -O3 --expt-relaxed-constexpr -fmad=false -prec-div=true -prec-sqrt=true -ftz=false
  -Xcompiler=-Wall,-Wextra -Werror=all-warnings)
target_compile_options(vtllm_vt PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:${_vt_cuda_flags}>")

# cuBLASLt: Matmul (BF16/F32) and the large-M path of MatmulFp8.
if(TARGET CUDA::cublasLt)
  target_link_libraries(vtllm_vt PRIVATE CUDA::cublasLt)
  target_compile_definitions(vtllm_vt PRIVATE VT_CUDA_CUBLASLT=1)
  message(STATUS "vt CUDA feature cuBLASLt (Matmul, MatmulFp8 large M): ENABLED")
  set(_vt_cublaslt ON)
else()
  message(STATUS "vt CUDA feature cuBLASLt (Matmul, MatmulFp8 large M): DISABLED (CUDA::cublasLt not found in the toolkit)")
  set(_vt_cublaslt OFF)
endif()

# FP8 MatmulFp8 needs sm_89+ (fp8 conversion instructions, FP8 cuBLASLt) in every built arch.
set(_vt_fp8_reason "")
foreach(_arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
  if(NOT _arch MATCHES "^([0-9]+)")
    set(_vt_fp8_reason "CMAKE_CUDA_ARCHITECTURES entry '${_arch}' is not a number >= 89")
  elseif(CMAKE_MATCH_1 LESS 89)
    set(_vt_fp8_reason "CMAKE_CUDA_ARCHITECTURES has ${_arch} < 89")
  endif()
endforeach()
if(NOT _vt_cublaslt)
  set(_vt_fp8_reason "needs cuBLASLt")
endif()
if(_vt_fp8_reason STREQUAL "")
  target_compile_definitions(vtllm_vt PRIVATE VT_CUDA_FP8=1)
  message(STATUS "vt CUDA feature FP8 MatmulFp8 (cuBLASLt + small-M kernel, sm_89+): ENABLED (archs ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "vt CUDA feature FP8 MatmulFp8 (cuBLASLt + small-M kernel, sm_89+): DISABLED (${_vt_fp8_reason})")
endif()
