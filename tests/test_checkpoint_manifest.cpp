// XXH64 against the system libxxhash, and the checkpoint manifest against real damage to real
// checkpoint files: one case per kind of file (safetensors, optimizer .pt, trainer_state.json)
// and a lost file. Each damage case first shows that the file's own reader would not notice.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/run/checkpoint.h"
#include "core/run/checkpoint_manifest.h"
#include "fixtures.h"
#include "models/safetensors.h"

using namespace tandem;
namespace fs = std::filesystem;
using Status = Integrity::Status;

namespace {

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + 7) % 256);
  return s;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A committed checkpoint with the trainer's kinds of files: an HF safetensors model, an AdamW
// state after one step, trainer_state.json and the recipe.
struct Checkpoint {
  test::TempDir run{"tandem_manifest"};
  std::string dir;
  torch::Tensor weight = torch::randn({64, 64}, torch::kFloat32);  // (64, 64)

  Checkpoint() {
    CheckpointDir ckpts(run.str(), 0);
    const std::string staging = ckpts.begin(3);
    fs::create_directories(staging + "/ar_model");
    models::save_safetensors(staging + "/ar_model/model.safetensors", {{"model.embed_tokens.weight", weight}});
    torch::Tensor p = weight.clone().requires_grad_(true);  // (64, 64)
    torch::optim::AdamW opt({p}, torch::optim::AdamWOptions(1e-3));
    p.pow(2).sum().backward();
    opt.step();
    torch::save(opt, staging + "/optimizer_tp0.pt");
    std::ofstream(staging + "/trainer_state.json") << "{\n  \"completed_steps\": 3,\n  \"tracks\": {}\n}\n";
    std::ofstream(staging + "/recipe.yaml") << "run: {name: t}\n";
    dir = ckpts.commit(3);
  }
  std::string file(const std::string& rel) const { return dir + "/" + rel; }
};

}  // namespace

TEST_CASE("xxh64 equals libxxhash on every length class", "[checkpoint]") {
  // From scripts/fixtures/xxh64_vectors.py (the system libxxhash through ctypes).
  CHECK(xxh64("a", 1) == 0xd24ec4f1a98c6e5bULL);
  CHECK(xxh64("abc", 3) == 0x44bc2cf5ad770999ULL);
  const std::vector<std::pair<size_t, uint64_t>> vectors{
      {0, 0xef46db3751d8e999ULL},    {1, 0xa96c7f0ce858bbb7ULL},      {3, 0xbed43740ee6332bbULL},
      {4, 0xfa212ae44b3bb23dULL},    {7, 0x2744460dd675d2c0ULL},      {8, 0x994b676b71ce94ddULL},
      {31, 0x6711d55e306b5d8fULL},   {32, 0x07f7b8e3bc5d6e25ULL},     {33, 0x09f85eeb4e1cbe9fULL},
      {63, 0xb7c9968c066cb6a5ULL},   {64, 0x50d4159a0411632eULL},     {100, 0x9ddada11d3dc2d8fULL},
      {1000, 0x0bf0bdbcc82eb373ULL}, {1048621, 0xcbd7e8ac09168409ULL}};
  for (const auto& [n, want] : vectors) {
    INFO("length " << n);
    const std::string data = pattern(n);
    CHECK(xxh64(data.data(), n) == want);
  }
}

TEST_CASE("xxh64 fed in pieces equals one pass; files are streamed across chunk boundaries", "[checkpoint]") {
  const std::string data = pattern(1048621);  // one 1 MiB chunk and a partial one
  const uint64_t whole = xxh64(data.data(), data.size());
  for (const size_t piece : {1, 5, 31, 32, 33, 4096, 1 << 20}) {
    Xxh64 h;
    for (size_t at = 0; at < data.size(); at += piece) h.update(data.data() + at, std::min(piece, data.size() - at));
    CHECK(h.digest() == whole);
  }
  test::TempDir tmp("tandem_xxh");
  write_bytes(tmp.file("blob"), data);
  CHECK(file_xxh64(tmp.file("blob")) == 0xcbd7e8ac09168409ULL);
  CHECK_THROWS(file_xxh64(tmp.file("nope")));
}

