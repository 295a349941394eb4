// Recipe loading, strict validation, --set overrides and the resolved-recipe round trip.
#include <catch2/catch.hpp>

#include <fstream>

#include "core/config/config.h"
#include "core/rewards/image_rewards.h"
#include "core/rewards/reward_factory.h"
#include "core/tasks/task_factory.h"
#include "fixtures.h"

using namespace tandem;

namespace {
Config load(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return load_config_from_string(yaml, "test.yaml", overrides);
}
std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    load(yaml, overrides);
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}
}  // namespace

TEST_CASE("a recipe text with no keys gets every default", "[config]") {
  const Config c = load("");
  CHECK(c.run.seed == 1);
  CHECK(c.parallel.dp == -1);
  CHECK(c.tracks.ar.enabled);
  CHECK_FALSE(c.tracks.image.enabled);
  CHECK(c.tracks.ar.algo.kl.estimator == KlEstimator::kK3);
  CHECK(c.optim.betas == std::vector<double>{0.9, 0.999});
}

TEST_CASE("the embedded quickstart and shipped recipes load", "[config]") {
  CHECK(load_config("", {}).run.name == "quickstart");
  for (const char* name : {"quickstart", "image", "unified", "shared"})
    CHECK_NOTHROW(load_config(std::string(TANDEM_CONFIGS_DIR) + "/" + name + ".yaml", {}));
  // The real-model recipe names a model directory on the user's machine: pointed at a fixture of
  // the same family it loads, and config.json's architecture replaces the placeholders' absence.
  const std::string qwen = std::string(TANDEM_CONFIGS_DIR) + "/qwen2_0p5b.yaml";
  const Config c = load_config(
      qwen, {"tracks.ar.model.hf_dir=" + std::string(TANDEM_FIXTURES_DIR) + "/llama/tiny_qwen2",
             "tracks.ar.model.max_seq_len=64", "tracks.ar.rollout.max_new_tokens=16", "train.max_tokens_per_micro=64"});
  CHECK(c.tracks.ar.model.hidden_size == 48);
  CHECK_THROWS_WITH(load_config(qwen, {}), Catch::Contains("/models/Qwen2-0.5B-Instruct: no such directory"));
}

TEST_CASE("unknown keys name the path and the nearest valid key", "[config]") {
  CHECK(error_of("tracks: {ar: {rollout: {gruop_size: 4}}}") ==
        "tracks.ar.rollout.gruop_size: unknown key; did you mean group_size?");
  CHECK_THAT(error_of("optim: {learning_rate: 1}"), Catch::Contains("optim.learning_rate: unknown key"));
  CHECK_THAT(error_of("runn: {}"), Catch::Contains("runn: unknown key; did you mean run?"));
}

TEST_CASE("wrong types and ranges name the path, value and allowed range", "[config]") {
  CHECK(error_of("train: {micro_batch_size: 0}") == "train.micro_batch_size: 0 is out of range; must be >= 1");
  CHECK_THAT(error_of("train: {micro_batch_size: -1}"), Catch::Contains("train.micro_batch_size: -1"));
  CHECK_THAT(error_of("tracks: {ar: {rollout: {group_size: 1}}}"),
             Catch::Contains("group_size: 1 is out of range; must be >= 2"));
  CHECK_THAT(error_of("tracks: {ar: {algo: {clip_low: 1.5}}}"), Catch::Contains("must be (0.0, 1.0)"));
  CHECK_THAT(error_of("optim: {lr: .nan}"), Catch::Contains("optim.lr: must be a finite number"));
  CHECK_THAT(error_of("run: {steps: ten}"), Catch::Contains("run.steps: expected an integer, got 'ten'"));
  CHECK_THAT(error_of("run: {steps: 1.5}"), Catch::Contains("run.steps: expected an integer"));
  CHECK_THAT(error_of("run: {dtype: float16}"),
             Catch::Contains("'float16' is not one of float32|bfloat16|float64|bfloat16-pure"));
  CHECK_THAT(error_of("optim: {betas: [0.9]}"), Catch::Contains("optim.betas: expected exactly 2 numbers"));
  CHECK_THAT(error_of("run: 5"), Catch::Contains("run: expected a mapping"));
  CHECK_THAT(error_of("tracks: {ar: {rollout: {stop: 5}}}"), Catch::Contains("expected a list of strings"));
  CHECK_THAT(error_of("tracks: {ar: {warmstart: {warmup_steps: -1}}}"),
             Catch::Contains("tracks.ar.warmstart.warmup_steps: -1 is out of range"));
}

