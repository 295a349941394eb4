// The Hugging Face model directory: model.safetensors or an index of shards, written and read
// whole, and config.json. Shard names from an index must stay inside the directory.
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/regular_file.h"
#include "models/safetensors.h"
#include "models/safetensors_detail.h"

namespace tandem::models {

using detail::fail;
using detail::parse_strict_json;
using detail::printable;
using detail::write_text_atomically;

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_text(const std::string& path) {
  require_regular_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string shard_name(size_t k, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", k, n);
  return buf;
}

// "model-DDDDD-of-DDDDD.safetensors": the names save_hf_weights owns in a directory.
bool is_shard_name(const std::string& f) {
  const std::string pat = "model-#####-of-#####.safetensors";
  if (f.size() != pat.size()) return false;
  for (size_t i = 0; i < f.size(); ++i)
    if (pat[i] == '#' ? !std::isdigit(static_cast<unsigned char>(f[i])) : f[i] != pat[i]) return false;
  return true;
}

// A shard named by an index must stay inside the model directory.
bool is_safe_relative(const std::string& f) {
  const fs::path p(f);
  if (f.empty() || p.is_absolute()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

// The index's weight_map as shard file -> the tensor names it lists, each file inside the directory.
std::map<std::string, std::vector<std::string>> read_weight_map(const std::string& index_path) {
  const std::string text = read_text(index_path);
  const json index = parse_strict_json(text.data(), text.data() + text.size(), index_path, -1);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    fail(index_path, "missing \"weight_map\" object");
  std::map<std::string, std::vector<std::string>> names_by_shard;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string() || !is_safe_relative(file.get<std::string>()))
      fail(index_path, "weight_map entry of '" + printable(name) + "' is not a file name inside the directory");
    names_by_shard[file.get<std::string>()].push_back(name);
  }
  return names_by_shard;
}

}  // namespace

std::map<std::string, torch::Tensor> load_hf_weights(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;  // filesystem queries report through UserError, not filesystem_error
  if (!fs::is_directory(d, ec)) throw UserError(dir + ": weights directory does not exist");
  if (fs::exists(d / kHfWeightsFile, ec)) return load_safetensors((d / kHfWeightsFile).string());
  const std::string index_path = (d / kHfIndexFile).string();
  if (!fs::exists(index_path, ec))
    throw UserError(dir + ": no " + std::string(kHfWeightsFile) + " or " + kHfIndexFile + " in the weights directory");

  const std::map<std::string, std::vector<std::string>> names_by_shard = read_weight_map(index_path);

  std::map<std::string, torch::Tensor> out;
  for (const auto& [file, names] : names_by_shard) {
    const std::string shard_path = (d / file).string();
    if (!fs::exists(shard_path, ec)) fail(index_path, "shard " + printable(file) + " is missing");
    std::map<std::string, torch::Tensor> shard = load_safetensors(shard_path);
    for (const std::string& name : names) {
      auto it = shard.find(name);
      if (it == shard.end())
        fail(shard_path,
             "tensor '" + printable(name) + "' is listed for this shard in " + kHfIndexFile + " but is not in it");
      out.emplace(name, std::move(it->second));
      shard.erase(it);
    }
    // An unlisted tensor means the index and the shards come from different saves.
    if (!shard.empty())
      fail(shard_path, std::to_string(shard.size()) + " tensor(s) not listed in " + kHfIndexFile + ", e.g. '" +
                           printable(shard.begin()->first) + "'");
  }
  return out;
}

bool is_hf_weight_file(const std::string& name) {
  std::string base = name;
  if (const std::string index = ".index.json";
      base.size() > index.size() && base.compare(base.size() - index.size(), index.size(), index) == 0)
    base.resize(base.size() - index.size());
  const std::string ext = fs::path(base).extension().string();
  for (const char* e : {".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx"})
    if (ext == e) return true;
  return false;
}

std::map<std::string, HfWeightEntry> read_hf_weight_headers(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::is_directory(d, ec)) throw UserError(dir + ": weights directory does not exist");
  std::map<std::string, HfWeightEntry> out;
  auto add_file = [&](const std::string& path) {
    const SafetensorsInfo info = read_safetensors_header(path);
    for (const auto& [name, t] : info.tensors) out[name] = {path, t};
    return info;
  };
  if (fs::exists(d / kHfWeightsFile, ec)) {
    add_file((d / kHfWeightsFile).string());
    return out;
  }
  const std::string index_path = (d / kHfIndexFile).string();
  if (!fs::exists(index_path, ec))
    throw UserError(dir + ": no " + std::string(kHfWeightsFile) + " or " + kHfIndexFile + " in the weights directory");
  const std::map<std::string, std::vector<std::string>> names_by_shard = read_weight_map(index_path);
  for (const auto& [file, names] : names_by_shard) {
    const std::string shard_path = (d / file).string();
    if (!fs::exists(shard_path, ec)) fail(index_path, "shard " + printable(file) + " is missing");
    const SafetensorsInfo info = add_file(shard_path);
    for (const std::string& name : names)
      if (!info.tensors.count(name))
        fail(shard_path,
             "tensor '" + printable(name) + "' is listed for this shard in " + kHfIndexFile + " but is not in it");
    if (info.tensors.size() != names.size())
      fail(shard_path, "holds tensor(s) not listed for it in " + std::string(kHfIndexFile));
  }
  return out;
}

