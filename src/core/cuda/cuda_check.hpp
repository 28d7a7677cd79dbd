#pragma once
// Every CUDA runtime call is checked: a failure becomes spattn::Error naming the call and
// CUDA's own description, so a message from a device machine says what failed without a debugger.

#include <cuda_runtime_api.h>

#include "spattn/error.hpp"

/// Throws spattn::Error when `call` (a CUDA runtime call) does not return cudaSuccess, e.g.
/// SPATTN_CUDA_CHECK(cudaMalloc(&pointer, bytes)).
#define SPATTN_CUDA_CHECK(call)                                                                 \
  do {                                                                                          \
    const cudaError_t spattn_cuda_status_ = (call);                                             \
    /* The runtime also keeps the error as the thread's last error: clear it, or the next */    \
    /* launch check would report it as that kernel's failure. */                                \
    if (spattn_cuda_status_ != cudaSuccess) (void)cudaGetLastError();                           \
    SPATTN_CHECK(spattn_cuda_status_ == cudaSuccess,                                            \
                 #call << " failed: " << cudaGetErrorName(spattn_cuda_status_) << " ("         \
                       << cudaGetErrorString(spattn_cuda_status_) << ")");                     \
  } while (false)

/// After a kernel launch: a bad configuration (or an earlier asynchronous fault) shows here,
/// named after the kernel, instead of at some later unrelated call.
#define SPATTN_CUDA_CHECK_LAUNCH(kernel_name)                                                   \
  do {                                                                                          \
    const cudaError_t spattn_cuda_status_ = cudaGetLastError();                                 \
    SPATTN_CHECK(spattn_cuda_status_ == cudaSuccess,                                            \
                 "launch of " << kernel_name << " failed: " << cudaGetErrorName(spattn_cuda_status_) \
                              << " (" << cudaGetErrorString(spattn_cuda_status_) << ")");       \
  } while (false)