TEST_CASE("the warm-start's own schedule: constant by default, cosine / linear with warmup read", "[config]") {
  const Config d = load_config_from_string("tracks: {ar: {warmstart: {steps: 4}}}", "test", {});
  CHECK(d.tracks.ar.warmstart.schedule == LrSchedule::kConstant);
  CHECK(d.tracks.ar.warmstart.warmup_steps == 0);
  const Config c =
      load_config_from_string("tracks: {ar: {warmstart: {steps: 40, schedule: cosine, warmup_steps: 5}}}", "test", {});
  CHECK(c.tracks.ar.warmstart.schedule == LrSchedule::kCosine);
  CHECK(c.tracks.ar.warmstart.warmup_steps == 5);
  CHECK_THAT(error_of("tracks: {ar: {warmstart: {schedule: exponential}}}"),
             Catch::Contains("tracks.ar.warmstart.schedule: 'exponential' is not one of"));
}

TEST_CASE("cross-field rules", "[config]") {
  CHECK_THAT(error_of("tracks: {ar: {enabled: false}}"), Catch::Contains("no track is enabled"));
  CHECK_THAT(error_of("train: {num_mini_batches: 2}\ntracks: {ar: {algo: {old_logp: reuse}}}"),
             Catch::Contains("tracks.ar.algo.old_logp: reuse is exact only with train.num_mini_batches: 1"));
  CHECK_NOTHROW(load("tracks: {ar: {algo: {old_logp: reuse}}}"));
  CHECK_THAT(error_of("train: {max_tokens_per_micro: 16}"),
             Catch::Contains("train.max_tokens_per_micro: 16 is smaller than one full sequence"));
  CHECK_THAT(error_of("tracks: {ar: {max_tokens_per_micro: 8}}"), Catch::Contains("tracks.ar.max_tokens_per_micro"));
  CHECK_THAT(error_of("train: {micro_batch_size: null}"), Catch::Contains("no micro geometry"));
  CHECK_THAT(error_of("tracks: {ar: {model: {num_kv_heads: 3}}}"), Catch::Contains("num_kv_heads: 3 does not divide"));
  CHECK_THAT(error_of("tracks: {ar: {data: {task: jsonl}}}"), Catch::Contains("tracks.ar.data.path: required"));
  CHECK_THAT(error_of("tracks: {ar: {reward: {kind: command}}}"), Catch::Contains("tracks.ar.reward.command"));
}

TEST_CASE("per-track geometry falls back to train.* when null", "[config]") {
  const Config c = load("train: {micro_batch_size: 3}\ntracks: {image: {enabled: true, micro_batch_size: 8}}");
  const MicroGeometry ar = resolve_geometry(c.train, c.tracks.ar.micro_batch_size, c.tracks.ar.max_tokens_per_micro,
                                            c.tracks.ar.loss_agg_mode);
  const MicroGeometry im = resolve_geometry(c.train, c.tracks.image.micro_batch_size,
                                            c.tracks.image.max_tokens_per_micro, c.tracks.image.loss_agg_mode);
  CHECK(*ar.micro_batch_size == 3);
  CHECK(*im.micro_batch_size == 8);
  CHECK(ar.loss_agg_mode == LossAggMode::kTokenMean);
}

