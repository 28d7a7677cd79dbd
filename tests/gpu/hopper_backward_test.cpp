// The own Hopper backward (src/kernels/hopper/hopper_backward.hpp) against the fp64 reference of the same block and
// against cuDNN's error on the same inputs: masks none / causal / windows on one or both sides in global positions,
// segments with gaps and out of order, more segments than one launch takes, query and key counts that are not
// multiples of a tile, blocks of several query and key tiles, GQA 1:1 to 8:1, batch 1 and 3, head dims 64 and 128,
// bf16 and fp16, accumulation over two calls, a GQA group split over several CTAs or whole, rows and keys that see
// nothing, the same dk and dv bits on a second run without GQA, the same dq, dk and dv bits in deterministic mode
// (own and cuDNN), bad blocks. The own block has no `out` (the own backward reads delta only, so a read of out would
// fault); cuDNN's, which recomputes delta from out, gets the reference's final out. dq, dk and dv are accumulated into,
// so instead of NaN-poisoned they start at random values, the same for both kernels, and what a run added (end - start)
// is compared. Each test runs the head dims the build has (SPATTN_HOPPER_HEAD_DIMS); where the GPU or the build has no
// own backward for its cases, it says why and skips.
//
// Tolerance: as the cuDNN tests' (2e-2 of the largest reference magnitude for bf16, 5e-3 for fp16), and the own
// kernel's error in each of dq, dk and dv must be at most 1.25x cuDNN's on the same inputs (plus 1e-6 of the
// magnitude, fp32 round-off). Where there is nothing to add (dq of rows that see no key, dk and dv of keys that no
// row sees) the own kernel must leave the starting values bit for bit.

#include "kernels/hopper/hopper_backward.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "block_reference.hpp"
#include "cuda_test_support.hpp"
#include "kernels/cuda/cuda_block_kernels.hpp"
#include "kernels/hopper/backward_head_parts.hpp"
#include "kernels/hopper/backward_problem.hpp"
#include "kernels/hopper/hopper_support.hpp"
#include "spattn/error.hpp"

