// `spattn plan`: its options (defaults, every option, what is refused and with which exit status)
// and what it prints (the schedule's tables, the comparison, their JSON, impossible schedules).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "cli_options.hpp"
#include "command_line_parsing.hpp"
#include "plan_command.hpp"
#include "schedule/cycle_schedule.hpp"
#include "spattn/distributed_attention.hpp"

namespace spattn::app {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

PlanOptions parse_plan(std::vector<std::string> options) {
  options.insert(options.begin(), "plan");
  const CliCommand command = parse(options);
  EXPECT_EQ(command.kind, CliCommand::Kind::plan);
  return command.plan;
}

std::string plan(const std::vector<std::string>& options) { return plan_text(parse_plan(options)); }

TEST(PlanOptionsTest, DefaultsAreAnLlmShapeOnTheNvswitchPreset) {
  const PlanOptions options = parse_plan({});
  EXPECT_EQ(options.algorithm, "hamilton");
  EXPECT_EQ(options.ranks, 0);
  EXPECT_EQ(options.nodes, 0);
  EXPECT_EQ(options.inner, 0);
  EXPECT_FALSE(options.causal);
  EXPECT_EQ(options.batch, 1);
  EXPECT_EQ(options.seq, 0);
  EXPECT_EQ(options.heads, 32);
  EXPECT_EQ(options.kv_heads, 32);
  EXPECT_EQ(options.head_dim, 128);
  EXPECT_EQ(options.dtype, DType::bf16);
  EXPECT_EQ(options.preset, "nvswitch");
  EXPECT_EQ(options.window_left, -1);
  EXPECT_EQ(options.window_right, -1);
  EXPECT_FALSE(options.tflops.has_value());
  EXPECT_FALSE(options.compare);
  EXPECT_FALSE(options.json);
  EXPECT_EQ(parse_plan({"--heads", "16"}).kv_heads, 16);
}

TEST(PlanOptionsTest, EveryOptionWorksInBothForms) {
  for (bool attached : {false, true}) {
    std::vector<std::string> arguments;
    const auto add = [&](const std::string& name, const std::string& value) {
      if (attached) {
        arguments.push_back(name + "=" + value);
      } else {
        arguments.push_back(name);
        arguments.push_back(value);
      }
    };
    add("--algo", "hamilton2");
    add("--ranks", "16");
    add("--nodes", "2");
    add("--inner", "4");
    add("--batch", "2");
    add("--seq", "4096");
    add("--heads", "16");
    add("--kv-heads", "4");
    add("--head-dim", "64");
    add("--dtype", "fp16");
    add("--preset", "mesh");
    add("--tflops", "312.5");
    add("--gpus-per-node", "4");
    add("--intra-bandwidth", "100");
    add("--inter-bandwidth", "12.5");
    add("--latency", "7");
    add("--window", "256,0");
    add("--network", "roce-100g");
    for (const char* flag : {"--causal", "--compare", "--json"}) arguments.push_back(flag);
    const PlanOptions options = parse_plan(arguments);
    EXPECT_EQ(options.algorithm, "hamilton2");
    EXPECT_EQ(options.ranks, 16);
    EXPECT_EQ(options.nodes, 2);
    EXPECT_EQ(options.inner, 4);
    EXPECT_EQ(options.batch, 2);
    EXPECT_EQ(options.seq, 4096);
    EXPECT_EQ(options.heads, 16);
    EXPECT_EQ(options.kv_heads, 4);
    EXPECT_EQ(options.head_dim, 64);
    EXPECT_EQ(options.dtype, DType::f16);
    EXPECT_EQ(options.preset, "mesh");
    EXPECT_DOUBLE_EQ(*options.tflops, 312.5);
    EXPECT_EQ(options.gpus_per_node, 4);
    EXPECT_DOUBLE_EQ(*options.intra_bandwidth, 100);
    EXPECT_DOUBLE_EQ(*options.inter_bandwidth, 12.5);
    EXPECT_DOUBLE_EQ(*options.latency, 7);
    EXPECT_EQ(options.network, "roce-100g");
    EXPECT_EQ(options.window_left, 256);
    EXPECT_EQ(options.window_right, 0);
    EXPECT_TRUE(options.causal);
    EXPECT_TRUE(options.compare);
    EXPECT_TRUE(options.json);
  }
}

TEST(PlanOptionsTest, BadValuesAreUsageErrors) {
  EXPECT_EQ(usage_error({"plan", "--algo", "ulysses"}),
            "spattn: --algo expects a rotation schedule: ring, zigzag, stripe, hamilton, hamilton2 (--compare shows every "
            "strategy), got 'ulysses'");
  EXPECT_EQ(usage_error({"plan", "--ranks", "0"}), "spattn: --ranks expects an integer >= 1, got '0'");
  EXPECT_THAT(usage_error({"plan", "--ranks", "eight"}), HasSubstr("got 'eight'"));
  EXPECT_THAT(usage_error({"plan", "--nodes", "0"}), HasSubstr("--nodes expects a positive integer, got '0'"));
  EXPECT_THAT(usage_error({"plan", "--inner", "-2"}), HasSubstr("--inner expects a positive integer"));
  EXPECT_EQ(usage_error({"plan", "--preset", "dgx"}),
            "spattn: --preset expects one of nvswitch, h100-nvswitch, h200-nvswitch, mesh, pcie, cpu, got 'dgx'");
  for (const char* rate : {"0", "-5", "inf", "fast"})
    EXPECT_THAT(usage_error({"plan", "--tflops", rate}), HasSubstr("--tflops expects a finite number > 0"));
  EXPECT_THAT(usage_error({"plan", "--dtype", "fp8"}), HasSubstr("--dtype:"));
  EXPECT_EQ(usage_error({"plan", "--network", "myrinet"}),
            "spattn: --network expects one of ib-400g, ib-200g, roce-100g, ethernet-25g, got 'myrinet'");
  EXPECT_EQ(usage_error({"plan", "--window", "-2,1"}), "spattn: --window -2,1: " + window_error(-2, 1));
  EXPECT_EQ(usage_error({"plan", "--scale", "1"}),
            "spattn: unknown option '--scale' for 'spattn plan'; see 'spattn help'");
  EXPECT_THAT(usage_error({"plan", "--ranks"}), HasSubstr("missing value after --ranks; usage: --ranks N"));
  EXPECT_THAT(usage_error({"plan", "--compare=yes"}), HasSubstr("--compare takes no value"));
  EXPECT_THAT(usage_error({"plan", "8"}), HasSubstr("unexpected argument '8' for 'spattn plan'"));
  EXPECT_EQ(parse({"plan", "--ranks", "8", "--help"}).kind, CliCommand::Kind::help);
  EXPECT_EQ(exit_status([] { parse({"plan", "--ranks", "x"}); }), 2);
  EXPECT_EQ(exit_status([] { parse({"plan", "--across", "ulysses"}); }), 2);
}

TEST(PlanOptionsTest, UsageTextDocumentsThePlanOptionsAndPresets) {
  const std::string text = usage_text();
  for (const char* option : {"options of 'spattn plan'", "--ranks N", "--nodes U", "--inner N1", "--preset NAME",
                             "--tflops R", "--compare", "(default 8192 per rank)", "ring, zigzag, stripe, hamilton, hamilton2",
                             "  nvswitch", "  mesh", "  pcie", "  cpu", "--gpus-per-node G", "--intra-bandwidth GBPS", "450 GB/s per rank"}) {
    EXPECT_THAT(text, HasSubstr(option));
  }
}

TEST(PlanCommandTest, HamiltonOnEightRanksPrintsItsTables) {
  const std::string text = plan({"--algo", "hamilton", "--ranks", "8", "--causal", "--seq", "65632"});
  EXPECT_THAT(text, AllOf(HasSubstr("hamilton on 8 ranks: 7 cycles"), HasSubstr("out mapping"), HasSubstr("in mapping"),
                          HasSubstr("rank 7, slots 0..6:"), HasSubstr("56 links within a node carry 1 slot"),
                          HasSubstr("in 7 messages")));
  for (const std::vector<int>& cycle : hamiltonian_decomposition(8)) {
    std::string line = ":";
    for (int rank : cycle) line += " " + std::to_string(rank);
    EXPECT_THAT(text, HasSubstr(line + "\n"));
  }
  // 65536 tokens cannot be cut into 2*8*7 chunks: the tables still print, the sizes do not.
  EXPECT_THAT(plan({"--ranks", "8", "--causal"}),
              AllOf(HasSubstr("7 cycles"), HasSubstr("sizes n/a: sequence length 65536 cannot be cut into 7 slots per chunk over 8 ranks")));
}

TEST(PlanCommandTest, UspAcrossTheSchemeGiven) {
  EXPECT_THAT(plan({"--compare", "--ranks", "10", "--inner", "2", "--across", "hamilton", "--heads", "32", "--kv-heads",
                    "8", "--seq", "81920"}),
              HasSubstr("Ulysses 2 x hamilton 5 (4 slots)"));
}

TEST(PlanCommandTest, RefusesWithRunsMessageExactlyWhenRunWould) {
  // The plan still prints (above), and `spattn plan` then exits 1 with run's own message.
  EXPECT_EQ(plan_refusal(parse_plan({"--ranks", "8", "--causal"})),
            "sequence length 65536 cannot be cut into 7 slots per chunk over 8 ranks in the zigzag layout: it must be "
            "a positive multiple of 2 x ranks x slots = 112; nearest valid lengths: 65520 or 65632");
  EXPECT_EQ(plan_refusal(parse_plan({"--ranks", "8", "--causal", "--seq", "65520"})), "");
  EXPECT_EQ(plan_refusal(parse_plan({"--algo", "zigzag", "--ranks", "3", "--seq", "9"})),
            "sequence length 9 cannot be split over 3 ranks in the zigzag layout: it must be a positive multiple of 2 "
            "x ranks = 6; nearest valid lengths: 6 or 12");
  // A comparison refuses nothing: each strategy says n/a for itself.
  EXPECT_EQ(plan_refusal(parse_plan({"--compare", "--ranks", "8", "--causal"})), "");
}

TEST(PlanCommandTest, JsonHasTheCyclesAndBothMappings) {
  const std::string json = plan({"--algo", "ring", "--ranks", "3", "--json", "--seq", "6"});
  EXPECT_THAT(json, AllOf(HasSubstr("\"cycles\": [[0, 1, 2]]"),
                          HasSubstr("\"out_mapping\": [[-1, 0, -1], [-1, -1, 0], [0, -1, -1]]"),
                          HasSubstr("\"in_mapping\": [[-1, -1, 0], [0, -1, -1], [-1, 0, -1]]"),
                          HasSubstr("\"sources\": [[[0], [2], [1]], [[1], [0], [2]], [[2], [1], [0]]]"),
                          HasSubstr("\"not_applicable\": null")));
  EXPECT_THAT(plan({"--algo", "hamilton2", "--ranks", "16", "--json"}),
              AllOf(HasSubstr("\"nodes\": 2"), HasSubstr("\"slots\": 8")));
}

TEST(PlanCommandTest, ImpossibleSchedulesAreRuntimeErrors) {
  for (const char* ranks : {"4", "6"}) {
    try {
      plan({"--algo", "hamilton", "--ranks", ranks});
      ADD_FAILURE() << "no Error at " << ranks << " ranks";
    } catch (const Error& error) {
      EXPECT_EQ(error.what(), "spattn: " + hamiltonian_decomposition_error(std::stoi(ranks)));
      EXPECT_EQ(exit_status([&] { plan({"--algo", "hamilton", "--ranks", ranks}); }), 1);
    }
  }
  // One node has no two-level scheme; more ranks than the nodes asked for hold.
  EXPECT_EQ(exit_status([] { plan({"--algo", "hamilton2", "--ranks", "8"}); }), 1);
  EXPECT_EQ(exit_status([] { plan({"--algo", "ring", "--ranks", "9", "--nodes", "1"}); }), 1);
  EXPECT_EQ(exit_status([] { plan({"--compare", "--ranks", "32", "--nodes", "2"}); }), 1);
  try {
    plan({"--compare", "--ranks", "32", "--nodes", "2", "--gpus-per-node", "4"});
    ADD_FAILURE() << "no Error for 32 ranks on 2 nodes of 4";
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(),
                 "spattn: 32 ranks do not fit on 2 nodes of 4 ranks (--nodes 2, --gpus-per-node 4): at most 8");
  }
}

