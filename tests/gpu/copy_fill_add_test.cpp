// copy, fill and add on the GPU against the CPU kernels: bit for bit, since each element is one
// conversion (or one fp32 addition) with the same rounding on both, for every dtype and for
// strided views (slices along seq and heads, a transposed view, ranks 1 to 4).

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "cuda_test_support.hpp"

namespace spattn::test {
namespace {

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

float float_from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

/// fp32 values whose rounding to fp16 or bf16 is easy to get wrong: ties either way, just past a
/// tie, fp16 subnormals and their ties, overflow to infinity, signed zero, infinities, NaN.
std::vector<float> hard_to_round_values() {
  const float inf = std::numeric_limits<float>::infinity();
  return {float_from_bits(0x3f808000u), float_from_bits(0x3f818000u), float_from_bits(0x3f808001u),
          float_from_bits(0x3f801000u), float_from_bits(0x3f803000u), float_from_bits(0x3f801001u),
          float_from_bits(0x33800000u), float_from_bits(0x33c00000u), float_from_bits(0x33000000u),
          float_from_bits(0x34200000u), float_from_bits(0x387fc000u), float_from_bits(0x00000001u),
          65504.0f,                     65520.0f,                     65519.99f,
          3.4e38f,                      -0.0f,                        inf,
          -inf,                         std::numeric_limits<float>::quiet_NaN()};
}

using Copy = CudaKernelTest;

TEST_F(Copy, ConvertsEveryDtypePairLikeTheCpu) {
  for (DType from : kDtypes)
    for (DType to : kDtypes) {
      SCOPED_TRACE(dtype_name(from) + " -> " + dtype_name(to));
      HostTensor source(from, {2, 37, 3, 40});
      source.randomize(generator_, 3.0);
      if (from == DType::f32) {
        const std::vector<float> hard = hard_to_round_values();
        for (std::size_t i = 0; i < hard.size(); ++i) source.set(static_cast<int64_t>(i), hard[i]);
      }
      HostTensor destination(to, {2, 37, 3, 40});
      destination.poison();
      DeviceTwin source_gpu(*gpu_, source), destination_gpu(*gpu_, destination);
      gpu_->copy(source_gpu.view(), destination_gpu.view());
      cpu_->copy(source.view(), destination.view());
      expect_identical(destination, destination_gpu.download(), "copy");
    }
}

TEST_F(Copy, ReadsAndWritesStridedViews) {
  for (DType from : kDtypes)
    for (DType to : kDtypes) {
      SCOPED_TRACE(dtype_name(from) + " -> " + dtype_name(to));
      // source: (B, S, H, D) seen through a (B, H, S, D) buffer, then sliced along seq;
      // destination: a slice along heads of a larger poisoned tensor.
      HostTensor source(from, {2, 5, 41, 24});
      source.randomize(generator_);
      HostTensor destination(to, {2, 33, 7, 24});
      destination.poison();
      DeviceTwin source_gpu(*gpu_, source), destination_gpu(*gpu_, destination);
      const TensorView source_view = seq_heads_transposed(source.view()).slice(1, 4, 33);  // (2, 33, 5, 24)
      const TensorView destination_view = destination.view().slice(2, 1, 5);              // (2, 33, 5, 24)
      gpu_->copy(source_gpu.twin(source_view), destination_gpu.twin(destination_view));
      cpu_->copy(source_view, destination_view);
      // Elements outside the slice stay NaN on both sides; inside, a NaN is an unwritten element.
      expect_identical(destination, destination_gpu.download(), "strided copy");
    }
}

TEST_F(Copy, HandlesRanksOneToThree) {
  for (DType to : kDtypes) {
    SCOPED_TRACE("fp32 -> " + dtype_name(to));
    HostTensor source(DType::f32, {19, 3, 11});
    source.randomize(generator_);
    HostTensor destination(to, {19, 3, 11});
    destination.poison();
    DeviceTwin source_gpu(*gpu_, source), destination_gpu(*gpu_, destination);

    // rank 1: every third element (stride 33 along the first dimension)
    TensorView column = source.view().slice(1, 2, 1).slice(2, 5, 1);
    column.ndim = 1;
    TensorView column_destination = destination.view().slice(1, 0, 1).slice(2, 0, 1);
    column_destination.ndim = 1;
    // rank 2: a transposed (3, 19) view of the [:, :, 0] plane
    TensorView plane = source.view().slice(2, 0, 1);
    plane.ndim = 2;
    std::swap(plane.shape[0], plane.shape[1]);
    std::swap(plane.strides[0], plane.strides[1]);
    TensorView plane_destination = destination.view().slice(2, 1, 1);
    plane_destination.ndim = 2;
    std::swap(plane_destination.shape[0], plane_destination.shape[1]);
    std::swap(plane_destination.strides[0], plane_destination.strides[1]);
    // rank 3: a slice along the last dimension
    const TensorView block = source.view().slice(2, 3, 8);
    const TensorView block_destination = destination.view().slice(2, 2, 8);

    for (const auto& [from, into] : {std::pair{column, column_destination}, std::pair{plane, plane_destination},
                                     std::pair{block, block_destination}}) {
      gpu_->copy(source_gpu.twin(from), destination_gpu.twin(into));
      cpu_->copy(from, into);
    }
    expect_identical(destination, destination_gpu.download(), "ranks 1 to 3");
  }
}

TEST_F(Copy, EmptyTensorsAreANoOp) {
  HostTensor source(DType::f32, {2, 0, 3, 8});
  HostTensor destination(DType::bf16, {2, 0, 3, 8});
  TensorView source_view = source.view(), destination_view = destination.view();
  source_view.device = destination_view.device = gpu_->device();
  gpu_->copy(source_view, destination_view);
  gpu_->synchronize();
}

using Fill = CudaKernelTest;

TEST_F(Fill, WritesEveryElementOfAStridedViewLikeTheCpu) {
  const float values[] = {0.1f, -3.0f, 0.0f, -std::numeric_limits<float>::infinity(), 70000.0f};
  for (DType dtype : kDtypes)
    for (float value : values) {
      SCOPED_TRACE(dtype_name(dtype) + " fill " + std::to_string(value));
      HostTensor destination(dtype, {3, 29, 6, 20});
      destination.poison();
      DeviceTwin destination_gpu(*gpu_, destination);
      const TensorView view = seq_heads_transposed(destination.view()).slice(1, 1, 4);  // (3, 4, 29, 20)
      gpu_->fill(destination_gpu.twin(view), value);
      cpu_->fill(view, value);
      expect_identical(destination, destination_gpu.download(), "fill");
    }
}

using Add = CudaKernelTest;

TEST_F(Add, AddsEverySourceDtypeIntoFp32LikeTheCpu) {
  for (DType from : kDtypes) {
    SCOPED_TRACE(dtype_name(from) + " += into fp32");
    HostTensor source(from, {2, 6, 31, 40});
    source.randomize(generator_);
    HostTensor destination(DType::f32, {2, 31, 9, 40});
    destination.randomize(generator_, 10.0);
    DeviceTwin source_gpu(*gpu_, source), destination_gpu(*gpu_, destination);
    const TensorView source_view = seq_heads_transposed(source.view()).slice(2, 1, 4);  // (2, 31, 4, 40)
    const TensorView destination_view = destination.view().slice(2, 3, 4);             // (2, 31, 4, 40)
    gpu_->add(source_gpu.twin(source_view), destination_gpu.twin(destination_view));
    cpu_->add(source_view, destination_view);
    // One fp32 addition per element, rounded the same way on both: identical.
    expect_identical(destination, destination_gpu.download(), "add");
  }
}

/// Views that fold into rows of contiguous elements (the fast kernels), with and without packs of
/// four: a whole tensor, a slice along seq with batch > 1 (rows apart), a slice along heads, a
/// slice along the last dimension (rows of 5: no packs), and a rank-1 view that starts one
/// element into its buffer and has an odd length (misaligned: no packs).
std::vector<std::pair<TensorView, TensorView>> row_foldable_views(const HostTensor& source, const HostTensor& destination,
                                                                  const HostTensor& flat_source,
                                                                  const HostTensor& flat_destination) {
  return {{source.view(), destination.view()},
          {source.view().slice(1, 7, 33), destination.view().slice(1, 3, 33)},
          {source.view().slice(2, 2, 3), destination.view().slice(2, 0, 3)},
          {source.view().slice(3, 1, 5), destination.view().slice(3, 3, 5)},
          {flat_source.view().slice(0, 1, 999), flat_destination.view().slice(0, 1, 999)}};
}

using RowFoldedViews = CudaKernelTest;

TEST_F(RowFoldedViews, CopyFillAndAddMatchTheCpu) {
  for (DType from : kDtypes)
    for (DType to : kDtypes) {
      SCOPED_TRACE(dtype_name(from) + " -> " + dtype_name(to));
      HostTensor source(from, {3, 50, 6, 8}), flat_source(from, {1001});
      source.randomize(generator_, 3.0);
      flat_source.randomize(generator_, 3.0);
      HostTensor destination(to, {3, 50, 6, 8}), flat_destination(to, {1001});
      destination.poison();
      flat_destination.poison();
      DeviceTwin source_gpu(*gpu_, source), destination_gpu(*gpu_, destination), flat_source_gpu(*gpu_, flat_source),
          flat_destination_gpu(*gpu_, flat_destination);
      const auto views = row_foldable_views(source, destination, flat_source, flat_destination);
      for (std::size_t i = 0; i < views.size(); ++i) {
        const bool flat = i + 1 == views.size();
        const TensorView from_gpu = (flat ? flat_source_gpu : source_gpu).twin(views[i].first);
        const TensorView into_gpu = (flat ? flat_destination_gpu : destination_gpu).twin(views[i].second);
        // Each view is filled, then copied into, then (fp32 only) added to: every kernel's result shows.
        gpu_->fill(into_gpu, -1.5f);
        cpu_->fill(views[i].second, -1.5f);
        expect_identical(destination, destination_gpu.download(), "fill");
        expect_identical(flat_destination, flat_destination_gpu.download(), "fill of the rank-1 view");
        gpu_->copy(from_gpu, into_gpu);
        cpu_->copy(views[i].first, views[i].second);
        if (to == DType::f32) {
          gpu_->add(from_gpu, into_gpu);
          cpu_->add(views[i].first, views[i].second);
        }
        expect_identical(destination, destination_gpu.download(), "copy and add");
        expect_identical(flat_destination, flat_destination_gpu.download(), "copy and add of the rank-1 view");
      }
    }
}

}  // namespace
}  // namespace spattn::test
