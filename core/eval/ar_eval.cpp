// See ar_eval.h. Every prompt's numbers are computed by one rank and summed with zeros from the
// others, so the reduction is exact and the result the same at any dp.
#include "core/eval/ar_eval.h"

#include <chrono>

#include "core/eval/pass_at_k.h"
#include "core/policies/text_policies.h"
#include "core/tasks/task_factory.h"
#include "models/llama/sampler.h"
#include "runtime/timing.h"

namespace tandem {

namespace {

// Evaluation seeds are apart from training's (which use run.seed itself) and fixed across steps.
constexpr uint64_t kEvalSeedSalt = 0xe7a1e7a1e7a1ULL;
constexpr int64_t kSyntheticEvalPrompts = 64;
// Prompts per generation batch, fixed so a prompt's batch does not depend on the dp size.
constexpr int64_t kEvalChunkPrompts = 8;

}  // namespace

ArEvaluator::ArEvaluator(const Config& config, const models::Tokenizer& tokenizer)
    : eval_(config.eval), seed_(config.run.seed), tokenizer_(tokenizer) {
  const ArTrackConfig& ar = config.tracks.ar;
  max_new_tokens_ = eval_.max_new_tokens.value_or(ar.rollout.max_new_tokens);
  top_p_ = ar.rollout.top_p;
  top_k_ = ar.rollout.top_k;
  max_batch_ = ar.rollout.max_batch;
  max_live_ = ar.rollout.max_live;
  stop_ = ar.rollout.stop;
  vocab_limit_ = std::min(tokenizer.vocab_size(), ar.model.vocab_size);
  share_prompts_ = ar.share_prompt == SharePrompt::kAuto;
  ArTrackConfig held_out = ar;
  held_out.data = eval_.data;
  format_ = std::make_unique<PromptFormat>(prompt_format_options(held_out), tokenizer);
  ArDataConfig data = eval_.data;
  data.shuffle = false;  // a dataset in file order, so max_prompts takes its first lines
  const auto source =
      tasks::make_ar_prompts(data, static_cast<int64_t>(static_cast<uint64_t>(config.run.seed) ^ kEvalSeedSalt));
  const std::optional<int64_t> size = source->size();
  const int64_t n = std::min(eval_.max_prompts.value_or(size.value_or(kSyntheticEvalPrompts)),
                             size.value_or(eval_.max_prompts.value_or(kSyntheticEvalPrompts)));
  for (int64_t i = 0; i < n; ++i) prompts_.push_back(source->next());
}

MetricMap ArEvaluator::evaluate(TextPolicy& policy, rewards::RewardFn& reward, parallel::Communicator& dp,
                                const EpisodeEval* episodes) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t k = eval_.samples_per_prompt, rank = dp.rank(), size = dp.size();
  const auto count = static_cast<int64_t>(prompts_.size());
  models::SamplingParams sp;
  sp.temperature = eval_.temperature;
  sp.top_p = top_p_;
  sp.top_k = top_k_;
  sp.max_new_tokens = max_new_tokens_;
  sp.max_batch = max_batch_;
  sp.max_live = max_live_;
  sp.vocab_limit = vocab_limit_;
  sp.stop_ids = format_->stop_ids();
  add_stop_strings(stop_, tokenizer_, sp);
  sp.share_prompts = share_prompts_;  // a prompt's k samples prefill it once
  if (episodes) add_stop_strings(episodes->stop, tokenizer_, sp);
  models::SamplingParams greedy = sp;
  greedy.temperature = 0;
  // Prompts go out in fixed chunks (chunk c to dp rank c % size), so every prompt is generated in
  // the same batch at any dp: the same numbers, not just the same distribution.
  std::vector<int64_t> mine;  // positions in prompts_ of this rank's prompts, in order
  std::vector<models::Generation> out, best;
  std::vector<double> scores;    // per sample of this rank: k sampled then greedy, per prompt
  std::vector<char> failures;    // beside scores: the episode failed (never correct, whatever correct_at)
  double turns = 0, failed = 0;  // this rank's sampled episodes: turns of those that did not fail, failures
  const int64_t evaluation = evaluations_++;
  for (int64_t first = rank * kEvalChunkPrompts; first < count; first += size * kEvalChunkPrompts) {
    std::vector<models::GenerationRequest> sampled, argmax;
    if (episodes) {
      // The chunk's episodes: k sampled and one greedy per prompt, the environment seeded per prompt.
      std::vector<env::EpisodeSpec> specs[2];
      for (int64_t p = first; p < std::min(count, first + kEvalChunkPrompts); ++p) {
        mine.push_back(p);
        const nlohmann::json row{{"prompt", prompts_[p].text}, {"answer", prompts_[p].answer}};
        const uint64_t env_seed =
            models::sample_seed(static_cast<uint64_t>(seed_) ^ kEvalSeedSalt, 0, prompts_[p].id, -1);
        const std::string id = "eval" + std::to_string(evaluation) + "-p" + std::to_string(prompts_[p].id) + "-";
        for (int64_t j = 0; j < k; ++j)
          specs[0].push_back({id + std::to_string(j), row, env_seed,
                              models::sample_seed(static_cast<uint64_t>(seed_) ^ kEvalSeedSalt, 0, prompts_[p].id, j)});
        specs[1].push_back({id + "greedy", row, env_seed, 0});
      }
      std::vector<env::EpisodeOutcome> outs[2];
      for (int g = 0; g < 2; ++g) {
        const auto gen = policy.turn_generator(
            g == 0 ? sp : greedy, std::min<int64_t>(episodes->slots, static_cast<int64_t>(specs[g].size())),
            episodes->limits.max_tokens);
        outs[g] = env::run_episodes(*episodes->env, *gen, *episodes->format, specs[g], episodes->limits,
                                    format_->stop_ids(), format_->system_prompt());
      }
      for (size_t i = 0; i < specs[1].size(); ++i) {
        for (int64_t j = 0; j < k; ++j) {
          const env::EpisodeOutcome& o = outs[0][i * static_cast<size_t>(k) + static_cast<size_t>(j)];
          const bool lost = o.end == env::EpisodeEnd::kFailed;
          scores.push_back(lost ? 0.0 : o.reward);
          failures.push_back(lost);
          turns += lost ? 0 : o.turns;
          failed += lost ? 1 : 0;
        }
        const bool lost = outs[1][i].end == env::EpisodeEnd::kFailed;
        scores.push_back(lost ? 0.0 : outs[1][i].reward);
        failures.push_back(lost);
      }
      continue;
    }
    for (int64_t p = first; p < std::min(count, first + kEvalChunkPrompts); ++p) {
      const std::vector<int64_t> ids = format_->encode(prompts_[p].text);
      if (static_cast<int64_t>(ids.size()) + max_new_tokens_ > policy.max_seq_len())
        throw UserError("eval.data: prompt " + std::to_string(prompts_[p].id) + " has " + std::to_string(ids.size()) +
                        " tokens; with " + std::to_string(max_new_tokens_) + " new tokens it exceeds max_seq_len " +
                        std::to_string(policy.max_seq_len()));
      mine.push_back(p);
      for (int64_t j = 0; j < k; ++j)
        sampled.push_back(
            {ids, models::sample_seed(static_cast<uint64_t>(seed_) ^ kEvalSeedSalt, 0, prompts_[p].id, j)});
      argmax.push_back({ids, 0});
    }
    for (auto& g : policy.generate(sampled, sp)) out.push_back(std::move(g));
    for (auto& g : policy.generate(argmax, greedy)) best.push_back(std::move(g));
  }
  if (!episodes) {
    std::vector<rewards::RewardInput> inputs;
    for (size_t i = 0; i < mine.size(); ++i) {
      const tasks::Prompt& p = prompts_[mine[i]];
      for (int64_t j = 0; j < k; ++j)
        inputs.push_back({p.text, tokenizer_.decode(out[i * k + j].tokens, true), p.answer, mine[i] * (k + 1) + j});
      inputs.push_back({p.text, tokenizer_.decode(best[i].tokens, true), p.answer, mine[i] * (k + 1) + k});
    }
    scores = reward.score(inputs);
    failures.assign(scores.size(), 0);
  }
  const auto is_correct = [&](size_t at) { return !failures[at] && scores[at] >= eval_.correct_at; };
  // Per prompt: the reward sum of its k samples, how many are correct, whether greedy is.
  torch::Tensor per = torch::zeros({count, 3}, torch::kFloat64);  // (P, 3)
  for (size_t i = 0; i < mine.size(); ++i) {
    double sum = 0, correct = 0;
    for (int64_t j = 0; j < k; ++j) {
      sum += scores[i * (k + 1) + j];
      correct += is_correct(i * (k + 1) + j) ? 1 : 0;
    }
    per[mine[i]][0] = sum, per[mine[i]][1] = correct;
    per[mine[i]][2] = is_correct(i * (k + 1) + k) ? 1.0 : 0.0;
  }
  dp.all_reduce(per);
  torch::Tensor episode_sums = torch::tensor({turns, failed}, torch::kFloat64);  // (2)
  if (episodes) dp.all_reduce(episode_sums);
  double reward_sum = 0, greedy_correct = 0;
  std::vector<int64_t> correct;
  for (int64_t p = 0; p < count; ++p) {
    reward_sum += per[p][0].item<double>();
    correct.push_back(static_cast<int64_t>(per[p][1].item<double>()));
    greedy_correct += per[p][2].item<double>();
  }
  MetricMap m;
  m["eval/reward_mean"] = count > 0 ? reward_sum / static_cast<double>(count * k) : 0;
  m["eval/pass@1_greedy"] = count > 0 ? greedy_correct / static_cast<double>(count) : 0;
  for (int64_t j = 1; j <= k; ++j) m["eval/pass@" + std::to_string(j)] = mean_pass_at_k(k, correct, j);
  m["eval/prompts"] = static_cast<double>(count);
  if (episodes && count > 0) {
    const double done = static_cast<double>(count * k) - episode_sums[1].item<double>();
    m["eval/turns_mean"] = done > 0 ? episode_sums[0].item<double>() / done : 0;  // as training's: failed left out
    m["eval/failed"] = episode_sums[1].item<double>();
    m["eval/success"] = m["eval/pass@1"];
  }
  m["eval/time_s"] = seconds_since(t0);
  return m;
}

}  // namespace tandem
