// Read and write safetensors files and the Hugging Face weight directory layout (one
// model.safetensors, or shards plus model.safetensors.index.json), strictly validated.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tandem::models {

// The reference implementation refuses larger headers; so do we, before allocating anything.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
// Hugging Face's default shard size for save_pretrained ("5GB").
inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000;
inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";
inline constexpr const char* kHfConfigFile = "config.json";

struct SafetensorsTensorInfo {
  std::string dtype;                           // safetensors spelling: "F32", "BF16", "I64", "BOOL", ...
  torch::Dtype torch_dtype = torch::kFloat32;  // the matching LibTorch dtype
  std::vector<int64_t> shape;                  // [] for a scalar; may contain 0 (empty tensor)
  uint64_t begin = 0;                          // byte offsets relative to the start of the data buffer,
  uint64_t end = 0;                            // [begin, end)
};

struct SafetensorsInfo {
  std::string path;
  uint64_t header_bytes = 0;  // N, the JSON header length (including padding)
  uint64_t data_start = 0;    // 8 + N: file offset of the data buffer
  uint64_t data_bytes = 0;    // length of the data buffer (file size - data_start)
  std::map<std::string, SafetensorsTensorInfo> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__", empty when absent
};

// Parses and validates the header of `path` without reading tensor data. Every check of the
// format is done here (header length, JSON, dtypes, shapes, exact non-overlapping coverage of
// the data buffer), so a file that passes can be read without further bounds checks.
// Throws UserError naming the file and the problem.
SafetensorsInfo read_safetensors_header(const std::string& path);

// Loads every tensor of `path` as a contiguous CPU tensor that owns its memory.
std::map<std::string, torch::Tensor> load_safetensors(const std::string& path);

// Writes `tensors` (any device, any layout; copied to contiguous CPU one at a time) to
// `path + ".tmp"`, then renames it over `path`. Layout as the reference writer: tensors ordered
// by dtype alignment (largest first), then name; header JSON padded with spaces to a multiple
// of 8 bytes; "__metadata__" first (keys sorted) and omitted when empty. So for the same input
// the bytes equal the reference's, except that the reference orders metadata keys arbitrarily.
// Throws UserError on an unsupported dtype, a non-UTF-8 name, or an I/O failure.
void save_safetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Safetensors dtype name of a LibTorch dtype ("F32", ...); throws UserError when it has none.
std::string safetensors_dtype_name(torch::Dtype dtype);

// Loads a Hugging Face weight directory: `model.safetensors` when present (as transformers
// prefers it), otherwise `model.safetensors.index.json` and the shards it names. Every name in
// the index must be in its shard and every tensor of a shard must be in the index.
std::map<std::string, torch::Tensor> load_hf_weights(const std::string& dir);

// Every tensor of a Hugging Face weight directory with the file that holds it, from the headers
// alone (no tensor data is read): the same layout rules and index checks as load_hf_weights.
struct HfWeightEntry {
  std::string file;  // the safetensors file's path
  SafetensorsTensorInfo info;
};
std::map<std::string, HfWeightEntry> read_hf_weight_headers(const std::string& dir);

// True for a file name that holds or indexes a model's weights in any format transformers and its
// peers write (*.safetensors, *.bin, *.pt, *.pth, *.ckpt, *.h5, *.msgpack, *.gguf, *.onnx, and
// their *.index.json): what a directory of new weights must not carry over from the old.
bool is_hf_weight_file(const std::string& name);

// Writes a Hugging Face weight directory (created if missing): one `model.safetensors` when the
// tensors total at most `max_shard_bytes`, otherwise greedy shards in name order named
// `model-0000k-of-0000n.safetensors` (a tensor larger than the limit gets a shard of its own)
// plus the index with metadata.total_size. Each file is written atomically; files of an earlier
// save that the new layout does not use are removed afterwards. Shards carry the metadata
// {"format": "pt"}, which transformers requires.
void save_hf_weights(const std::string& dir, const std::map<std::string, torch::Tensor>& tensors,
                     uint64_t max_shard_bytes = kDefaultMaxShardBytes);

// `dir/config.json` parsed; UserError when missing, malformed or not a JSON object.
nlohmann::json read_hf_config(const std::string& dir);

}  // namespace tandem::models
