// Fixture loading for the numerics tests.
#include "fixtures.h"

#include <stdlib.h>

#include <fstream>
#include <map>
#include <stdexcept>

namespace tandem::test {

const nlohmann::json& load_fixture(const std::string& name) {
  static std::map<std::string, nlohmann::json> cache;  // Catch2 runs tests on one thread
  const auto hit = cache.find(name);
  if (hit != cache.end()) return hit->second;
  const std::string path = std::string(TANDEM_FIXTURES_DIR) + "/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("missing fixture " + path + " (run scripts/fixtures/make_numerics.py)");
  return cache.emplace(name, nlohmann::json::parse(in)).first->second;
}

torch::Tensor to_tensor(const nlohmann::json& values, torch::Dtype dtype) {
  std::vector<double> v = values.get<std::vector<double>>();
  return torch::tensor(v, torch::kFloat64).to(dtype);
}

torch::Tensor to_index(const nlohmann::json& values) {
  std::vector<int64_t> v = values.get<std::vector<int64_t>>();
  return torch::tensor(v, torch::kInt64);
}

double max_rel_error(const torch::Tensor& a, const torch::Tensor& b, double floor) {
  if (a.numel() == 0 && b.numel() == 0) return 0.0;
  torch::Tensor x = a.to(torch::kFloat64), y = b.to(torch::kFloat64);
  torch::Tensor denom = y.abs().clamp_min(floor);
  return ((x - y).abs() / denom).max().item<double>();
}

double rel_error(double a, double b, double floor) { return std::abs(a - b) / std::max(std::abs(b), floor); }

TempDir::TempDir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace tandem::test
