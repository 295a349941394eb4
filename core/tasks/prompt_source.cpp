// DataCursor (de)serialisation and the per-step dp sharding of a prompt stream.
#include "core/tasks/prompt_source.h"

#include <nlohmann/json.hpp>

#include <stdexcept>

#include "common/error.h"

namespace tandem::tasks {

void to_json(nlohmann::json& j, const DataCursor& cursor) {
  j = nlohmann::json{{"epoch", cursor.epoch}, {"position", cursor.position}, {"seed", cursor.seed}};
}

namespace {
int64_t cursor_field(const nlohmann::json& j, const char* key, bool allow_negative) {
  const auto it = j.find(key);
  if (it == j.end()) throw UserError(std::string("data cursor: missing field '") + key + "'");
  if (!it->is_number_integer())
    throw UserError(std::string("data cursor: field '") + key + "' must be an integer, got " + it->dump());
  const int64_t value = it->get<int64_t>();
  if (!allow_negative && value < 0)
    throw UserError(std::string("data cursor: field '") + key + "' must be >= 0, got " + std::to_string(value));
  return value;
}
}  // namespace

void from_json(const nlohmann::json& j, DataCursor& cursor) {
  if (!j.is_object()) throw UserError("data cursor: expected a JSON object, got " + j.dump());
  cursor.epoch = cursor_field(j, "epoch", false);
  cursor.position = cursor_field(j, "position", false);
  cursor.seed = cursor_field(j, "seed", true);  // run.seed may be any integer
}

DataCursor cursor_from_json(const nlohmann::json& j) {
  DataCursor cursor;
  from_json(j, cursor);
  return cursor;
}

std::vector<Prompt> next_step(PromptSource& source, int64_t prompts_per_step) {
  if (prompts_per_step < 1) throw std::invalid_argument("next_step: prompts_per_step must be >= 1");
  std::vector<Prompt> prompts;
  prompts.reserve(static_cast<size_t>(prompts_per_step));
  for (int64_t j = 0; j < prompts_per_step; ++j) prompts.push_back(source.next());
  return prompts;
}

std::vector<int64_t> shard_slots(int64_t prompts_per_step, int64_t rank, int64_t world) {
  if (prompts_per_step < 0 || world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("shard_slots: need prompts_per_step >= 0 and 0 <= rank < world (rank " +
                                std::to_string(rank) + ", world " + std::to_string(world) + ")");
  std::vector<int64_t> slots;
  for (int64_t j = rank; j < prompts_per_step; j += world) slots.push_back(j);
  return slots;
}

std::vector<ShardPrompt> next_step_shard(PromptSource& source, int64_t prompts_per_step, int64_t rank, int64_t world) {
  const std::vector<int64_t> slots = shard_slots(prompts_per_step, rank, world);  // validate first
  std::vector<Prompt> all = next_step(source, prompts_per_step);
  std::vector<ShardPrompt> mine;
  mine.reserve(slots.size());
  for (int64_t j : slots) mine.push_back({j, std::move(all[static_cast<size_t>(j)])});
  return mine;
}

}  // namespace tandem::tasks