TEST_CASE("set overrides parse by the key's type and are validated", "[config]") {
  const Config c = load("", {"tracks.ar.rollout.group_size=4", "run.name=exp1", "tracks.ar.algo.adv_clip=2.5",
                             "tracks.ar.rollout.stop=[\"\\n\", \"#\"]", "optim.betas=[0.8, 0.99]",
                             "tracks.ar.loss_agg_mode=seq-mean-token-sum"});
  CHECK(c.tracks.ar.rollout.group_size == 4);
  CHECK(c.run.name == "exp1");
  CHECK(*c.tracks.ar.algo.adv_clip == 2.5);
  CHECK(c.tracks.ar.rollout.stop == std::vector<std::string>{"\n", "#"});
  CHECK(*c.tracks.ar.loss_agg_mode == LossAggMode::kSeqMeanTokenSum);
  CHECK(load("tracks: {ar: {algo: {adv_clip: 1}}}", {"tracks.ar.algo.adv_clip=null"}).tracks.ar.algo.adv_clip ==
        std::nullopt);
  CHECK(error_of("", {"tracks.ar.rollout.group_size=abc"}) ==
        "tracks.ar.rollout.group_size: expected an integer, got 'abc'");
  CHECK(error_of("", {"tracks.ar.rollout.gruop_size=4"}) ==
        "tracks.ar.rollout.gruop_size: unknown key; did you mean group_size?");
  CHECK_THAT(error_of("", {"run.steps"}), Catch::Contains("expected key.path=value"));
  CHECK_THAT(error_of("run: {steps: 3}", {"run.steps.x=3"}), Catch::Contains("run.steps is not a section"));
  CHECK_THAT(error_of("", {"run.steps.x=3"}), Catch::Contains("run.steps: expected an integer, got a mapping"));
  CHECK_THAT(error_of("", {"run..steps=3"}), Catch::Contains("empty component"));
}

TEST_CASE("malformed YAML reports line and column", "[config]") {
  CHECK_THAT(error_of("run:\n  name: [unclosed\n"),
             Catch::StartsWith("test.yaml:") && Catch::Contains("YAML parse error"));
  CHECK_THAT(error_of("run:\n  name: a\n   bad: b\n"), Catch::Matches("test\\.yaml:[0-9]+:[0-9]+: YAML parse error.*"));
}

TEST_CASE("the resolved recipe round-trips exactly", "[config]") {
  const Config c =
      load("", {"optim.lr=3.3e-5", "tracks.image.enabled=true", "run.name=007", "tracks.ar.algo.clip_c=null"});
  CHECK(c.run.name == "007");  // a string key takes the text as typed
  CHECK(error_of("", {"run.name=null"}) == "run.name: expected a string, got null");
  const std::string yaml = to_yaml(c);
  const Config back = load(yaml);
  CHECK(to_yaml(back) == yaml);
  CHECK(back.optim.lr == 3.3e-5);
  CHECK_FALSE(back.tracks.ar.algo.clip_c.has_value());
  CHECK(back.tracks.image.enabled);
}

