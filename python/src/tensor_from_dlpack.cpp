#include "tensor_from_dlpack.hpp"

#include "spattn/error.hpp"

namespace spattn::python {

namespace {

namespace dlpack = nanobind::dlpack;

DType dtype_from_dlpack(const char* name, dlpack::dtype dtype) {
  const auto code = static_cast<dlpack::dtype_code>(dtype.code);
  if (dtype.lanes == 1 && dtype.bits == 32 && code == dlpack::dtype_code::Float) return DType::f32;
  if (dtype.lanes == 1 && dtype.bits == 16 && code == dlpack::dtype_code::Float) return DType::f16;
  if (dtype.lanes == 1 && dtype.bits == 16 && code == dlpack::dtype_code::Bfloat) return DType::bf16;
  SPATTN_FAIL(name << " has DLPack dtype (code " << static_cast<int>(dtype.code) << ", " << static_cast<int>(dtype.bits)
                   << " bits, " << dtype.lanes << " lanes); allowed: float32, float16, bfloat16");
}

}  // namespace

TensorView tensor_from_dlpack(const char* name, const nanobind::ndarray<>& array) {
  const bool on_cuda = array.device_type() == nanobind::device::cuda::value;
  SPATTN_CHECK(on_cuda || array.device_type() == nanobind::device::cpu::value,
               name << " is on DLPack device type " << array.device_type() << "; allowed: CPU ("
                    << nanobind::device::cpu::value << ") and CUDA (" << nanobind::device::cuda::value << ")");
  SPATTN_CHECK(array.ndim() >= 1 && array.ndim() <= static_cast<std::size_t>(TensorView::kMaxDims),
               name << " has " << array.ndim() << " dimensions; allowed: 1 to " << TensorView::kMaxDims);
  TensorView view;
  view.data = array.data();
  view.dtype = dtype_from_dlpack(name, array.dtype());
  view.device = on_cuda ? Device{DeviceKind::cuda, array.device_id()} : Device::cpu();
  view.ndim = static_cast<int>(array.ndim());
  for (std::size_t dim = 0; dim < array.ndim(); ++dim) {
    view.shape[dim] = static_cast<int64_t>(array.shape(dim));
    view.strides[dim] = array.stride(dim);  // DLPack strides count elements, as TensorView's do
  }
  SPATTN_CHECK(view.is_contiguous(), name << " " << view.describe() << " is not contiguous; pass x.contiguous()");
  return view;
}

}  // namespace spattn::python