TEST(PlanCommandTest, CompareListsEveryStrategyAndWhyOneDoesNotApply) {
  const std::string text = plan({"--compare", "--causal"});
  for (Algorithm algorithm : all_algorithms()) EXPECT_THAT(text, HasSubstr("\n" + algorithm_name(algorithm) + " "));
  EXPECT_THAT(text, AllOf(HasSubstr("model of 8 ranks on nvswitch"), HasSubstr("S = 65536 (8192 per rank)"),
                          HasSubstr("hamilton   n/a: sequence length 65536 cannot be cut into 7 slots per chunk over 8 ranks"),
                          HasSubstr("hamilton2  n/a: the two-level scheme needs at least 2 nodes")));
  // A sliding window: in the header and the JSON.
  const std::string windowed = plan({"--compare", "--causal", "--window", "4096,0", "--seq", "57344"});
  EXPECT_THAT(windowed, HasSubstr(", causal, window 4096,0"));
  EXPECT_THAT(plan({"--compare", "--causal", "--window", "4096,0", "--json"}), HasSubstr("\"window\": [4096, 0]"));
  const std::string json = plan({"--compare", "--nodes", "2", "--json"});
  EXPECT_THAT(json,
              AllOf(HasSubstr("\"ranks\": 16"), HasSubstr("\"strategies\": [{\"algo\": \"ring\""),
                    // usp's degree as `spattn run` chooses it: the largest dividing N, H and HK.
                    HasSubstr("\"algo\": \"usp\", \"not_applicable\": null, \"configuration\": \"Ulysses 16 x zigzag 1\""),
                    HasSubstr("\"forward_backward_s\": "), Not(HasSubstr("inf")), Not(HasSubstr("nan"))));
  // --tflops replaces the preset's kernel rate.
  EXPECT_THAT(plan({"--compare", "--tflops", "250"}), HasSubstr("kernel 250 TFLOP/s"));
  // One rank: every strategy is the same local attention, with nothing to send.
  const std::string one = plan({"--compare", "--ranks", "1"});
  EXPECT_THAT(one, HasSubstr("model of 1 rank on nvswitch (1 node of 8 ranks"));
  for (Algorithm algorithm : all_algorithms())
    EXPECT_THAT(one, HasSubstr("\n" + (algorithm_name(algorithm) + "          ").substr(0, 11) + "1      0 B"));
  EXPECT_THAT(plan({"--algo", "hamilton", "--ranks", "1"}), HasSubstr("hamilton on 1 rank: 1 cycle"));
  // --network replaces the preset's links across nodes; --inter-bandwidth still overrides it.
  EXPECT_THAT(plan({"--compare", "--preset", "h200-nvswitch", "--network", "roce-100g", "--ranks", "16"}),
              HasSubstr("model of 16 ranks on h200-nvswitch (2 nodes of 8 ranks; within a node a switch, 450 GB/s "
                        "per rank, 10 us per message; across nodes 12.5 GB/s per rank, 25 us per message; kernel 550"));
  EXPECT_THAT(plan({"--compare", "--network", "roce-100g", "--inter-bandwidth", "40", "--ranks", "16"}),
              HasSubstr("across nodes 40 GB/s per rank, 25 us per message"));
}