TEST_CASE("data.chat_template_kwargs: scalars as JSON, round-tripped; lists, maps and reserved names refused",
          "[config]") {
  const Config c = load(
      "tracks: {ar: {data: {chat_template_kwargs: {enable_thinking: false, name: \"x\", n: 3, f: 0.5, q: \"false\", "
      "z: null}}}}");
  const auto& k = c.tracks.ar.data.chat_template_kwargs;
  CHECK(k == std::map<std::string, std::string>{{"enable_thinking", "false"},
                                                {"name", "\"x\""},
                                                {"n", "3"},
                                                {"f", "0.5"},
                                                {"q", "\"false\""},
                                                {"z", "null"}});
  const std::string yaml = to_yaml(c);
  CHECK(load(yaml).tracks.ar.data.chat_template_kwargs == k);
  CHECK(to_yaml(load(yaml)) == yaml);
  CHECK(load("", {"tracks.ar.data.chat_template_kwargs.enable_thinking=true"}).tracks.ar.data.chat_template_kwargs ==
        std::map<std::string, std::string>{{"enable_thinking", "true"}});
  CHECK(load("").tracks.ar.data.chat_template_kwargs.empty());
  CHECK(error_of("tracks: {ar: {data: {chat_template_kwargs: {tools: [1, 2]}}}}") ==
        "tracks.ar.data.chat_template_kwargs.tools: expected a scalar (true/false, a number or a string), got a list");
  CHECK_THAT(error_of("tracks: {ar: {data: {chat_template_kwargs: {messages: x}}}}"),
             Catch::Contains("tracks.ar.data.chat_template_kwargs.messages: 'messages' is set by tandem"));
  CHECK_THAT(error_of("tracks: {ar: {data: {chat_template_kwargs: [a]}}}"),
             Catch::Contains("tracks.ar.data.chat_template_kwargs: expected a mapping of names to values"));
}

TEST_CASE("layout is checked against the world size", "[config]") {
  const Config c = load("parallel: {dp: 3}");
  CHECK_THROWS_WITH(validate(c, 4), Catch::Contains("dp=3") && Catch::Contains("world size 4"));
  CHECK_NOTHROW(validate(c, 3));
  const Config tp = load("parallel: {tp: 3}");
  CHECK_THAT(([&] {
               try {
                 validate(tp, 3);
               } catch (const UserError& e) {
                 return std::string(e.what());
               }
               return std::string();
             })(),
             Catch::Contains("not divisible by parallel.tp=3"));
}

TEST_CASE("synthetic task digit range keys", "[config]") {
  CHECK(*load("tracks: {ar: {data: {max_digits: 4}}}").tracks.ar.data.max_digits == 4);
  CHECK_THAT(error_of("tracks: {ar: {data: {max_digits: 12}}}"), Catch::Contains("tracks.ar.data.max_digits: 12"));
  CHECK_THAT(error_of("tracks: {ar: {data: {min_digits: 5, max_digits: 3}}}"), Catch::Contains("must not exceed"));
  // A file beside a built-in task, or a digit count asked of a file, was dropped without a word.
  CHECK_THAT(error_of("tracks: {ar: {data: {task: add, path: d.jsonl}}}"),
             Catch::Contains("tracks.ar.data.path: is set, but tracks.ar.data.task is add") &&
                 Catch::Contains("set task: jsonl"));
  CHECK_THAT(error_of("tracks: {ar: {data: {task: jsonl, path: d.jsonl, min_digits: 3}}}"),
             Catch::Contains("tracks.ar.data.min_digits: min_digits / max_digits set the built-in tasks'"));
  CHECK_THAT(error_of("tracks: {ar: {data: {task: jsonl, path: d.jsonl}}}\neval: {every: 5, data: {min_digits: 4, "
                      "max_digits: 3}}"),
             Catch::Contains("eval.data.min_digits: must not exceed max_digits"));
  CHECK_NOTHROW(load_config_from_string("tracks: {ar: {data: {task: add, min_digits: 2}}}", "r", {}));
}

TEST_CASE("tracks.image.algo.cfg_grad: full by default, cond_only accepted, anything else named", "[config]") {
  CHECK(load("").tracks.image.algo.cfg_grad == CfgGrad::kFull);
  const Config c = load("tracks: {image: {algo: {cfg_grad: cond_only}}}");
  CHECK(c.tracks.image.algo.cfg_grad == CfgGrad::kCondOnly);
  CHECK(load(to_yaml(c)).tracks.image.algo.cfg_grad == CfgGrad::kCondOnly);  // the resolved recipe keeps it
  CHECK(load("", {"tracks.image.algo.cfg_grad=cond_only"}).tracks.image.algo.cfg_grad == CfgGrad::kCondOnly);
  CHECK(error_of("tracks: {image: {algo: {cfg_grad: detached}}}") ==
        "tracks.image.algo.cfg_grad: 'detached' is not one of full|cond_only");
}