namespace spattn::test {
namespace {

const Device kGpu{DeviceKind::cuda, 0};
const AttentionMask kNoMask{-1, -1};
const AttentionMask kCausal{-1, 0};

float default_scale(int64_t head_dim) { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

/// The bound of every comparison with fp64 (see the header comment).
double tolerance_of(DType dtype) { return dtype == DType::bf16 ? 2e-2 : 5e-3; }

/// A block's inputs and fp64 gradients, with what its backward takes from the forward of the whole attention.
struct BackwardProblem {
  BlockCase block_case;
  int64_t head_dim;
  float scale;
  BlockProblem reference;
  HostTensor out;    // (B, Sq, H, D) fp32, the reference's final out
  HostTensor lse;    // (B, H, Sq) fp32, the reference's final lse
  HostTensor delta;  // (B, H, Sq) fp32, rowsum(dout * out) by the CPU kernels
};

/// What a backward accumulates into, all fp32.
struct Gradients {
  HostTensor dq;                   // (B, Sq, H, D)
  std::vector<HostTensor> dk, dv;  // per segment (B, Sk, HK, D)
};

/// A block's tensors on the GPU and its BackwardBlock, the gradients holding given starting values.
struct DeviceBackward {
  std::unique_ptr<DeviceTwin> q, dout, out, lse, delta, dq;
  std::vector<std::unique_ptr<DeviceTwin>> k, v, dk, dv;
  BackwardBlock block;

  /// With `with_out` the block carries the final out (cuDNN needs it); without, block.out stays empty.
  DeviceBackward(cuda::CudaElementwiseKernels& gpu, const BackwardProblem& problem, const Gradients& start,
                 bool with_out) {
    const auto twin = [&](const HostTensor& host) { return std::make_unique<DeviceTwin>(gpu, host); };
    const BlockCase& c = problem.block_case;
    const BlockProblem& p = problem.reference;
    q = twin(p.q);
    dout = twin(p.dout);
    lse = twin(problem.lse);
    delta = twin(problem.delta);
    dq = twin(start.dq);
    block.q = q->view();
    block.dout = dout->view();
    block.lse = lse->view();
    block.delta = delta->view();
    block.dq = dq->view();
    if (with_out) {
      out = twin(problem.out);
      block.out = out->view();
    }
    for (std::size_t s = 0; s < c.segments.size(); ++s) {
      k.push_back(twin(p.k[s]));
      v.push_back(twin(p.v[s]));
      dk.push_back(twin(start.dk[s]));
      dv.push_back(twin(start.dv[s]));
      block.segments.push_back({{k[s]->view(), v[s]->view(), c.segments[s].position}, dk[s]->view(), dv[s]->view()});
    }
    block.q_position = c.q_position;
    block.mask = c.mask;
    block.scale = problem.scale;
  }

  Gradients download() const {
    Gradients now{dq->download(), {}, {}};
    for (std::size_t s = 0; s < dk.size(); ++s) {
      now.dk.push_back(dk[s]->download());
      now.dv.push_back(dv[s]->download());
    }
    return now;
  }
};

/// end - start in fp32: what a backward added to an accumulator (exact but for the fp32 rounding of the sum, a
/// few 1e-8 of |start|).
HostTensor added(const HostTensor& start, const HostTensor& end) {
  HostTensor difference = HostTensor::like(end.view());
  for (int64_t i = 0; i < end.numel(); ++i) difference.set(i, end.at(i) - start.at(i));
  return difference;
}

/// The largest error of dq, of dk and of dv (over the segments), each relative to its reference's magnitude.
struct GradientErrors {
  double dq = 0, dk = 0, dv = 0;
};

/// What `start` became `end` by, for each gradient, against the fp64 gradients.
GradientErrors expect_gradients_near_reference(const BackwardProblem& problem, const Gradients& start,
                                               const Gradients& end, double tolerance, const std::string& who) {
  const BlockProblem& p = problem.reference;
  GradientErrors errors;
  errors.dq = expect_near_reference(p.dq, added(start.dq, end.dq), tolerance, who + " dq vs fp64");
  for (std::size_t s = 0; s < p.dk.size(); ++s) {
    const std::string segment = " of segment " + std::to_string(s) + " vs fp64";
    errors.dk = std::max(
        errors.dk, expect_near_reference(p.dk[s], added(start.dk[s], end.dk[s]), tolerance, who + " dk" + segment));
    errors.dv = std::max(
        errors.dv, expect_near_reference(p.dv[s], added(start.dv[s], end.dv[s]), tolerance, who + " dv" + segment));
  }
  return errors;
}

/// Where there is nothing to add, nothing is added, bit for bit (so never NaN): dq of rows that see no key of the
/// whole attention (lse -inf, rows the backward skips), dk and dv of keys that no row of the block sees.
void expect_untouched_where_nothing_is_seen(const BackwardProblem& problem, const Gradients& start,
                                            const Gradients& end) {
  const BlockCase& c = problem.block_case;
  const int64_t S = c.q_rows, H = c.heads, D = problem.head_dim;
  const auto any_changed = [](const HostTensor& before, const HostTensor& after, int64_t first, int64_t count) {
    for (int64_t i = first; i < first + count; ++i)
      if (!(after.at(i) == before.at(i))) return true;
    return false;
  };
  int64_t changed_rows = 0;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i)
        if (std::isinf(problem.reference.lse[static_cast<std::size_t>((b * H + h) * S + i)]))
          changed_rows += any_changed(start.dq, end.dq, ((b * S + i) * H + h) * D, D);
  EXPECT_EQ(changed_rows, 0) << "dq of rows that see no key is not exactly its starting value";
  const int64_t key_elements = c.kv_heads * D;  // of one key of one batch entry
  for (std::size_t s = 0; s < c.segments.size(); ++s) {
    const SegmentSpec& segment = c.segments[s];
    int64_t changed_keys = 0;
    for (int64_t j = 0; j < segment.keys; ++j) {
      const int64_t key = segment.position + j;
      if (c.mask.any_visible(c.q_position, c.q_position + S, key, key + 1)) continue;
      for (int64_t b = 0; b < c.batch; ++b) {
        const int64_t first = (b * segment.keys + j) * key_elements;
        changed_keys += any_changed(start.dk[s], end.dk[s], first, key_elements) ||
                        any_changed(start.dv[s], end.dv[s], first, key_elements);
      }
    }
    EXPECT_EQ(changed_keys, 0) << "dk or dv of keys that no row sees changed in segment " << s;
  }
}

/// Whether `text` contains one of `words`.
bool mentions_any(const std::string& text, std::initializer_list<const char*> words) {
  return std::any_of(words.begin(), words.end(),
                     [&](const char* word) { return text.find(word) != std::string::npos; });
}

class HopperBackward : public CudaKernelTest {
 protected:
  void SetUp() override {
    CudaKernelTest::SetUp();
    if (IsSkipped()) return;
    cudnn_ = std::make_unique<cuda::CudaBlockKernels>(kGpu, gpu_->stream(), KernelChoice::cudnn,
                                                      /*deterministic=*/false, KernelInputs{});
  }

