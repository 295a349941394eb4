// XXH64 follows the xxHash specification (github.com/Cyan4973/xxHash, doc/xxhash_spec.md):
// four 64-bit lanes over 32-byte stripes, then the 8 / 4 / 1-byte tail and the avalanche.
// Inputs are read as little-endian words byte by byte, so the digest is the same on any host.
#include "core/run/checkpoint_manifest.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/error.h"
#include "common/write_file.h"

namespace fs = std::filesystem;

namespace tandem {

namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ULL;
constexpr size_t kChunkBytes = size_t{1} << 20;
constexpr const char* kFormat = "tandem-manifest-1";

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

uint64_t read64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t read32(const unsigned char* p) {
  return uint64_t{p[0]} | (uint64_t{p[1]} << 8) | (uint64_t{p[2]} << 16) | (uint64_t{p[3]} << 24);
}

uint64_t lane_round(uint64_t acc, uint64_t input) { return rotl(acc + input * kP2, 31) * kP1; }

uint64_t merge_lane(uint64_t h, uint64_t acc) { return (h ^ lane_round(0, acc)) * kP1 + kP4; }

Integrity damaged(const std::string& file, const std::string& what) {
  return {Integrity::Status::kDamaged, file + ": " + what};
}

}  // namespace

std::string hex64(uint64_t x) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

Xxh64::Xxh64() : acc_{kP1 + kP2, kP2, 0, 0 - kP1}, buf_{} {}

void Xxh64::update(const void* data, size_t len) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += len;
  auto stripe = [&](const unsigned char* s) {
    for (int i = 0; i < 4; ++i) acc_[i] = lane_round(acc_[i], read64(s + 8 * i));
  };
  if (buffered_ > 0) {
    const size_t take = std::min(len, sizeof(buf_) - buffered_);
    std::memcpy(buf_ + buffered_, p, take);
    buffered_ += take, p += take, len -= take;
    if (buffered_ < sizeof(buf_)) return;
    stripe(buf_);
    buffered_ = 0;
  }
  for (; len >= 32; p += 32, len -= 32) stripe(p);
  std::memcpy(buf_, p, len);
  buffered_ = len;
}

uint64_t Xxh64::digest() const {
  uint64_t h = kP5;
  if (total_ >= 32) {
    h = rotl(acc_[0], 1) + rotl(acc_[1], 7) + rotl(acc_[2], 12) + rotl(acc_[3], 18);
    for (uint64_t a : acc_) h = merge_lane(h, a);
  }
  h += total_;
  const unsigned char* p = buf_;
  size_t left = buffered_;
  for (; left >= 8; p += 8, left -= 8) h = rotl(h ^ lane_round(0, read64(p)), 27) * kP1 + kP4;
  if (left >= 4) h = rotl(h ^ (read32(p) * kP1), 23) * kP2 + kP3, p += 4, left -= 4;
  for (; left > 0; ++p, --left) h = rotl(h ^ (*p * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

uint64_t xxh64(const void* data, size_t len) {
  Xxh64 h;
  h.update(data, len);
  return h.digest();
}

uint64_t file_xxh64(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open for reading");
  std::vector<char> chunk(kChunkBytes);
  Xxh64 h;
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    h.update(chunk.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw std::runtime_error(path + ": read error");
  return h.digest();
}

void write_manifest(const std::string& dir, const std::vector<std::string>& exclude) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), dir).generic_string();
    if (rel == kManifestFile || std::find(exclude.begin(), exclude.end(), rel) != exclude.end()) continue;
    files[rel] = {{"size", static_cast<uint64_t>(e.file_size())}, {"xxh64", hex64(file_xxh64(e.path().string()))}};
  }
  nlohmann::json manifest = {{"format", kFormat}, {"files", files}};
  write_file_checked((fs::path(dir) / kManifestFile).string(), manifest.dump(1) + "\n");
}

Integrity verify_manifest(const std::string& dir) {
  const fs::path path = fs::path(dir) / kManifestFile;
  if (!fs::exists(path))
    return {Integrity::Status::kUnverified,
            std::string("no ") + kManifestFile + " (written by a tandem that did not record checksums)"};
  std::ifstream in(path);
  const nlohmann::json manifest = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object() || manifest.value("format", "") != kFormat ||
      !manifest.contains("files") || !manifest["files"].is_object())
    return damaged(kManifestFile, std::string("not a valid ") + kFormat + " manifest");
  struct Entry {
    std::string name;
    uint64_t size;
    std::string checksum;
  };
  std::vector<Entry> entries;
  for (const auto& [name, f] : manifest["files"].items()) {
    if (!f.is_object() || !f.contains("size") || !f["size"].is_number_unsigned() || !f.contains("xxh64") ||
        !f["xxh64"].is_string())
      return damaged(kManifestFile, "malformed entry for " + name);
    entries.push_back({name, f["size"].get<uint64_t>(), f["xxh64"].get<std::string>()});
  }
  uint64_t bytes = 0;
  for (const Entry& e : entries) {
    const fs::path file = fs::path(dir) / e.name;
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) return damaged(e.name, "missing");
    const uint64_t size = fs::file_size(file, ec);
    if (ec) return damaged(e.name, "cannot read its size (" + ec.message() + ")");
    if (size != e.size)
      return damaged(e.name, std::to_string(size) + " bytes where the manifest recorded " + std::to_string(e.size) +
                                 (size < e.size ? " (truncated)" : ""));
    bytes += size;
  }
  for (const Entry& e : entries) {
    std::string got;
    try {
      got = hex64(file_xxh64((fs::path(dir) / e.name).string()));
    } catch (const std::exception& ex) {
      return damaged(e.name, ex.what());
    }
    if (got != e.checksum)
      return damaged(e.name, "contents changed after the checkpoint was written (xxh64 " + got +
                                 ", the manifest recorded " + e.checksum + ")");
  }
  return {Integrity::Status::kIntact,
          std::to_string(entries.size()) + " files, " + std::to_string(bytes) + " bytes verified"};
}

}  // namespace tandem