TEST_CASE("a --config file with no keys is refused, naming the file; no --config runs the default", "[config]") {
  test::TempDir dir("tandem_config");
  for (const char* text : {"", "# all commented out\n#run: {steps: 3}\n", "\n   \n", "---\n# nothing\n"}) {
    INFO("recipe text '" << text << "'");
    std::ofstream(dir.file("r.yaml"), std::ios::trunc) << text;
    CHECK_THROWS_WITH(load_config(dir.file("r.yaml"), {"run.steps=3"}),
                      Catch::StartsWith(dir.file("r.yaml") + ": the recipe file has no keys"));
  }
  std::ofstream(dir.file("r.yaml"), std::ios::trunc) << "# one key is enough\nrun: {steps: 3}\n";
  CHECK(load_config(dir.file("r.yaml"), {}).run.steps == 3);  // control
  // Without --config the embedded quickstart recipe still applies.
  CHECK(to_yaml(load_config("", {})) == to_yaml(load_config(TANDEM_CONFIGS_DIR "/quickstart.yaml", {})));
}

TEST_CASE("hybrid-async keys: defaults off; refusals name both keys", "[config]") {
  const Config d = load("");
  CHECK_FALSE(d.train.overlap);
  CHECK(d.parallel.rollout_ranks == 0);
  CHECK(d.tracks.ar.rollout.max_staleness == 0);
  CHECK_FALSE(d.tracks.ar.algo.tis_cap);
  CHECK_THAT(error_of("train: {overlap: true}\ntracks: {ar: {algo: {old_logp: reuse}}}"),
             Catch::Contains("train.overlap") && Catch::Contains("tracks.ar.algo.old_logp: reuse"));
  CHECK_THAT(error_of("train: {overlap: true, num_mini_batches: 3}"),
             Catch::Contains("divisible by train.num_mini_batches"));
  CHECK_THAT(error_of("train: {overlap: true}\ntracks: {ar: {algo: {filter_zero_variance_groups: true}}}"),
             Catch::Contains("filter_zero_variance_groups"));
  CHECK_THAT(error_of("train: {overlap: true}\nparallel: {tp: 2}"), Catch::Contains("parallel.tp: 1"));
  CHECK_THAT(error_of("parallel: {rollout_ranks: 1}\ntracks: {ar: {rollout: {max_staleness: 2}}}"),
             Catch::Contains("tracks.ar.rollout.max_staleness") && Catch::Contains("tis_cap"));
  CHECK_THAT(error_of("tracks: {ar: {rollout: {max_staleness: 1}, algo: {tis_cap: 2.0}}}"),
             Catch::Contains("parallel.rollout_ranks > 0"));
  CHECK_THAT(error_of("parallel: {rollout_ranks: 1}\ntracks: {image: {enabled: true}}"),
             Catch::Contains("parallel.rollout_ranks") && Catch::Contains("tracks.image"));
  CHECK_THAT(error_of("tracks: {ar: {algo: {tis_cap: 0}}}"), Catch::Contains("tracks.ar.algo.tis_cap"));
  const Config ok =
      load("parallel: {rollout_ranks: 1}\ntracks: {ar: {rollout: {max_staleness: 2}, algo: {tis_cap: 2.0}}}");
  CHECK_THROWS_WITH(validate(ok, 1), Catch::Contains("leaves no train rank"));
  CHECK_NOTHROW(validate(ok, 3));
  CHECK(ok.tracks.ar.algo.tis_cap == 2.0);
}

