#include "cli_options.hpp"
#include "command_line_parsing.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <iterator>
#include <vector>

#include "spattn/distributed_attention.hpp"

namespace spattn::app {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

RunOptions parse_run(std::vector<std::string> options) {
  options.insert(options.begin(), "run");
  const CliCommand command = parse(options);
  EXPECT_EQ(command.kind, CliCommand::Kind::run);
  return command.run;
}

TEST(CliOptionsTest, RunHasTheDocumentedDefaults) {
  const RunOptions options = parse_run({});
  EXPECT_EQ(options.algorithm, "zigzag");
  EXPECT_FALSE(options.causal);
  EXPECT_EQ(options.batch, 1);
  EXPECT_EQ(options.seq, 4096);
  EXPECT_EQ(options.heads, 8);
  EXPECT_EQ(options.kv_heads, 8);
  EXPECT_EQ(options.head_dim, 64);
  EXPECT_EQ(options.dtype, DType::f32);
  EXPECT_EQ(options.window_left, -1);
  EXPECT_EQ(options.window_right, -1);
  EXPECT_FALSE(options.scale.has_value());
  EXPECT_FALSE(options.backward);
  EXPECT_FALSE(options.check);
  EXPECT_FALSE(options.json);
  EXPECT_FALSE(options.profile_steps);
  EXPECT_EQ(options.inputs_dir, "");
  EXPECT_EQ(options.outputs_dir, "");
  EXPECT_EQ(options.iters, 1);
  EXPECT_EQ(options.warmup, 0);
  EXPECT_EQ(options.seed, kDefaultSeed);
  EXPECT_EQ(options.threads, 0);
  EXPECT_EQ(options.nodes, 1);
  EXPECT_EQ(options.inner, 0);
  EXPECT_EQ(options.kernel, KernelChoice::automatic);
  EXPECT_FALSE(options.deterministic);
}

TEST(CliOptionsTest, KvHeadsFollowsHeadsUnlessGiven) {
  EXPECT_EQ(parse_run({"--heads", "16"}).kv_heads, 16);
  const RunOptions grouped = parse_run({"--kv-heads", "2", "--heads", "16"});
  EXPECT_EQ(grouped.heads, 16);
  EXPECT_EQ(grouped.kv_heads, 2);
}

struct ValuedOption {
  std::string name;
  std::string value;
  std::function<void(const RunOptions&)> check;
};

TEST(CliOptionsTest, EveryValuedOptionWorksInBothForms) {
  const std::vector<ValuedOption> cases = {
      {"--algo", "ring", [](const RunOptions& o) { EXPECT_EQ(o.algorithm, "ring"); }},
      {"--batch", "3", [](const RunOptions& o) { EXPECT_EQ(o.batch, 3); }},
      {"--seq", "131072", [](const RunOptions& o) { EXPECT_EQ(o.seq, 131072); }},
      {"--heads", "32", [](const RunOptions& o) { EXPECT_EQ(o.heads, 32); }},
      {"--kv-heads", "4", [](const RunOptions& o) { EXPECT_EQ(o.kv_heads, 4); }},
      {"--head-dim", "128", [](const RunOptions& o) { EXPECT_EQ(o.head_dim, 128); }},
      {"--dtype", "bf16", [](const RunOptions& o) { EXPECT_EQ(o.dtype, DType::bf16); }},
      {"--dtype", "float16", [](const RunOptions& o) { EXPECT_EQ(o.dtype, DType::f16); }},
      {"--window", "128,0",
       [](const RunOptions& o) {
         EXPECT_EQ(o.window_left, 128);
         EXPECT_EQ(o.window_right, 0);
       }},
      {"--window", "-1,-1",
       [](const RunOptions& o) {
         EXPECT_EQ(o.window_left, -1);
         EXPECT_EQ(o.window_right, -1);
       }},
      {"--window", "0,-1",
       [](const RunOptions& o) {
         EXPECT_EQ(o.window_left, 0);
         EXPECT_EQ(o.window_right, -1);
       }},
      {"--scale", "0.125", [](const RunOptions& o) { EXPECT_EQ(o.scale, 0.125f); }},
      {"--scale", "1e-3", [](const RunOptions& o) { EXPECT_EQ(o.scale, 1e-3f); }},
      {"--inputs", "in/dir", [](const RunOptions& o) { EXPECT_EQ(o.inputs_dir, "in/dir"); }},
      {"--outputs", "/tmp/out", [](const RunOptions& o) { EXPECT_EQ(o.outputs_dir, "/tmp/out"); }},
      {"--timeline", "/tmp/timeline.csv", [](const RunOptions& o) { EXPECT_EQ(o.timeline_path, "/tmp/timeline.csv"); }},
      {"--iters", "20", [](const RunOptions& o) { EXPECT_EQ(o.iters, 20); }},
      {"--warmup", "0", [](const RunOptions& o) { EXPECT_EQ(o.warmup, 0); }},
      {"--warmup", "5", [](const RunOptions& o) { EXPECT_EQ(o.warmup, 5); }},
      {"--seed", "18446744073709551615", [](const RunOptions& o) { EXPECT_EQ(o.seed, UINT64_MAX); }},
      {"--seed", "0", [](const RunOptions& o) { EXPECT_EQ(o.seed, 0u); }},
      {"--threads", "6", [](const RunOptions& o) { EXPECT_EQ(o.threads, 6); }},
      {"--nodes", "2", [](const RunOptions& o) { EXPECT_EQ(o.nodes, 2); }},
      {"--inner", "4", [](const RunOptions& o) { EXPECT_EQ(o.inner, 4); }},
      {"--across", "hamilton", [](const RunOptions& o) { EXPECT_EQ(o.across, "hamilton"); }},
      {"--kernel", "auto", [](const RunOptions& o) { EXPECT_EQ(o.kernel, KernelChoice::automatic); }},
      {"--doc-lens", "4096,1,1023",
       [](const RunOptions& o) {
         EXPECT_EQ(o.document_lengths, (std::vector<int64_t>{4096, 1, 1023}));
         EXPECT_EQ(o.seq, 5120);
       }},
  };
  for (const ValuedOption& option : cases) {
    SCOPED_TRACE(option.name + " " + option.value);
    option.check(parse_run({option.name, option.value}));
    option.check(parse_run({option.name + "=" + option.value}));
  }
}

TEST(CliOptionsTest, FlagsSetTheirFields) {
  const RunOptions options =
      parse_run({"--causal", "--backward", "--check", "--json", "--profile-steps", "--deterministic"});
  EXPECT_TRUE(options.deterministic);
  EXPECT_TRUE(options.causal);
  EXPECT_TRUE(options.backward);
  EXPECT_TRUE(options.check);
  EXPECT_TRUE(options.json);
  EXPECT_TRUE(options.profile_steps);
}

TEST(CliOptionsTest, OptionsMixAndTheLastRepetitionWins) {
  const RunOptions options = parse_run({"--seq=1024", "--causal", "--algo", "ring", "--seq", "2048", "--heads=4"});
  EXPECT_EQ(options.seq, 2048);
  EXPECT_EQ(options.heads, 4);
  EXPECT_EQ(options.kv_heads, 4);
  EXPECT_EQ(options.algorithm, "ring");
  EXPECT_TRUE(options.causal);
}

TEST(CliOptionsTest, EveryListedAlgorithmIsAccepted) {
  for (Algorithm algorithm : all_algorithms()) {
    const std::string name = algorithm_name(algorithm);
    EXPECT_EQ(parse_run({"--algo", name.c_str()}).algorithm, name);
  }
}

TEST(CliOptionsTest, BadIntegersNameTheOptionAndValue) {
  EXPECT_EQ(usage_error({"run", "--seq", "12abc"}), "spattn: --seq expects a positive integer, got '12abc'");
  for (const char* value : {"", "0", "-4", "+12", " 12", "1.5", "0x10", "99999999999999999999"}) {
    SCOPED_TRACE(value);
    EXPECT_THAT(usage_error({"run", std::string("--seq=") + value}),
                HasSubstr(std::string("--seq expects a positive integer, got '") + value + "'"));
  }
  EXPECT_THAT(usage_error({"run", "--batch", "0"}), HasSubstr("--batch expects a positive integer, got '0'"));
  EXPECT_THAT(usage_error({"run", "--heads", "-1"}), HasSubstr("--heads expects a positive integer"));
  EXPECT_THAT(usage_error({"run", "--kv-heads", "0"}), HasSubstr("--kv-heads expects a positive integer"));
  EXPECT_THAT(usage_error({"run", "--head-dim", "x"}), HasSubstr("--head-dim expects a positive integer, got 'x'"));
  EXPECT_THAT(usage_error({"run", "--iters", "0"}), HasSubstr("--iters expects a positive integer, got '0'"));
  EXPECT_THAT(usage_error({"run", "--iters", "3000000000"}), HasSubstr("--iters expects a positive integer"));
  EXPECT_THAT(usage_error({"run", "--warmup", "-1"}), HasSubstr("--warmup expects an integer >= 0, got '-1'"));
  EXPECT_THAT(usage_error({"run", "--threads", "0"}), HasSubstr("--threads expects a positive integer, got '0'"));
  EXPECT_THAT(usage_error({"run", "--nodes", "0"}), HasSubstr("--nodes expects a positive integer, got '0'"));
  EXPECT_THAT(usage_error({"run", "--inner", "x"}), HasSubstr("--inner expects a positive integer, got 'x'"));
  EXPECT_THAT(usage_error({"run", "--across", "ulysses"}),
              HasSubstr("unknown --across 'ulysses'; allowed: ring, zigzag, hamilton"));
  EXPECT_THAT(usage_error({"run", "--seed", "-1"}), HasSubstr("--seed expects an integer >= 0, got '-1'"));
  EXPECT_THAT(usage_error({"run", "--seed", "18446744073709551616"}), HasSubstr("--seed expects"));
}

TEST(CliOptionsTest, BadWindowsScalesDtypesAndDirectories) {
  for (const char* window : {"128", "1,2,3", "a,b", ",", "1,", "", "1 ,2"}) {
    SCOPED_TRACE(window);
    EXPECT_THAT(usage_error({"run", std::string("--window=") + window}),
                AllOf(HasSubstr("--window expects L,R with each an integer >= -1"),
                      HasSubstr(std::string("got '") + window + "'")));
  }
  // Out of range, the library's rule speaks, in its words.
  EXPECT_EQ(usage_error({"run", "--window=-2,0"}), "spattn: --window -2,0: " + window_error(-2, 0));
  EXPECT_EQ(usage_error({"run", "--window", "0,-2"}), "spattn: --window 0,-2: " + window_error(0, -2));
  for (const char* scale : {"0", "-1", "inf", "nan", "abc", "1e99", "0.5x", ""}) {
    SCOPED_TRACE(scale);
    EXPECT_THAT(usage_error({"run", std::string("--scale=") + scale}),
                HasSubstr(std::string("--scale expects a finite number > 0, got '") + scale + "'"));
  }
  EXPECT_EQ(usage_error({"run", "--dtype", "fp8"}), "spattn: --dtype: unknown dtype 'fp8'; allowed: fp32, fp16, bf16");
  EXPECT_THAT(usage_error({"run", "--inputs="}), HasSubstr("--inputs expects a directory, got ''"));
  EXPECT_THAT(usage_error({"run", "--outputs="}), HasSubstr("--outputs expects a directory, got ''"));
}

TEST(CliOptionsTest, DocumentLengthsFillTheSequence) {
  EXPECT_EQ(parse_run({"--seq", "12", "--doc-lens", "5,7"}).seq, 12);
  EXPECT_EQ(parse_run({"--doc-lens", "5,7", "--seq=12"}).document_lengths, (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(usage_error({"run", "--seq", "4096", "--doc-lens", "5,7"}),
            "spattn: --doc-lens sums to 12 tokens but --seq is 4096; the documents fill the sequence (leave --seq "
            "out to take their sum)");
  for (const char* lengths : {"", "5,", ",5", "5,,7", "a", "5;7", "5, 7"}) {
    SCOPED_TRACE(lengths);
    EXPECT_THAT(usage_error({"run", std::string("--doc-lens=") + lengths}),
                AllOf(HasSubstr("--doc-lens expects document lengths L1,L2,... with each an integer >= 1"),
                      HasSubstr(std::string("got '") + lengths + "'")));
  }
  // In range as integers, the library's rule speaks, in its words.
  EXPECT_EQ(usage_error({"run", "--doc-lens", "5,0"}),
            "spattn: --doc-lens 5,0: " + document_lengths_error({5, 0}));
  EXPECT_EQ(usage_error({"run", "--doc-lens", "-3"}),
            "spattn: --doc-lens -3: " + document_lengths_error({-3}));
}

TEST(CliOptionsTest, DocumentSplitNeedsDocuments) {
  EXPECT_EQ(parse_run({"--doc-lens", "5,7"}).document_split, DocumentSplit::per_document);
  EXPECT_EQ(parse_run({"--doc-lens", "5,7", "--doc-split", "whole_sequence"}).document_split,
            DocumentSplit::whole_sequence);
  EXPECT_EQ(usage_error({"run", "--doc-split", "whole_sequence"}),
            "spattn: --doc-split whole_sequence needs packed documents: give their lengths with --doc-lens");
  EXPECT_THAT(usage_error({"run", "--doc-lens", "5,7", "--doc-split", "llama3"}),
              AllOf(HasSubstr("--doc-split"), HasSubstr("'llama3'"), HasSubstr("per_document, whole_sequence")));
}

TEST(CliOptionsTest, KernelChoosesTheCudaKernels) {
  EXPECT_EQ(parse_run({"--device", "cuda", "--kernel", "own"}).kernel, KernelChoice::own);
  EXPECT_EQ(parse_run({"--kernel=cudnn", "--device=cuda"}).kernel, KernelChoice::cudnn);
  EXPECT_EQ(usage_error({"run", "--kernel", "fast"}),
            "spattn: --kernel: unknown kernel 'fast'; allowed: auto, own, cudnn");
  EXPECT_EQ(usage_error({"run", "--kernel", "own"}),
            "spattn: --kernel own with --device cpu: kernel own names CUDA kernels (spattn's own Hopper kernels) "
            "and cannot run on cpu; allowed there: auto");
  EXPECT_THAT(usage_error({"run", "--device", "cpu", "--kernel", "cudnn"}),
              HasSubstr("--kernel cudnn with --device cpu: kernel cudnn names CUDA kernels"));
  EXPECT_EQ(exit_status([] { parse({"run", "--kernel", "own"}); }), 2);
}

TEST(CliOptionsTest, CudaDefaultsToBf16AndRefusesFp32WithTheLibrarysRule) {
  EXPECT_EQ(parse_run({"--device", "cuda"}).dtype, DType::bf16);
  EXPECT_EQ(parse_run({"--device", "cuda", "--dtype", "fp16"}).dtype, DType::f16);
  EXPECT_EQ(usage_error({"run", "--device", "cuda", "--dtype", "fp32"}),
            "spattn: --device cuda with --dtype fp32: " + input_dtype_unsupported(DeviceKind::cuda, DType::f32));
}

TEST(CliOptionsTest, UnknownAlgorithmListsTheAllowedOnes) {
  EXPECT_EQ(usage_error({"run", "--algo", "spiral"}),
            "spattn: unknown --algo 'spiral'; allowed: ring, zigzag, stripe, ulysses, hamilton, hamilton2, allgather, usp, auto");
  EXPECT_THAT(usage_error({"run", "--algo="}), HasSubstr("unknown --algo ''"));
}

TEST(CliOptionsTest, UnknownOptionsAndArguments) {
  EXPECT_EQ(usage_error({"run", "--foo"}), "spattn: unknown option '--foo' for 'spattn run'; see 'spattn help'");
  EXPECT_THAT(usage_error({"run", "--foo=1"}), HasSubstr("unknown option '--foo' for 'spattn run'"));
  EXPECT_THAT(usage_error({"run", "-s"}), HasSubstr("unknown option '-s'"));
  EXPECT_THAT(usage_error({"run", "extra"}), HasSubstr("unexpected argument 'extra' for 'spattn run'"));
  EXPECT_THAT(usage_error({"run", "--seq", "64", "128"}), HasSubstr("unexpected argument '128'"));
}

TEST(CliOptionsTest, MissingValuesAndValuesGivenToFlags) {
  EXPECT_EQ(usage_error({"run", "--seq"}), "spattn: missing value after --seq; usage: --seq S");
  EXPECT_THAT(usage_error({"run", "--inputs", "--causal"}), HasSubstr("missing value after --inputs; usage: --inputs DIR"));
  EXPECT_THAT(usage_error({"run", "--window"}), HasSubstr("usage: --window L,R"));
  EXPECT_EQ(usage_error({"run", "--causal=1"}), "spattn: --causal takes no value, got '--causal=1'");
  // A value that starts with a single '-' is still a value.
  EXPECT_EQ(parse_run({"--window", "-1,0"}).window_left, -1);
  EXPECT_EQ(parse_run({"--inputs=--odd-name"}).inputs_dir, "--odd-name");
}

TEST(CliOptionsTest, CommandsInfoAndHelp) {
  EXPECT_EQ(parse({"info"}).kind, CliCommand::Kind::info);
  EXPECT_FALSE(parse({"info"}).json);
  EXPECT_TRUE(parse({"info", "--json"}).json);
  EXPECT_THAT(usage_error({"info", "--seq", "4"}), HasSubstr("unknown option '--seq' for 'spattn info'"));
  EXPECT_THAT(usage_error({"info", "--json=1"}), HasSubstr("'--json=1' for 'spattn info'"));
  for (const std::vector<std::string>& arguments : std::vector<std::vector<std::string>>{
           {}, {"help"}, {"--help"}, {"-h"}, {"run", "--help"}, {"run", "--seq", "abc", "--help"}, {"info", "--help"}}) {
    EXPECT_EQ(parse(arguments).kind, CliCommand::Kind::help);
  }
  EXPECT_THAT(usage_error({"help", "run"}), HasSubstr("'spattn help' takes no arguments, got 'run'"));
  EXPECT_EQ(usage_error({"frobnicate"}),
            "spattn: unknown command 'frobnicate'; allowed: run, info, plan, help; see 'spattn help'");
  EXPECT_THAT(usage_error({"--seq"}), HasSubstr("unknown command '--seq'"));
}

TEST(CliOptionsTest, UsageErrorsAreDistinctFromRuntimeErrors) {
  EXPECT_EQ(exit_status([] { parse({"run", "--seq", "x"}); }), 2);
  EXPECT_EQ(exit_status([] { parse({"run", "--dtype", "fp8"}); }), 2);
  EXPECT_EQ(exit_status([] { parse({"nope"}); }), 2);
  EXPECT_EQ(exit_status([] { parse_dtype("fp8"); }), 1);
  EXPECT_EQ(exit_status([] { parse({"run", "--causal"}); }), 0);
}

TEST(CliOptionsTest, UsageTextDocumentsEveryOption) {
  const std::string text = usage_text();
  for (const char* option :
       {"--algo NAME", "--causal", "--batch B", "--seq S", "--heads H", "--kv-heads HK", "--head-dim D", "--dtype T",
        "--window L,R", "--scale X", "--backward", "--check", "--inputs DIR", "--outputs DIR", "--iters N",
        "--warmup N", "--seed N", "--json", "--profile-steps", "--timeline FILE", "--threads N", "--nodes U", "--inner N1", "--across NAME", "--kernel NAME", "--deterministic", "--help"}) {
    EXPECT_THAT(text, HasSubstr(option));
  }
  EXPECT_THAT(text, AllOf(HasSubstr("usage: spattn <command> [options]"), HasSubstr("ring, zigzag, stripe, ulysses, hamilton, hamilton2, allgather, usp, or auto (the fastest in spattn "
                                    "plan --compare's model of this shape on --preset) (default zigzag)"),
                          HasSubstr("(default 4096)"), HasSubstr("(default 1234)"), HasSubstr("options of 'spattn info'")));
}

}  // namespace
}  // namespace spattn::app
