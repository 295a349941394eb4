// models/safetensors against the independent Python reference (tests/fixtures/safetensors/,
// scripts/fixtures/make_safetensors.py): exact values, byte-identical writes, HF sharding,
// header validation, and fuzzing of truncated / corrupted / absurd files.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "common/error.h"
#include "fixtures.h"
#include "models/safetensors.h"

using namespace tandem;
using namespace tandem::models;
namespace fs = std::filesystem;
using TensorMap = std::map<std::string, torch::Tensor>;

namespace {

std::string fixture_path(const std::string& name) { return std::string(TANDEM_FIXTURES_DIR) + "/safetensors/" + name; }

const nlohmann::json& expected() {
  static const nlohmann::json j = test::load_fixture("safetensors/expected.json");
  return j;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file with the given header text and data bytes (header length = text size).
std::string raw_file(const std::string& header, const std::string& data) {
  return u64_le(header.size()) + header + data;
}

torch::Dtype dtype_named(const std::string& name) {
  static const std::map<std::string, torch::Dtype> m{
      {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16}, {"BF16", torch::kBFloat16},
      {"I64", torch::kInt64},   {"I32", torch::kInt32},   {"I16", torch::kInt16},   {"I8", torch::kInt8},
      {"U8", torch::kUInt8},    {"BOOL", torch::kBool}};
  return m.at(name);
}

// The tensor an expected.json entry describes, built from its float64 values.
torch::Tensor expected_tensor(const nlohmann::json& e) {
  const auto shape = e["shape"].get<std::vector<int64_t>>();
  return test::to_tensor(e["values"], torch::kFloat64).to(dtype_named(e["dtype"].get<std::string>())).reshape(shape);
}

// Same dtype, same shape, same bytes (so NaN payloads and -0.0 count).
bool same_bytes(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const torch::Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

void check_same_maps(const TensorMap& got, const TensorMap& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [name, t] : want) {
    INFO("tensor " << name);
    REQUIRE(got.count(name) == 1);
    CHECK(same_bytes(got.at(name), t));
  }
}

TensorMap expected_tensors(const nlohmann::json& tensors) {
  TensorMap out;
  for (const auto& [name, e] : tensors.items()) out.emplace(name, expected_tensor(e));
  return out;
}

std::map<std::string, std::string> expected_metadata(const nlohmann::json& file) {
  return file["metadata"].get<std::map<std::string, std::string>>();
}

// Loading `path` must throw UserError whose message names the file and contains `what`.
void require_user_error(const std::string& path, const std::string& what) {
  for (int header_only = 0; header_only < 2; ++header_only) {
    try {
      if (header_only)
        read_safetensors_header(path);
      else
        load_safetensors(path);
      FAIL("no error; expected one containing: " << what);
    } catch (const UserError& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(msg.find(path) != std::string::npos);
      CHECK(msg.find(what) != std::string::npos);
    }
  }
}

// Loading a corrupted file ends in UserError or in a valid tensor map, nothing else.
// Returns true when it loaded.
bool loads_or_user_error(const std::string& path) {
  try {
    const TensorMap m = load_safetensors(path);
    for (const auto& [name, t] : m) {
      REQUIRE(t.is_contiguous());
      if (t.numel() > 0) (void)t.to(torch::kFloat64).sum().item<double>();  // touch every element
    }
    return true;
  } catch (const UserError&) {
    return false;
  }
}

}  // namespace

TEST_CASE("load_safetensors reads the reference files exactly", "[safetensors]") {
  for (const auto& [file, want] : expected()["files"].items()) {
    INFO(file);
    const TensorMap got = load_safetensors(fixture_path(file));
    check_same_maps(got, expected_tensors(want["tensors"]));
    for (const auto& [name, t] : got) {
      CHECK(t.device().is_cpu());
      CHECK(t.is_contiguous());
    }
  }
}

TEST_CASE("read_safetensors_header reports the layout without loading data", "[safetensors]") {
  for (const auto& [file, want] : expected()["files"].items()) {
    INFO(file);
    const SafetensorsInfo info = read_safetensors_header(fixture_path(file));
    CHECK(info.header_bytes == want["header_bytes"].get<uint64_t>());
    CHECK(info.data_start == 8 + info.header_bytes);
    CHECK(info.data_start + info.data_bytes == fs::file_size(fixture_path(file)));
    CHECK(info.metadata == expected_metadata(want));
    REQUIRE(info.tensors.size() == want["tensors"].size());
    for (const auto& [name, e] : want["tensors"].items()) {
      const SafetensorsTensorInfo& t = info.tensors.at(name);
      CHECK(t.dtype == e["dtype"].get<std::string>());
      CHECK(t.torch_dtype == dtype_named(t.dtype));
      CHECK(t.shape == e["shape"].get<std::vector<int64_t>>());
      CHECK(t.begin == e["data_offsets"][0].get<uint64_t>());
      CHECK(t.end == e["data_offsets"][1].get<uint64_t>());
    }
  }
}

TEST_CASE("save_safetensors writes the reference files byte for byte", "[safetensors]") {
  test::TempDir dir("tandem_st");
  for (const auto& [file, want] : expected()["files"].items()) {
    INFO(file);
    // Built from the expected values, not from the loaded file, so the writer stands alone.
    save_safetensors(dir.file(file), expected_tensors(want["tensors"]), expected_metadata(want));
    CHECK(read_bytes(dir.file(file)) == read_bytes(fixture_path(file)));
    CHECK_FALSE(fs::exists(dir.file(file) + ".tmp"));
  }
}

TEST_CASE("every dtype round-trips bitwise, whatever the input layout", "[safetensors]") {
  torch::manual_seed(7);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  TensorMap tensors;
  for (torch::Dtype dt : {torch::kFloat64, torch::kFloat32, torch::kFloat16, torch::kBFloat16}) {
    const std::string name = std::string("float.") + c10::toString(dt);
    tensors[name] = torch::randn({3, 5}, torch::kFloat64).to(dt);                                       // [3, 5]
    tensors[name + ".special"] = torch::tensor({inf, -inf, nan, -0.0, 1e-40}, torch::kFloat64).to(dt);  // [5]
  }
  tensors["i64.extremes"] =
      torch::tensor({std::numeric_limits<int64_t>::min(), int64_t(-1), std::numeric_limits<int64_t>::max()});
  tensors["i32"] = torch::randint(-1000000, 1000000, {2, 2, 2}, torch::kInt32);  // [2, 2, 2]
  tensors["i16"] = torch::randint(-32768, 32767, {7}, torch::kInt16);            // [7]
  tensors["i8"] = torch::randint(-128, 127, {3}, torch::kInt8);                  // [3]: misaligns what follows
  tensors["u8"] = torch::randint(0, 255, {1, 5}, torch::kUInt8);                 // [1, 5]
  tensors["bool"] = torch::rand({9}) > 0.5;                                      // [9]
  tensors["scalar.i64"] = torch::tensor(int64_t(42));                            // []
  tensors["scalar.bf16"] = torch::tensor(1.5).to(torch::kBFloat16);              // []
  tensors["empty"] = torch::empty({0, 4}, torch::kFloat16);                      // [0, 4]
  tensors["transposed"] = torch::randn({4, 3}).t();                              // [3, 4], non-contiguous
  tensors["sliced"] = torch::arange(20, torch::kInt64).slice(0, 5, 17, 3);       // [4], storage offset
  tensors["grad"] = torch::randn({2}).requires_grad_(true);                      // [2]

  test::TempDir dir("tandem_st");
  save_safetensors(dir.file("rt.safetensors"), tensors, {{"k", "v"}});
  check_same_maps(load_safetensors(dir.file("rt.safetensors")), tensors);

  const SafetensorsInfo info = read_safetensors_header(dir.file("rt.safetensors"));
  CHECK(info.metadata == std::map<std::string, std::string>{{"k", "v"}});
  CHECK(info.header_bytes % 8 == 0);
  for (const auto& [name, t] : info.tensors) {
    INFO(name);
    CHECK((info.data_start + t.begin) % c10::elementSize(t.torch_dtype) == 0);  // aligned layout
  }
}

TEST_CASE("save_safetensors replaces files atomically and rejects what the format cannot hold", "[safetensors]") {
  test::TempDir dir("tandem_st");
  const std::string path = dir.file("x.safetensors");
  save_safetensors(path, {{"a", torch::ones({2})}});
  save_safetensors(path, {{"b", torch::zeros({3}, torch::kInt8)}});
  check_same_maps(load_safetensors(path), {{"b", torch::zeros({3}, torch::kInt8)}});

  const std::string before = read_bytes(path);
  auto rejects = [&](const TensorMap& t, const std::map<std::string, std::string>& meta, const std::string& what) {
    INFO(what);
    CHECK_THROWS_WITH(save_safetensors(path, t, meta), Catch::Contains(what));
    CHECK(read_bytes(path) == before);  // the old file is untouched
    CHECK_FALSE(fs::exists(path + ".tmp"));
  };
  rejects({{"c", torch::ones({2}, torch::kComplexFloat)}}, {}, "has no safetensors dtype");
  rejects({{"__metadata__", torch::ones({2})}}, {}, "reserved");
  rejects({{"u", torch::Tensor()}}, {}, "undefined");
  rejects({{std::string("bad\xff"), torch::ones({1})}}, {}, "name is not valid UTF-8");
  rejects({{"a", torch::ones({1})}}, {{"k", std::string("\xc3")}}, "metadata string is not valid UTF-8");
  CHECK_THROWS_AS(save_safetensors(dir.file("no/such/dir/x.safetensors"), {{"a", torch::ones({1})}}), UserError);
  CHECK_THROWS_AS(safetensors_dtype_name(torch::kComplexDouble), UserError);
  CHECK(safetensors_dtype_name(torch::kBFloat16) == "BF16");

  save_safetensors(path, {});  // no tensors is a valid file: "{}" padded to 8
  CHECK(read_bytes(path) == u64_le(8) + "{}      ");
  CHECK(load_safetensors(path).empty());
}

TEST_CASE("header validation names the file and the problem", "[safetensors]") {
  test::TempDir dir("tandem_st");
  const std::string path = dir.file("bad.safetensors");
  const std::string f8(8, '\x01');  // 8 data bytes: two F32
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  struct Case {
    std::string bytes, what;
  };
  const std::vector<Case> cases{
      {"12345", "too short"},
      {u64_le(100'000'001) + "{}", "100 MB"},
      {u64_le(~uint64_t(0)) + "{}", "100 MB"},
      {u64_le(64) + "{}      ", "runs past the end"},
      {u64_le(0), "start with '{'"},
      {raw_file(" {" + a + "}", f8), "start with '{'"},
      {raw_file("{" + a, f8), "invalid JSON"},
      {raw_file("{" + a + "} x", f8), "invalid JSON"},
      {raw_file("{\"a\":{\"dtype\":\"F\xff\"}}", ""), "invalid JSON"},
      {raw_file("{" + a + "," + a + "}", f8), "duplicate key \"a\""},
      {raw_file(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f8), "duplicate key"},
      {raw_file(R"({"a":3})", ""), "not a JSON object"},
      {raw_file(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", f8), "unsupported dtype \"F8_E4M3\""},
      {raw_file(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", f8), "\"dtype\""},
      {raw_file(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", f8), "\"shape\""},
      {raw_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", f8), "negative (-2)"},
      {raw_file(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", f8), "not a non-negative integer"},
      {raw_file(R"({"a":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})", f8), "nested deeper"},
      {raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", f8), "[begin, end]"},
      {raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", f8), "end before they begin"},
      {raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", f8), "needs 8"},
      {raw_file(R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,0]}})", ""), "too large"},
      {raw_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})", ""), "too large"},
      {raw_file(R"({"a":{"dtype":"F32","shape":[0,4611686018427387904,4],"data_offsets":[0,0]}})", ""), "too large"},
      {raw_file("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})", std::string(20, '\0')),
       "hole"},
      {raw_file("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", std::string(12, '\0')),
       "overlaps"},
      {raw_file("{" + a + R"(,"z":{"dtype":"F32","shape":[0],"data_offsets":[100,100]}})", f8), "hole"},
      {raw_file("{" + a + "}", f8 + "xyzw"), "4 trailing bytes"},
      {raw_file("{" + a + "}", f8.substr(0, 4)), "truncated"},
      {raw_file(R"({"__metadata__":{"k":1}})", ""), "\"__metadata__\" value"},
      {raw_file(R"({"__metadata__":[]})", ""), "\"__metadata__\" is not"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i << ": " << cases[i].what);
    write_bytes(path, cases[i].bytes);
    require_user_error(path, cases[i].what);
  }
  std::string dims = "[1";
  for (int i = 0; i < 64; ++i) dims += ",1";
  write_bytes(path, raw_file(R"({"a":{"dtype":"F32","shape":)" + dims + R"(],"data_offsets":[0,4]}})", "abcd"));
  require_user_error(path, "65 dims");
  require_user_error(dir.file("missing.safetensors"), "does not exist");
  require_user_error(dir.str(), "not a regular file");
}

TEST_CASE("the reader accepts every valid variation of the format", "[safetensors]") {
  test::TempDir dir("tandem_st");
  const std::string path = dir.file("ok.safetensors");
  float v[2] = {1.5f, -2.0f};
  const std::string f8(reinterpret_cast<const char*>(v), 8);
  // Keys out of offset order, spaces and a newline as padding, null metadata, an unknown
  // field, a bool byte other than 0/1 (normalised), zero-size tensors at both ends.
  write_bytes(path, raw_file("{\"__metadata__\":null,\"z\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[8,9]},"
                             "\"a\":{\"extra\":1,\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                             "\"e0\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                             "\"e9\":{\"dtype\":\"U8\",\"shape\":[3,0],\"data_offsets\":[9,9]}}\n   ",
                             f8 + "\x07"));
  const TensorMap m = load_safetensors(path);
  REQUIRE(m.size() == 4);
  CHECK(torch::equal(m.at("a"), torch::tensor({1.5f, -2.0f})));
  CHECK(*static_cast<const uint8_t*>(m.at("z").data_ptr()) == 1);
  CHECK(m.at("z").item<bool>());
  CHECK(m.at("e9").sizes() == torch::IntArrayRef({3, 0}));
  CHECK(read_safetensors_header(path).metadata.empty());
}

TEST_CASE("fuzz: every truncation of a valid file is a UserError", "[safetensors]") {
  const std::string bytes = read_bytes(fixture_path("all_dtypes.safetensors"));
  test::TempDir dir("tandem_st");
  const std::string path = dir.file("cut.safetensors");
  for (size_t cut = 0; cut < bytes.size(); ++cut) {  // every header offset and every data offset
    write_bytes(path, bytes.substr(0, cut));
    INFO("cut at " << cut);
    CHECK_THROWS_AS(load_safetensors(path), UserError);
  }
}

TEST_CASE("fuzz: absurd header lengths are UserErrors", "[safetensors]") {
  const std::string bytes = read_bytes(fixture_path("all_dtypes.safetensors"));
  const uint64_t n = read_safetensors_header(fixture_path("all_dtypes.safetensors")).header_bytes;
  test::TempDir dir("tandem_st");
  const std::string path = dir.file("len.safetensors");
  for (uint64_t len : {uint64_t(0), uint64_t(1), uint64_t(2), uint64_t(7), uint64_t(8), n - 8, n - 1, n + 1, n + 8,
                       uint64_t(bytes.size() - 8), uint64_t(bytes.size() - 7), uint64_t(100'000'000),
                       uint64_t(100'000'001), uint64_t(1) << 32, uint64_t(1) << 63, ~uint64_t(0)}) {
    INFO("header length " << len);
    write_bytes(path, u64_le(len) + bytes.substr(8));
    CHECK_THROWS_AS(load_safetensors(path), UserError);
  }
}

TEST_CASE("fuzz: corrupted headers load or throw UserError, never crash", "[safetensors]") {
  const std::string bytes = read_bytes(fixture_path("all_dtypes.safetensors"));
  const size_t header_end = 8 + read_safetensors_header(fixture_path("all_dtypes.safetensors")).header_bytes;
  const std::string syntax = "{}[]\":, 0123456789-.eE";
  test::TempDir dir("tandem_st");
  const std::string path = dir.file("fuzz.safetensors");
  std::mt19937_64 rng(20240612);
  int loaded = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string b = bytes;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits; ++k) {
      const size_t pos = rng() % header_end;  // the length prefix and the JSON
      switch (rng() % 4) {
        case 0:
          b[pos] = static_cast<char>(b[pos] ^ (1 << (rng() % 8)));
          break;  // bit flip
        case 1:
          b[pos] = static_cast<char>(rng() % 256);
          break;  // random byte
        case 2:
          b[pos] = syntax[rng() % syntax.size()];
          break;  // JSON-shaped
        default:  // digit -> digit
          for (size_t p = pos; p < header_end; ++p)
            if (std::isdigit(static_cast<unsigned char>(b[p]))) {
              b[p] = static_cast<char>('0' + rng() % 10);
              break;
            }
      }
    }
    write_bytes(path, b);
    INFO("iteration " << iter);
    loaded += loads_or_user_error(path);
  }
  // Some edits are harmless (padding, a tensor name); most must be caught, or the fuzz is idle.
  CHECK(loaded < 3000 / 4);
}

TEST_CASE("load_hf_weights and read_hf_config read the sharded reference directory", "[safetensors]") {
  const nlohmann::json& want = expected()["hf_sharded"];
  check_same_maps(load_hf_weights(fixture_path("hf_sharded")), expected_tensors(want["tensors"]));
  CHECK(read_hf_config(fixture_path("hf_sharded")) == want["config"]);
}

TEST_CASE("save_hf_weights shards like the reference, and switches layouts cleanly", "[safetensors]") {
  const nlohmann::json& want = expected()["hf_sharded"];
  const TensorMap tensors = expected_tensors(want["tensors"]);
  test::TempDir dir("tandem_st");
  save_hf_weights(dir.str(), tensors, want["max_shard_bytes"].get<uint64_t>());
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", kHfIndexFile}) {
    INFO(f);
    CHECK(read_bytes(dir.file(f)) == read_bytes(fixture_path(std::string("hf_sharded/") + f)));
  }
  CHECK_FALSE(fs::exists(dir.file(kHfWeightsFile)));
  check_same_maps(load_hf_weights(dir.str()), tensors);

  save_hf_weights(dir.str(), tensors);  // small enough: one file, the shards and index go
  CHECK(read_safetensors_header(dir.file(kHfWeightsFile)).metadata.at("format") == "pt");
  CHECK(std::distance(fs::directory_iterator(dir.str()), fs::directory_iterator()) == 1);
  check_same_maps(load_hf_weights(dir.str()), tensors);

  save_hf_weights(dir.str(), tensors, 1);  // every tensor exceeds the limit: a shard each
  CHECK_FALSE(fs::exists(dir.file(kHfWeightsFile)));
  const nlohmann::json index = nlohmann::json::parse(read_bytes(dir.file(kHfIndexFile)));
  CHECK(index["metadata"]["total_size"] == want["total_size"]);
  CHECK(index["weight_map"]["model.norm.weight"] == "model-00004-of-00004.safetensors");
  check_same_maps(load_hf_weights(dir.str()), tensors);
  CHECK_THROWS_AS(save_hf_weights(dir.str(), tensors, 0), UserError);

  // A tensor the format cannot hold fails before any shard is written.
  TensorMap bad = tensors;
  bad["zzz"] = torch::ones({1}, torch::kComplexFloat);
  CHECK_THROWS_WITH(save_hf_weights(dir.str(), bad, 1), Catch::Contains("'zzz'"));
  CHECK_FALSE(fs::exists(dir.file("model-00001-of-00005.safetensors")));
  check_same_maps(load_hf_weights(dir.str()), tensors);
}

TEST_CASE("load_hf_weights rejects inconsistent directories", "[safetensors]") {
  test::TempDir dir("tandem_st");
  const std::string index = dir.file(kHfIndexFile);
  auto fresh = [&] {
    fs::remove_all(dir.str());
    fs::copy(fixture_path("hf_sharded"), dir.str());
  };
  auto rejects = [&](const std::string& what) {
    INFO(what);
    CHECK_THROWS_WITH(load_hf_weights(dir.str()), Catch::Contains(what));
  };
  auto edit_index = [&](const std::function<void(nlohmann::json&)>& f) {
    nlohmann::json j = nlohmann::json::parse(read_bytes(index));
    f(j);
    write_bytes(index, j.dump());
  };
  fresh();
  fs::remove(dir.file("model-00002-of-00002.safetensors"));
  rejects("model-00002-of-00002.safetensors is missing");
  fresh();
  edit_index([](nlohmann::json& j) { j["weight_map"]["ghost"] = "model-00001-of-00002.safetensors"; });
  rejects("'ghost' is listed");
  fresh();
  edit_index([](nlohmann::json& j) { j["weight_map"].erase("model.norm.weight"); });
  rejects("not listed in model.safetensors.index.json, e.g. 'model.norm.weight'");
  fresh();
  edit_index([](nlohmann::json& j) { j["weight_map"]["lm_head.weight"] = "../model-00001-of-00002.safetensors"; });
  rejects("inside the directory");
  fresh();
  edit_index([](nlohmann::json& j) { j.erase("weight_map"); });
  rejects("weight_map");
  fresh();
  write_bytes(index, R"({"weight_map": {"a": "x", "a": "y"}})");
  rejects("duplicate key");
  fresh();
  write_bytes(dir.file("model-00001-of-00002.safetensors"), "garbage!");
  rejects("model-00001-of-00002.safetensors: header length");
  fs::remove_all(dir.str());
  fs::create_directories(dir.str());
  rejects("no model.safetensors or model.safetensors.index.json");
  CHECK_THROWS_WITH(load_hf_weights(dir.file("nope")), Catch::Contains("does not exist"));

  CHECK_THROWS_WITH(read_hf_config(dir.str()), Catch::Contains("config.json: missing"));
  write_bytes(dir.file("config.json"), "{\"a\": 1,}");
  CHECK_THROWS_WITH(read_hf_config(dir.str()), Catch::Contains("config.json: invalid JSON"));
  write_bytes(dir.file("config.json"), "[1]");
  CHECK_THROWS_WITH(read_hf_config(dir.str()), Catch::Contains("not a JSON object"));
}

// Not a unit test: writes the reference files with the C++ writer into
// $TANDEM_SAFETENSORS_OUT_DIR for scripts/fixtures/check_safetensors.py (ctest
// safetensors.python_reads_cpp).
TEST_CASE("write files for the Python reader", "[.writer]") {
  const char* out = std::getenv("TANDEM_SAFETENSORS_OUT_DIR");
  REQUIRE(out != nullptr);
  for (const auto& [file, want] : expected()["files"].items())
    save_safetensors((fs::path(out) / file).string(), expected_tensors(want["tensors"]), expected_metadata(want));
}

TEST_CASE("is_hf_weight_file: every format's weights and indexes, nothing else", "[safetensors]") {
  for (const char* name : {"model.safetensors", "model-00001-of-00002.safetensors", "model.safetensors.index.json",
                           "pytorch_model.bin", "pytorch_model.bin.index.json", "consolidated.pth", "tf_model.h5",
                           "flax_model.msgpack", "model.gguf", "model.onnx", "training_args.bin"})
    CHECK(models::is_hf_weight_file(name));
  for (const char* name : {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
                           "tokenizer.model", "special_tokens_map.json", "README.md", "chat_template.jinja"})
    CHECK_FALSE(models::is_hf_weight_file(name));
}