namespace {

std::string fixture_dir(const std::string& name) { return std::string(TANDEM_FIXTURES_DIR) + "/llama/" + name; }

Config with_hf_dir(const std::string& name, const std::string& extra = "") {
  return load_config_from_string("tracks: {ar: {model: {hf_dir: " + fixture_dir(name) + extra + "}}}", "r.yaml", {});
}

}  // namespace

TEST_CASE("with hf_dir the model directory is the source of truth for the architecture", "[config][model_dir]") {
  // Nothing but the directory: every architecture key comes from its config.json.
  const Config c = with_hf_dir("tiny_qwen2");
  const ArModelConfig& m = c.tracks.ar.model;
  CHECK(m.vocab_size == 97);
  CHECK(m.hidden_size == 48);
  CHECK(m.num_heads == 6);
  CHECK(m.num_kv_heads == 2);
  CHECK(m.intermediate_size == 40);
  CHECK(m.max_seq_len == 64);
  CHECK(m.rope_theta == 1e6);
  CHECK(m.tie_embeddings);
  CHECK(m.qkv_bias);
  CHECK(m.head_dim == 8);
  // The tokenizer defaults to the directory's.
  CHECK(c.tracks.ar.tokenizer.kind == TokenizerKind::kHf);
  CHECK(c.tracks.ar.tokenizer.path == fixture_dir("tiny_qwen2"));
  // recipe.yaml records the resolved architecture.
  CHECK_THAT(to_yaml(c), Catch::Contains("hidden_size: 48") && Catch::Contains("vocab_size: 97"));
  // Llama 3.1 style: explicit head_dim, llama3 rope scaling, bos and eos ids.
  const ArModelConfig& l = with_hf_dir("tiny_llama31").tracks.ar.model;
  CHECK(l.head_dim == 12);
  CHECK(l.rope_scaling.type == RopeType::kLlama3);
  CHECK(l.rope_scaling.factor == 8.0);
  CHECK(l.rope_scaling.original_max_seq_len == 64);
  CHECK(l.bos_token_id == 1);
  CHECK(l.eos_token_ids == std::vector<int64_t>{2, 3});
}

TEST_CASE("a recipe model key that disagrees with config.json names both values", "[config][model_dir]") {
  CHECK_NOTHROW(with_hf_dir("tiny_qwen2", ", hidden_size: 48, num_layers: 2, tie_embeddings: true"));
  CHECK_THROWS_WITH(with_hf_dir("tiny_qwen2", ", hidden_size: 64"),
                    Catch::Contains("tracks.ar.model.hidden_size: the recipe says 64 but") &&
                        Catch::Contains("tiny_qwen2/config.json says 48"));
  CHECK_THROWS_WITH(with_hf_dir("tiny_qwen2", ", qkv_bias: false"),
                    Catch::Contains("qkv_bias: the recipe says false") && Catch::Contains("says true"));
  CHECK_THROWS_WITH(with_hf_dir("tiny_llama31", ", rope_scaling: {type: none}"),
                    Catch::Contains("rope_scaling.type: the recipe says none") && Catch::Contains("says llama3"));
  CHECK_THROWS_WITH(with_hf_dir("tiny_llama31", ", eos_token_ids: [2]"),
                    Catch::Contains("eos_token_ids: the recipe says [2]") && Catch::Contains("says [2, 3]"));
  // max_seq_len caps the context; it may not exceed the model's.
  CHECK(with_hf_dir("tiny_qwen2", ", max_seq_len: 32").tracks.ar.model.max_seq_len == 32);
  CHECK_THROWS_WITH(with_hf_dir("tiny_qwen2", ", max_seq_len: 128"),
                    Catch::Contains("max_seq_len: 128 exceeds the model's context of 64"));
  CHECK_THROWS_WITH(load_config_from_string("tracks: {ar: {model: {hf_dir: /nonexistent/model}}}", "r.yaml", {}),
                    Catch::Contains("/nonexistent/model: no such directory"));
}