TEST(PlanCommandTest, ClustersOfAnySize) {
  // Ranks beyond one node fill more nodes of the preset's kind (16 Hamiltonian ranks used to be
  // refused on the one-node preset).
  EXPECT_THAT(plan({"--algo", "hamilton", "--ranks", "16", "--json"}),
              AllOf(HasSubstr("\"ranks\": 16"), HasSubstr("\"slots\": 15"),
                    HasSubstr("\"cluster\": {\"nodes\": 2, \"ranks_per_node\": 8")));
  EXPECT_THAT(plan({"--compare", "--ranks", "64", "--causal", "--json"}),
              AllOf(HasSubstr("\"nodes\": 8"), HasSubstr("\"ranks_per_node\": 8"), Not(HasSubstr("nan"))));
  const std::string sized = plan({"--compare", "--nodes", "4", "--gpus-per-node", "2", "--intra-bandwidth", "100",
                                  "--inter-bandwidth", "12.5", "--latency", "7", "--preset", "pcie"});
  EXPECT_THAT(sized, AllOf(HasSubstr("model of 8 ranks on pcie"), HasSubstr("4 nodes of 2 ranks"),
                           HasSubstr("a switch, 100 GB/s per rank, 7 us per message"),
                           HasSubstr("across nodes 12.5 GB/s per rank, 7 us per message"), HasSubstr("kernel 400")));
  EXPECT_THAT(plan({"--compare", "--preset", "cpu", "--ranks", "3"}), HasSubstr("kernel 0.05 TFLOP/s"));
  // Past 128 ranks the sources table (N^2 (N-1) numbers) is left out; the cycles and mappings stay.
  EXPECT_THAT(plan({"--algo", "hamilton", "--ranks", "129", "--json"}),
              AllOf(HasSubstr("\"ranks\": 129"), HasSubstr("\"slots\": 128"), HasSubstr("\"in_mapping\": [["),
                    HasSubstr("\"sources\": null"), HasSubstr("left out (printed up to 128 ranks)")));
  EXPECT_THAT(plan({"--algo", "hamilton", "--ranks", "128", "--json"}), HasSubstr("\"sources_left_out\": null"));
}

}  // namespace
}  // namespace spattn::app