TEST_CASE("an intact checkpoint verifies; the manifest lists every file but itself and COMPLETE", "[checkpoint]") {
  Checkpoint c;
  const Integrity r = verify_manifest(c.dir);
  CHECK(r.status == Status::kIntact);
  CHECK_THAT(r.detail, Catch::StartsWith("4 files, "));
  std::ifstream in(c.file(kManifestFile));
  const auto files = nlohmann::json::parse(in).at("files");
  CHECK(files.size() == 4);
  CHECK(files.contains("ar_model/model.safetensors"));
  CHECK(files.at("optimizer_tp0.pt").at("size").get<uint64_t>() == fs::file_size(c.file("optimizer_tp0.pt")));
  CHECK_FALSE(files.contains(CheckpointDir::kCompleteMarker));
}

TEST_CASE("damage: a flipped byte in a safetensors data section", "[checkpoint]") {
  Checkpoint c;
  const std::string path = c.file("ar_model/model.safetensors");
  const auto info = models::read_safetensors_header(path);
  std::string bytes = read_bytes(path);
  bytes[info.data_start + 1003] ^= 0x01;  // one exponent bit of the 251st float
  write_bytes(path, bytes);
  // The format reader cannot see it: the file loads, with a different tensor.
  const auto loaded = models::load_safetensors(path);
  CHECK_FALSE(torch::equal(loaded.at("model.embed_tokens.weight"), c.weight));
  const Integrity r = verify_manifest(c.dir);
  CHECK(r.status == Status::kDamaged);
  CHECK_THAT(r.detail, Catch::StartsWith("ar_model/model.safetensors: contents changed after the checkpoint"));
}

TEST_CASE("damage: a truncated optimizer file", "[checkpoint]") {
  Checkpoint c;
  const std::string path = c.file("optimizer_tp0.pt");
  const auto size = fs::file_size(path);
  fs::resize_file(path, size / 2);
  const Integrity r = verify_manifest(c.dir);
  CHECK(r.status == Status::kDamaged);
  CHECK(r.detail == "optimizer_tp0.pt: " + std::to_string(size / 2) + " bytes where the manifest recorded " +
                        std::to_string(size) + " (truncated)");
}

TEST_CASE("damage: an edited trainer_state.json of the same size", "[checkpoint]") {
  Checkpoint c;
  const std::string path = c.file("trainer_state.json");
  std::string text = read_bytes(path);
  text.replace(text.find("\"completed_steps\": 3"), 20, "\"completed_steps\": 4");
  write_bytes(path, text);
  // Still valid JSON with the same size: only the checksum can tell.
  CHECK(nlohmann::json::parse(text).at("completed_steps") == 4);
  const Integrity r = verify_manifest(c.dir);
  CHECK(r.status == Status::kDamaged);
  CHECK_THAT(r.detail, Catch::StartsWith("trainer_state.json: contents changed"));
}

TEST_CASE("damage: a file lost after the write", "[checkpoint]") {
  Checkpoint c;
  fs::remove(c.file("recipe.yaml"));
  const Integrity r = verify_manifest(c.dir);
  CHECK(r.status == Status::kDamaged);
  CHECK(r.detail == "recipe.yaml: missing");
}

TEST_CASE("a broken manifest is damage; no manifest is unverified", "[checkpoint]") {
  Checkpoint c;
  write_bytes(c.file(kManifestFile), "{\"format\": \"tandem-manifest-1\", \"files\": ");
  CHECK(verify_manifest(c.dir).detail == "MANIFEST.json: not a valid tandem-manifest-1 manifest");
  fs::remove(c.file(kManifestFile));
  const Integrity r = verify_manifest(c.dir);
  CHECK(r.status == Status::kUnverified);
  CHECK_THAT(r.detail, Catch::Contains("no MANIFEST.json"));
}