TEST_CASE("a saved recipe loads without its model directory; the resolved one round-trips", "[config][model_dir]") {
  const Config c = with_hf_dir("tiny_qwen2", ", max_seq_len: 40");
  test::TempDir dir;
  std::string yaml = to_yaml(c);
  std::ofstream(dir.file("recipe.yaml")) << yaml;
  CHECK(to_yaml(load_saved_config(dir.file("recipe.yaml"))) == yaml);
  CHECK(to_yaml(load_config(dir.file("recipe.yaml"), {})) == yaml);  // resolving it again changes nothing
  // The directory gone (moved after the run started): a saved recipe still loads; a new run does not.
  const std::string moved = fixture_dir("tiny_qwen2");
  yaml.replace(yaml.find(moved), moved.size(), "/nonexistent/moved");
  std::ofstream(dir.file("moved.yaml")) << yaml;
  CHECK(load_saved_config(dir.file("moved.yaml")).tracks.ar.model.hidden_size == 48);
  CHECK_THROWS_WITH(load_config(dir.file("moved.yaml"), {}), Catch::Contains("/nonexistent/moved"));
}

TEST_CASE("the recipe accepts exactly the names the task and reward tables register", "[config][registry]") {
  // Each table owns its names (tasks/task_factory, rewards/reward_factory, rewards/image_rewards);
  // the factories build every one of them (test_rewards, test_jsonl_dataset, test_image_rewards),
  // and here the recipe takes every one and refuses a name outside them.
  for (const std::string& kind : rewards::ar_reward_names())
    CHECK_NOTHROW(load_config_from_string("tracks: {ar: {reward: {kind: " + kind + ", command: cat}}}", "r", {}));
  CHECK_THAT(error_of("tracks: {ar: {reward: {kind: exact_mach}}}"), Catch::Contains("did you mean exact_match?"));
  for (const std::string& kind : rewards::image_reward_names())
    CHECK_NOTHROW(load_config_from_string(
        "tracks: {ar: {enabled: false}, image: {enabled: true, reward: {kind: " + kind + ", command: cat}}}", "r", {}));
  CHECK_THAT(error_of("tracks: {ar: {enabled: false}, image: {enabled: true, reward: {kind: sharpness}}}"),
             Catch::Contains("unknown image reward 'sharpness'"));
  for (const std::string& task : tasks::ar_task_names())  // multiply asks in words: an hf tokenizer
    CHECK_NOTHROW(
        load_config_from_string("tracks: {ar: {data: {task: " + task + (task == "jsonl" ? ", path: d.jsonl" : "") +
                                    "}" + (task == "multiply" ? ", tokenizer: {kind: hf, path: t.json}" : "") + "}}",
                                "r", {}));
  CHECK_THAT(error_of("tracks: {ar: {data: {task: gsm8k}}}"),
             Catch::Contains("tracks.ar.data.task: 'gsm8k' is not one of"));
  for (const std::string& task : tasks::image_task_names())
    CHECK_NOTHROW(load_config_from_string(
        "tracks: {ar: {enabled: false}, image: {enabled: true, data: {task: " + task + "}}}", "r", {}));
}

TEST_CASE("rollout KV sizing keys: defaults 64 / 256; below 1 is refused by name", "[config]") {
  const Config d = load("");
  CHECK(d.tracks.ar.rollout.max_batch == 64);
  CHECK(d.tracks.ar.rollout.max_live == 256);
  const Config set = load("tracks: {ar: {rollout: {max_batch: 8, max_live: 32}}}");
  CHECK(set.tracks.ar.rollout.max_batch == 8);
  CHECK(set.tracks.ar.rollout.max_live == 32);
  CHECK_THAT(error_of("tracks: {ar: {rollout: {max_batch: 0}}}"), Catch::Contains("tracks.ar.rollout.max_batch"));
  CHECK_THAT(error_of("tracks: {ar: {rollout: {max_live: -1}}}"), Catch::Contains("tracks.ar.rollout.max_live"));
}