void save_hf_weights(const std::string& dir, const std::map<std::string, torch::Tensor>& tensors,
                     uint64_t max_shard_bytes) {
  if (max_shard_bytes == 0) throw UserError(dir + ": max_shard_bytes must be positive");
  const fs::path d(dir);
  std::error_code ec;
  fs::create_directories(d, ec);
  if (ec) throw UserError(dir + ": cannot create weights directory: " + ec.message());

  // Reject what save_safetensors would reject before any shard is written.
  for (const auto& [name, t] : tensors) detail::check_savable(dir, name, t);
  // Greedy in name order, as transformers does in state-dict order.
  std::vector<std::map<std::string, torch::Tensor>> shards;
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    if (shards.empty() || (shard_bytes > 0 && shard_bytes + nbytes > max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace(name, t);
    shard_bytes += nbytes;
    total_bytes += nbytes;
  }
  const std::map<std::string, std::string> metadata{{"format", "pt"}};

  std::set<std::string> keep;
  if (shards.size() <= 1) {
    save_safetensors((d / kHfWeightsFile).string(), tensors, metadata);
    keep.insert(kHfWeightsFile);
  } else {
    json weight_map = json::object();
    for (size_t k = 0; k < shards.size(); ++k) {
      const std::string name = shard_name(k + 1, shards.size());
      save_safetensors((d / name).string(), shards[k], metadata);
      for (const auto& entry : shards[k]) weight_map[entry.first] = name;
      keep.insert(name);
    }
    const json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    write_text_atomically((d / kHfIndexFile).string(), index.dump(2) + "\n");
    keep.insert(kHfIndexFile);
  }
  // Only now drop files of an earlier save: until here a reader still finds a complete old set
  // (model.safetensors wins over an index, so it must go last when switching to shards).
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(d, ec)) {
    const std::string f = entry.path().filename().string();
    const bool ours = f == kHfWeightsFile || f == kHfIndexFile || is_shard_name(f);
    if (ours && !keep.count(f)) stale.push_back(entry.path());
  }
  for (const fs::path& p : stale) fs::remove(p, ec);
}

json read_hf_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / kHfConfigFile).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) throw UserError(path + ": missing (a Hugging Face model directory needs config.json)");
  json config;
  try {
    config = json::parse(read_text(path));
  } catch (const json::exception& e) {
    fail(path, "invalid JSON: " + printable(e.what(), 300));
  }
  if (!config.is_object()) fail(path, "not a JSON object");
  return config;
}

}  // namespace tandem::models
