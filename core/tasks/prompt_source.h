// The AR track's prompt stream: one interface over the built-in generators and prompt datasets,
// a cursor that checkpoints the stream exactly, and the dp sharding of each step's prompts.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::tasks {

struct Prompt {
  std::string text;
  std::string answer;  // the reference the reward compares against ("" when the source has none)
  int64_t id = 0;      // stable within its source: the generator index, or the dataset record index
};

// Where a prompt stream stands. Restoring it makes the stream continue with exactly the prompts
// it would have produced next, so a resumed run sees the same data as an uninterrupted one.
struct DataCursor {
  int64_t epoch = 0;     // completed passes over a finite dataset (generators stay at 0)
  int64_t position = 0;  // prompts taken in the current epoch
  int64_t seed = 0;      // the stream's seed (shuffle order, generated prompts)

  bool operator==(const DataCursor& o) const { return epoch == o.epoch && position == o.position && seed == o.seed; }
  bool operator!=(const DataCursor& o) const { return !(*this == o); }
};

// {"epoch": e, "position": p, "seed": s}. nlohmann's ADL hooks, so `json j = cursor` works.
void to_json(nlohmann::json& j, const DataCursor& cursor);
// Throws UserError naming the field for a missing, non-integer or negative field (a damaged
// checkpoint is user input).
void from_json(const nlohmann::json& j, DataCursor& cursor);
DataCursor cursor_from_json(const nlohmann::json& j);

class PromptSource {
 public:
  virtual ~PromptSource() = default;

  // The next prompt of the global sequence; advances the cursor. Never runs out: finite datasets
  // start a new epoch.
  virtual Prompt next() = 0;

  virtual DataCursor cursor() const = 0;

  // Continue from `cursor` (seed included: the resumed stream keeps the original seed). Throws
  // UserError when the cursor cannot belong to this source (a position past the dataset's end).
  virtual void restore(const DataCursor& cursor) = 0;

  // Prompts per epoch; nullopt for infinite generators.
  virtual std::optional<int64_t> size() const = 0;

  // For logs and messages: "reverse_digits", "jsonl data/train.jsonl".
  virtual std::string describe() const = 0;
};

// The step's global prompt list: the next `prompts_per_step` prompts of the source. Every dp rank
// draws the whole list (cheap) so the sequence and the cursor never depend on the dp size.
std::vector<Prompt> next_step(PromptSource& source, int64_t prompts_per_step);

// The slots (positions in the step's global list) dp rank `rank` of `world` owns: j with
// j % world == rank. Disjoint across ranks and covering; throws std::invalid_argument for a bad
// rank or size.
std::vector<int64_t> shard_slots(int64_t prompts_per_step, int64_t rank, int64_t world);

struct ShardPrompt {
  int64_t slot = 0;  // position in the step's global list (a dp-independent group key)
  Prompt prompt;
};

// next_step() then this rank's slots of it.
std::vector<ShardPrompt> next_step_shard(PromptSource& source, int64_t prompts_per_step, int64_t rank, int64_t world);

}  // namespace tandem::tasks
