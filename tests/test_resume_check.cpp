// What resume compares between a checkpoint's recipe and the current one (resume_check.h's
// incompatible_change): the shapes its tensors depend on, not where the model directory lies.
#include <catch2/catch.hpp>

#include "core/trainer/resume_check.h"

using namespace tandem;

TEST_CASE("resume: a model directory may move with the tokenizer read from it; a tokenizer of its own may not",
          "[resume_check]") {
  Config saved, now;
  saved.tracks.ar.model.hf_dir = "/old/qwen";
  saved.tracks.ar.tokenizer.path = "/old/qwen";
  now.tracks.ar.model.hf_dir = "/new/qwen";
  now.tracks.ar.tokenizer.path = "/new/qwen";
  CHECK(incompatible_change(saved, now).empty());
  // The old tokenizer named with a new model directory: the same path, so the same tokenizer.
  now.tracks.ar.tokenizer.path = "/old/qwen";
  CHECK(incompatible_change(saved, now).empty());
  // Control: a tokenizer named apart from the model is compared by its path.
  saved.tracks.ar.tokenizer.path = "/tok/a";
  now.tracks.ar.tokenizer.path = "/tok/b";
  CHECK_THAT(incompatible_change(saved, now), Catch::Contains("tokenizer"));
}

TEST_CASE("resume: all-linear and the same layers listed by name, in any order, are the same adapters",
          "[resume_check]") {
  Config saved, now;
  saved.tracks.ar.lora.rank = now.tracks.ar.lora.rank = 8;
  saved.tracks.ar.lora.targets = {"all-linear"};
  now.tracks.ar.lora.targets = {"down_proj", "up_proj", "gate_proj", "o_proj", "v_proj", "k_proj", "q_proj"};
  CHECK(incompatible_change(saved, now).empty());
  CHECK(incompatible_change(now, saved).empty());
  saved.tracks.image.lora.targets = {"all-linear"};
  now.tracks.image.lora.targets = {"mlp_fc2", "mlp_fc1", "proj", "qkv"};
  CHECK(incompatible_change(saved, now).empty());
  // Control: a layer fewer is other adapters.
  now.tracks.ar.lora.targets.pop_back();
  CHECK_THAT(incompatible_change(saved, now), Catch::Contains("LoRA"));
  now.tracks.ar.lora.targets = {"all-linear"};
  now.tracks.image.lora.targets = {"qkv", "proj"};
  CHECK_THAT(incompatible_change(saved, now), Catch::Contains("LoRA"));
}
