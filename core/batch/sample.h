// Rollout records: one finished sample of either track, with its group id and rewards. These
// are plain data so the schedule, collation and the sample exchange can move them freely.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace tandem {

enum class TrackKind { kAr, kImage };

// One AR sample: prompt + response tokens. Response-side vectors have one entry per response
// token (tokens.size() - prompt_len).
struct ArSample {
  std::vector<int64_t> tokens;  // prompt then response ids
  int64_t prompt_len = 0;
  std::vector<uint8_t> response_mask;  // 1: the token is an action the loss trains on
  std::vector<double> rollout_logp;    // the sampler's log-prob of each response token
  double reward = 0;
  double advantage = 0;
  int64_t group_id = 0;        // shared by the samples of one prompt
  int64_t index = 0;           // position in the step's rollout (stable id)
  int64_t policy_version = 0;  // optimizer updates (steps) the sampling weights had seen

  int64_t length() const { return static_cast<int64_t>(tokens.size()); }
  int64_t response_len() const { return length() - prompt_len; }
  int64_t action_tokens() const;  // response tokens with mask 1
};

// One image sample of the FlowGRPO SDE sampler.
struct ImageSample {
  torch::Tensor latents;                 // (S+1, C, H, W) the trajectory x_0 (noise) .. x_S (image)
  torch::Tensor log_probs;               // (S) each transition's Gaussian log-density (mean over elements)
  torch::Tensor sigmas;                  // (S+1) the noise level at each trajectory point
  std::vector<int64_t> train_timesteps;  // transitions the update trains (a fraction of the S)
  int64_t class_label = 0;
  double reward = 0;
  double advantage = 0;
  int64_t group_id = 0;
  int64_t index = 0;
};

// Throws std::invalid_argument when a sample's fields disagree in length.
void check_sample(const ArSample& s);

// Whether samples a and b share a prompt (same group, same prompt tokens): collate_packed lays
// such a prompt out once, and the schedule counts it once (cost_of).
bool same_prompt(const ArSample& a, const ArSample& b);

// Ids of turn samples: episode index * kTurnIdStride + turn (env.max_turns is at most 1000).
inline constexpr int64_t kTurnIdStride = 1024;
// One sample per model turn of a multi-turn episode (tracks.ar.env.samples: turn). A model turn is
// a maximal run of mask-1 response tokens (two turns always have mask-0 tokens between them: the
// closing template tokens and the observation); turn k's sample is the episode's tokens up to the end
// of that run, its prompt everything before the run (earlier turns and observations included), its
// mask and rollout log-probs the run's. Group, reward, advantage and policy version are the
// episode's; ids are index * kTurnIdStride + k. An episode with no trained token stays as it is
// (under id index * kTurnIdStride).
std::vector<ArSample> split_turns(const ArSample& episode);

}  // namespace tandem
