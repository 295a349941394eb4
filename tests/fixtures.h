// Test helpers: read the JSON fixtures written by scripts/fixtures/*.py and compare tensors
// with a stated relative / absolute tolerance.
#pragma once

#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"

namespace tandem::test {

// tests/fixtures/<name>, parsed once and kept for the whole run: the reference stays valid, so
// `for (const auto& c : load_fixture(name)["cases"])` iterates a live object (a returned temporary
// would die before the loop body and leave the range dangling).
const nlohmann::json& load_fixture(const std::string& name);
torch::Tensor to_tensor(const nlohmann::json& values, torch::Dtype dtype);
torch::Tensor to_index(const nlohmann::json& values);  // int64

// max over elements of |a-b| / max(|b|, floor); floor keeps near-zero entries from dominating.
double max_rel_error(const torch::Tensor& a, const torch::Tensor& b, double floor = 1e-300);
double rel_error(double a, double b, double floor = 1e-300);

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "tandem_test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// The message of the UserError `f` throws; "<no error>" when it throws none.
template <class F>
std::string user_error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}

#ifdef TANDEM_TOKENIZER_CACHE_DIR
// A real tokenizer's directory (scripts/fixtures/fetch_tokenizers.sh): $TANDEM_TOKENIZER_DIR/<name>,
// else the build's cache.
inline std::string real_tokenizer_dir(const std::string& name) {
  const char* env = std::getenv("TANDEM_TOKENIZER_DIR");
  const std::string root = env && *env ? env : TANDEM_TOKENIZER_CACHE_DIR;
  return root + "/" + name;
}
#endif

}  // namespace tandem::test
