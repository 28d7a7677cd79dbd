#include <cstdlib>

#include "core/memory_ledger.hpp"
#include "kernels/block_kernels.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

/// Cache-line (and AVX-512) alignment of workspaces.
constexpr std::size_t kWorkspaceAlignment = 64;

class CpuBlockKernels final : public BlockKernels {
 public:
  Device device() const override { return Device::cpu(); }

  void forward(const ForwardBlock& block) override {
    cpu::attention_forward(block);
    write_final_out(block);
  }
  void backward(const BackwardBlock& block) override { cpu::attention_backward(block); }

  void merge(const TensorView& partial_out, const TensorView& partial_lse, TensorView running_out,
             TensorView running_lse) override {
    cpu::merge_partial(partial_out, partial_lse, running_out, running_lse);
  }

  void softmax_delta(const TensorView& out, const TensorView& dout, TensorView delta) override {
    cpu::softmax_delta(out, dout, delta);
  }

  void copy(const TensorView& src, TensorView dst) override { cpu::copy_converting(src, dst); }

  void fill(TensorView dst, float value) override { cpu::fill(dst, value); }

  void add(const TensorView& source, TensorView destination) override { cpu::add_converting(source, destination); }

  void* allocate(std::size_t bytes) override {
    // aligned_alloc wants a multiple of the alignment; a zero-byte request still gets a pointer.
    const std::size_t rounded = (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
    void* pointer = std::aligned_alloc(kWorkspaceAlignment, rounded == 0 ? kWorkspaceAlignment : rounded);
    SPATTN_CHECK(pointer != nullptr, "could not allocate " << bytes << " bytes of host memory");
    record_allocation(Device::cpu(), pointer, rounded);
    return pointer;
  }

  void deallocate(void* pointer) override {
    record_release(Device::cpu(), pointer);
    std::free(pointer);
  }
};

}  // namespace

std::unique_ptr<BlockKernels> make_cpu_block_kernels() { return std::make_unique<CpuBlockKernels>(); }

}  // namespace spattn