  /// "" when the own backward runs (dtype, head_dim) here; else the reason, which must say something (the
  /// caller skips with it).
  static std::string unsupported(DType dtype, int64_t head_dim) {
    const std::string reason = cuda::hopper_backward_unsupported(kGpu, dtype, head_dim);
    EXPECT_TRUE(reason.empty() || reason.size() > 20) << "an unclear reason: '" << reason << "'";
    return reason;
  }

  /// The head dims, 64 and 128, that the own backward runs in `dtype` here (runnable_head_dims).
  static std::vector<int64_t> head_dims(DType dtype) {
    return runnable_head_dims({64, 128}, [dtype](int64_t head_dim) { return unsupported(dtype, head_dim); });
  }

  /// `check(dtype, head_dim)` for both dtypes and the head dims that the own backward runs here (head_dims).
  template <class Check>
  void for_each_dtype_and_head_dim(const Check& check) {
    for (DType dtype : {DType::bf16, DType::f16})
      for (const int64_t head_dim : head_dims(dtype)) {
        SCOPED_TRACE(dtype_name(dtype) + ", head_dim " + std::to_string(head_dim));
        check(dtype, head_dim);
      }
  }

  BackwardProblem backward_problem(const BlockCase& c, DType dtype, int64_t head_dim, float scale) {
    BackwardProblem problem{c, head_dim, scale, make_problem(c, dtype, head_dim, scale, generator_), {}, {}, {}};
    const int64_t B = c.batch, S = c.q_rows, H = c.heads;
    problem.out = host_f32(problem.reference.out, {B, S, H, head_dim});
    problem.lse = host_f32(problem.reference.lse, {B, H, S});
    problem.delta = HostTensor(DType::f32, {B, H, S});
    cpu_->softmax_delta(problem.out.view(), problem.reference.dout.view(), problem.delta.view());
    return problem;
  }

  /// Standard-normal starting values of the gradients of `c`: a kernel that writes instead of adding shows.
  Gradients random_gradients(const BlockCase& c, int64_t head_dim) {
    Gradients start{HostTensor(DType::f32, {c.batch, c.q_rows, c.heads, head_dim}), {}, {}};
    start.dq.randomize(generator_);
    for (const SegmentSpec& s : c.segments)
      for (std::vector<HostTensor>* gradient : {&start.dk, &start.dv}) {
        gradient->emplace_back(DType::f32, std::initializer_list<int64_t>{c.batch, s.keys, c.kv_heads, head_dim});
        gradient->back().randomize(generator_);
      }
    return start;
  }

  void run_own(const BackwardBlock& block) {
    ASSERT_EQ(cuda::hopper_backward_unsupported(block), "");
    cuda::hopper_backward(block, gpu_->stream());
  }

  /// The own backward of `c` against fp64 and against cuDNN's error on the same inputs and starting gradients.
  void check_case(const BlockCase& c, DType dtype, int64_t head_dim, float scale) {
    SCOPED_TRACE(c.name + ", scale " + std::to_string(scale));
    const BackwardProblem problem = backward_problem(c, dtype, head_dim, scale);
    const Gradients start = random_gradients(c, head_dim);
    DeviceBackward own(*gpu_, problem, start, /*with_out=*/false), cudnn(*gpu_, problem, start, /*with_out=*/true);
    run_own(own.block);
    cudnn_->backward(cudnn.block);
    const Gradients own_end = own.download();
    expect_untouched_where_nothing_is_seen(problem, start, own_end);
    const GradientErrors own_errors =
        expect_gradients_near_reference(problem, start, own_end, tolerance_of(dtype), "own");
    const GradientErrors cudnn_errors =
        expect_gradients_near_reference(problem, start, cudnn.download(), tolerance_of(dtype), "cuDNN");
    const auto expect_within_cudnn = [](const char* gradient, double own_error, double cudnn_error) {
      EXPECT_LE(own_error, 1.25 * cudnn_error + 1e-6)
          << "own " << gradient << " error " << own_error << ", cuDNN's " << cudnn_error;
    };
    expect_within_cudnn("dq", own_errors.dq, cudnn_errors.dq);
    expect_within_cudnn("dk", own_errors.dk, cudnn_errors.dk);
    expect_within_cudnn("dv", own_errors.dv, cudnn_errors.dv);
  }

  /// check_case for both dtypes and both head dims; softmax scale 1 / sqrt(head_dim) unless `scale` is given.
  void check_all(const BlockCase& c, float scale = 0.0f) {
    for_each_dtype_and_head_dim([&](DType dtype, int64_t head_dim) {
      check_case(c, dtype, head_dim, scale > 0 ? scale : default_scale(head_dim));
    });
  }

  std::unique_ptr<cuda::CudaBlockKernels> cudnn_;  // on gpu_'s stream, like the own launches
};

TEST_F(HopperBackward, NoMaskSegmentsWithAGap) {
  check_all({"no mask: q 200 at 1000 vs 130 at 0 and 257 at 1500", 200, 1000, {{130, 0}, {257, 1500}}, kNoMask});
}

TEST_F(HopperBackward, CausalAgainstSegmentsOutOfOrder) {
  // keys [500, 577) partly visible, [0, 128) all visible, [250, 300) all visible; rows 0..199 see
  // none of the first segment.
  check_all(
      {"causal: q 333 at 300 vs 77 at 500, 128 at 0, 50 at 250", 333, 300, {{77, 500}, {128, 0}, {50, 250}}, kCausal},
      0.3f);
}

TEST_F(HopperBackward, CausalDiagonalOfOneRowAndOneKey) {
  // A row that sees a single key has no softmax gradient (dq and dk are 0 but for round-off, which a bound relative
  // to the largest magnitude cannot judge), so the row also sees a second segment's five keys.
  check_all({"causal: q 1 at 5 vs 1 at 5 and 5 at 0", 1, 5, {{1, 5}, {5, 0}}, kCausal});
}

TEST_F(HopperBackward, WindowToTheLeft) {
  check_all({"window (100, 0): q 200 at 150 vs 300 at 0", 200, 150, {{300, 0}}, AttentionMask{100, 0}});
}

TEST_F(HopperBackward, TwoSidedWindow) {
  check_all({"window (70, 30): q 77 at 64 vs 257 at 0", 77, 64, {{257, 0}}, AttentionMask{70, 30}});
}

TEST_F(HopperBackward, WindowToTheRightOnly) {
  // Keys [250, 400) are seen by no row.
  check_all({"window (-1, 20): q 130 at 100 vs 200 at 0 and 100 at 300",
             130,
             100,
             {{200, 0}, {100, 300}},
             AttentionMask{-1, 20}});
}

TEST_F(HopperBackward, GroupedQueryAttentionAndBatches) {
  // dk and dv of a kv head gather every query head of its group.
  for (const int64_t kv_heads : {8, 2, 1})
    for (const int64_t batch : {1, 3})
      check_all({"GQA 8:" + std::to_string(kv_heads) + ", batch " + std::to_string(batch) +
                     ", causal q 150 at 100 vs 250 at 0",
                 150,
                 100,
                 {{250, 0}},
                 kCausal,
                 batch,
                 8,
                 kv_heads});
}

TEST_F(HopperBackward, GroupOfQueryHeadsInPartsAndWhole) {
  // A launch of few CTAs splits each kv head's group of query heads over several CTAs (backward_head_parts.hpp), which
  // add their dK and dV by atomics; the small blocks above split it into single heads. Here the key tiles are sized
  // so that the group of 4 goes in 2 parts of 2 heads, and whole, over batches and kv heads. The fp64 reference tests
  // every (row, key) pair for visibility, so few rows (at the keys' end: the last tiles' CTAs do the work, the others
  // find no row and end) and a narrow window keep it to seconds.
  const int multiprocessors = cuda::hopper::gpu_facts(kGpu.index).multiprocessors;
  const int64_t fill = cuda::hopper::kBackwardFillWaves * multiprocessors;
  constexpr int64_t kBatch = 4, kKvHeads = 8, kGroup = 4;
  for (const int parts : {2, 1}) {
    const int64_t key_tiles = (fill + kBatch * kKvHeads * parts - 1) / (kBatch * kKvHeads * parts);
    ASSERT_EQ(cuda::hopper::backward_head_parts(key_tiles * kKvHeads * kBatch, kGroup, multiprocessors, false), parts);
    const int64_t keys = key_tiles * cuda::hopper::kBackwardKeyTile - 5;  // the last tile not full
    constexpr int64_t kRows = 300;
    for (const int64_t head_dim : head_dims(DType::bf16)) {
      check_case({std::to_string(parts) + " parts: window (15, 0), q " + std::to_string(kRows) + " at " +
                      std::to_string(keys - kRows) + " vs " + std::to_string(keys) + " at 0",
                  kRows,
                  keys - kRows,
                  {{keys, 0}},
                  AttentionMask{15, 0},
                  kBatch,
                  kKvHeads * kGroup,
                  kKvHeads},
                 DType::bf16, head_dim, default_scale(head_dim));
    }
  }
}

TEST_F(HopperBackward, MoreSegmentsThanOneLaunchTakes) {
  // 12 segments, kMaxSegmentsPerLaunch (8) per launch: dq gathers the launches' contributions.
  BlockCase c{"12 segments of 1 to 89 keys, causal", 180, 700, {}, kCausal};
  for (int s = 0; s < 12; ++s) c.segments.push_back({1 + (s * 37) % 89, int64_t{60} * s + (s % 3) * 7});
  check_all(c);
  c.name = "12 segments of 1 to 89 keys, no mask";
  c.mask = kNoMask;
  check_all(c, 0.3f);
}

TEST_F(HopperBackward, LengthsThatAreNotMultiplesOfATile) {
  // One row or key short of a multiple of 64 or 128 and one past it, segment ends inside tiles.
  check_all(
      {"no mask: q 129 at 0 vs 63 at 0, 65 at 63 and 191 at 128", 129, 0, {{63, 0}, {65, 63}, {191, 128}}, kNoMask});
  check_all({"causal: q 193 at 127 vs 255 at 0 and 1 at 255", 193, 127, {{255, 0}, {1, 255}}, kCausal});
}

TEST_F(HopperBackward, SeveralQueryAndKeyTiles) {
  // Key tiles that gather many query tiles and query tiles that many key tiles reach: the diagonal and the window
  // edges cut tiles inside a long block; keys [1750, 1800) of the window case are seen by no row.
  check_all({"causal: q 600 at 900 vs 700 at 0 and 800 at 700", 600, 900, {{700, 0}, {800, 700}}, kCausal, 1});
  check_all({"window (1000, 50): q 500 at 1200 vs 900 at 200 and 700 at 1100",
             500,
             1200,
             {{900, 200}, {700, 1100}},
             AttentionMask{1000, 50},
             1});
}

TEST_F(HopperBackward, RowsAndKeysThatSeeNothing) {
  // Causal q [0, 64) vs keys [32, 96) and [100, 140): rows 0..31 see no key at all (lse -inf), keys 64..95 and the
  // whole second segment are seen by no row. check_case holds their gradients to the starting values, bit for bit.
  check_all({"causal: q 64 at 0 vs 64 at 32 and 40 at 100", 64, 0, {{64, 32}, {40, 100}}, kCausal});
}

TEST_F(HopperBackward, AccumulatesAcrossCalls) {
  // The queries against the first segment in one call, against the second in another, into the same gradients from
  // random starting values: together the start plus the reference over both segments, as a strategy's steps add up.
  const BlockCase c{"window (150, 10): q 160 at 400 vs 200 at 100 and 190 at 330",
                    160,
                    400,
                    {{200, 100}, {190, 330}},
                    AttentionMask{150, 10}};
  for_each_dtype_and_head_dim([&](DType dtype, int64_t head_dim) {
    const BackwardProblem problem = backward_problem(c, dtype, head_dim, default_scale(head_dim));
    const Gradients start = random_gradients(c, head_dim);
    DeviceBackward own(*gpu_, problem, start, /*with_out=*/false);
    BackwardBlock first = own.block, second = own.block;
    first.segments.resize(1);
    second.segments.erase(second.segments.begin());
    run_own(first);
    run_own(second);
    const Gradients end = own.download();
    expect_untouched_where_nothing_is_seen(problem, start, end);
    expect_gradients_near_reference(problem, start, end, tolerance_of(dtype), "own, in two calls");
  });
}

TEST_F(HopperBackward, DkAndDvAreTheSameBitsEveryRun) {
  // Without GQA (and wherever a CTA holds its kv head's whole group of query heads) each key's dk and dv are added by
  // one thread in a fixed order; dq gathers by the TMA unit's reduce-add in any order, so its two runs need only both
  // be accurate.
  for (const BlockCase& c :
       {BlockCase{
            "no mask: q 500 at 500 vs 300 at 0 and 700 at 300", 500, 500, {{300, 0}, {700, 300}}, kNoMask, 2, 8, 8},
        BlockCase{
            "causal: q 500 at 500 vs 300 at 0 and 700 at 300", 500, 500, {{300, 0}, {700, 300}}, kCausal, 2, 8, 8}}) {
    for (const int64_t head_dim : head_dims(DType::bf16)) {
      SCOPED_TRACE(c.name + ", head_dim " + std::to_string(head_dim));
      const BackwardProblem problem = backward_problem(c, DType::bf16, head_dim, default_scale(head_dim));
      const Gradients start = random_gradients(c, head_dim);
      DeviceBackward first(*gpu_, problem, start, /*with_out=*/false),
          second(*gpu_, problem, start, /*with_out=*/false);
      run_own(first.block);
      run_own(second.block);
      const Gradients first_end = first.download(), second_end = second.download();
      expect_gradients_near_reference(problem, start, first_end, tolerance_of(DType::bf16), "first run");
      expect_gradients_near_reference(problem, start, second_end, tolerance_of(DType::bf16), "second run");
      for (std::size_t s = 0; s < c.segments.size(); ++s) {
        expect_identical(first_end.dk[s], second_end.dk[s], "dk of segment " + std::to_string(s) + ", second run");
        expect_identical(first_end.dv[s], second_end.dv[s], "dv of segment " + std::to_string(s) + ", second run");
      }
    }
  }
}

TEST_F(HopperBackward, DeterministicKernelsGiveTheSameBitsEveryRun) {
  // CudaBlockKernels made deterministic: the own backward gathers dq key tile after key tile (its turn counters),
  // cuDNN runs its deterministic algorithm. Three runs of one kernels object give the same dq, dk and dv bits, all
  // accurate. Many key tiles per query tile, GQA 4:1, a window, and more segments than one own launch takes (each
  // launch counts its turns from zero).
  BlockCase many_segments{"12 segments of 1 to 89 keys, causal", 180, 700, {}, kCausal};
  for (int s = 0; s < 12; ++s) many_segments.segments.push_back({1 + (s * 37) % 89, int64_t{60} * s + (s % 3) * 7});
  const std::vector<BlockCase> cases = {
      {"causal: q 600 at 900 vs 700 at 0 and 800 at 700", 600, 900, {{700, 0}, {800, 700}}, kCausal, 1},
      {"no mask: q 300 at 0 vs 1000 at 0", 300, 0, {{1000, 0}}, kNoMask},
      {"window (300, 40): q 500 at 700 vs 900 at 200 and 300 at 1100",
       500,
       700,
       {{900, 200}, {300, 1100}},
       AttentionMask{300, 40}},
      many_segments};
  for (const KernelChoice kernel : {KernelChoice::own, KernelChoice::cudnn}) {
    cuda::CudaBlockKernels kernels(kGpu, gpu_->stream(), kernel, /*deterministic=*/true, KernelInputs{});
    for (const BlockCase& c : cases) {
      for (const int64_t head_dim : head_dims(DType::bf16)) {
        SCOPED_TRACE(kernel_choice_name(kernel) + ", " + c.name + ", head_dim " + std::to_string(head_dim));
        const BackwardProblem problem = backward_problem(c, DType::bf16, head_dim, default_scale(head_dim));
        const Gradients start = random_gradients(c, head_dim);
        std::vector<Gradients> ends;
        for (int run = 0; run < 3; ++run) {
          DeviceBackward device_run(*gpu_, problem, start, /*with_out=*/kernel == KernelChoice::cudnn);
          kernels.backward(device_run.block);
          ends.push_back(device_run.download());
          expect_gradients_near_reference(problem, start, ends.back(), tolerance_of(DType::bf16),
                                          "deterministic run " + std::to_string(run));
        }
        for (int run = 1; run < 3; ++run) {
          const std::string which = ", run " + std::to_string(run);
          expect_identical(ends[0].dq, ends[run].dq, "dq" + which);
          for (std::size_t s = 0; s < c.segments.size(); ++s) {
            expect_identical(ends[0].dk[s], ends[run].dk[s], "dk of segment " + std::to_string(s) + which);
            expect_identical(ends[0].dv[s], ends[run].dv[s], "dv of segment " + std::to_string(s) + which);
          }
        }
      }
    }
  }
}

TEST_F(HopperBackward, AutomaticKernelsTakeItWhereItRunsTheBlock) {
  // Under automatic the backward goes through the own kernel where it runs the calls' dtype and head dim (its
  // gradients stay in fp32, where cuDNN's are rounded to the input dtype after each call), and a block it refuses
  // goes to cuDNN.
  const std::string reason = unsupported(DType::bf16, 64);
  if (!reason.empty()) GTEST_SKIP() << reason;
  EXPECT_TRUE(cuda::own_backward_runs(kGpu, KernelChoice::automatic, {DType::bf16, 64}));
  EXPECT_FALSE(cuda::own_backward_runs(kGpu, KernelChoice::automatic, {DType::bf16, 96}));
  EXPECT_TRUE(cuda::own_backward_runs(kGpu, KernelChoice::own, {DType::bf16, 96}));  // plans refuse it first
  EXPECT_FALSE(cuda::own_backward_runs(kGpu, KernelChoice::cudnn, {DType::bf16, 64}));
  EXPECT_FALSE(make_block_kernels(kGpu, {DType::bf16, 64})->backward_reads_output());
  EXPECT_TRUE(make_block_kernels(kGpu, {DType::bf16, 96})->backward_reads_output());

  // Deterministic, so that each result can be held to the bits of the kernel it should have gone to: GQA's heads
  // add into dk and dv from several CTAs, by atomics in the default mode, whose order varies from run to run.
  const KernelInputs inputs{DType::bf16, 64};
  cuda::CudaBlockKernels automatic(kGpu, gpu_->stream(), KernelChoice::automatic, /*deterministic=*/true, inputs);
  cuda::CudaBlockKernels own(kGpu, gpu_->stream(), KernelChoice::own, /*deterministic=*/true, inputs);
  cuda::CudaBlockKernels cudnn(kGpu, gpu_->stream(), KernelChoice::cudnn, /*deterministic=*/true, inputs);
  const auto expect_same_gradients = [](const Gradients& expected, const Gradients& actual, const std::string& who) {
    expect_identical(expected.dq, actual.dq, "dq, " + who);
    expect_identical(expected.dk[0], actual.dk[0], "dk, " + who);
    expect_identical(expected.dv[0], actual.dv[0], "dv, " + who);
  };
  const BlockCase c{"q 32 at 0 vs 32 at 0", 32, 0, {{32, 0}}, kNoMask};
  const BackwardProblem problem = backward_problem(c, DType::bf16, 64, 0.125f);
  const Gradients start = random_gradients(c, 64);
  DeviceBackward by_own(*gpu_, problem, start, /*with_out=*/false), chosen(*gpu_, problem, start, /*with_out=*/false);
  own.backward(by_own.block);
  automatic.backward(chosen.block);
  expect_same_gradients(by_own.download(), chosen.download(), "automatic against the own kernel");

  // dq one float past a 16-byte boundary (31 rows, inside its buffer): the own kernel refuses the block, cuDNN
  // takes it (with out).
  DeviceBackward refused(*gpu_, problem, start, /*with_out=*/true), by_cudnn(*gpu_, problem, start, /*with_out=*/true);
  for (BackwardBlock* block : {&refused.block, &by_cudnn.block}) {
    for (TensorView* rows : {&block->q, &block->dout, &block->out, &block->dq}) rows->shape[1] = 31;
    for (TensorView* terms : {&block->lse, &block->delta}) terms->shape[2] = 31;
    block->dq.data = static_cast<float*>(block->dq.data) + 1;
  }
  ASSERT_NE(cuda::hopper_backward_unsupported(refused.block), "");
  automatic.backward(refused.block);
  cudnn.backward(by_cudnn.block);
  expect_same_gradients(by_cudnn.download(), refused.download(), "automatic against cuDNN on a block own refuses");
}

TEST_F(HopperBackward, BadBlocksAreRefusedWithTheReason) {
  const std::string reason = unsupported(DType::bf16, 64);
  if (!reason.empty()) GTEST_SKIP() << reason;
  const BlockCase c{"q 32 at 0 vs 32 at 0", 32, 0, {{32, 0}}, kNoMask};
  const BackwardProblem problem = backward_problem(c, DType::bf16, 64, 0.125f);
  DeviceBackward good(*gpu_, problem, random_gradients(c, 64), /*with_out=*/false);
  ASSERT_EQ(cuda::hopper_backward_unsupported(good.block), "");
  // The reason names the problem (one of `words`: the wording is the implementation's), try_hopper_backward returns
  // it, and hopper_backward throws instead of launching. Every bad view below stays inside its buffer, should a launch
  // happen anyway.
  const auto expect_refused = [&](const BackwardBlock& block, std::initializer_list<const char*> words) {
    const std::string why = cuda::hopper_backward_unsupported(block);
    EXPECT_TRUE(mentions_any(why, words)) << "expected '" << *words.begin() << "' or the like in: '" << why << "'";
    EXPECT_EQ(cuda::try_hopper_backward(block, gpu_->stream(), nullptr), why);
    try {
      cuda::hopper_backward(block, gpu_->stream());
      ADD_FAILURE() << "a block the own backward cannot run was launched ('" << why << "')";
    } catch (const Error& error) {
      EXPECT_TRUE(mentions_any(error.what(), words)) << error.what();
    }
  };
  BackwardBlock block = good.block;
  block.dq.dtype = DType::bf16;
  expect_refused(block, {"dq"});
  // dq one float past a 16-byte boundary (31 rows, inside its buffer): the TMA unit cannot add into it.
  block = good.block;
  for (TensorView* rows : {&block.q, &block.dout, &block.dq}) rows->shape[1] = 31;
  for (TensorView* terms : {&block.lse, &block.delta}) terms->shape[2] = 31;
  block.dq.data = static_cast<float*>(block.dq.data) + 1;
  expect_refused(block, {"aligned"});
  block = good.block;
  block.segments[0].dk.dtype = DType::bf16;
  expect_refused(block, {"dk"});
  // dk one float past a 16-byte boundary (31 keys, inside its buffer): the kernel adds its rows by
  // aligned pairs.
  block = good.block;
  KvGradSegment& keys = block.segments[0];
  for (TensorView* rows : {&keys.kv.k, &keys.kv.v, &keys.dk, &keys.dv}) rows->shape[1] = 31;
  keys.dk.data = static_cast<float*>(keys.dk.data) + 1;
  expect_refused(block, {"aligned"});
  block = good.block;
  block.delta.dtype = DType::bf16;
  expect_refused(block, {"delta"});
  block = good.block;
  block.q.strides = {block.q.stride(0), block.q.stride(1), 1, block.q.size(2)};  // each row's (H, D) transposed
  expect_refused(block, {"stride", "contiguous"});
  for (const float scale : {0.0f, std::numeric_limits<float>::quiet_NaN()}) {
    block = good.block;
    block.scale = scale;
    expect_refused(block, {"scale"});
  }
  EXPECT_TRUE(mentions_any(cuda::hopper_backward_unsupported(kGpu, DType::bf16, 96), {"96"}));
  EXPECT_TRUE(mentions_any(cuda::hopper_backward_unsupported(kGpu, DType::f32, 64), {"fp32"}));
  EXPECT_TRUE(mentions_any(cuda::hopper_backward_unsupported(Device::cpu(), DType::bf16, 64), {"CUDA", "GPU"}));
}

}  // namespace
}  // namespace spattn::test
