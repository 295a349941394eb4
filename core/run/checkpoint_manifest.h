// Checkpoint integrity: MANIFEST.json lists every file of a checkpoint with its size and XXH64
// checksum. It is written when the checkpoint is committed and checked before one is loaded, so
// bytes damaged after the write (a flipped bit, a truncated copy, a hand edit, a lost file) are
// refused by name instead of being loaded. Files are hashed in 1 MiB chunks: verifying reads each
// file once and never holds it in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

// XXH64 with seed 0 (the xxHash specification), fed in pieces of any size; the digest equals
// xxh64() of the concatenated pieces.
class Xxh64 {
 public:
  Xxh64();
  void update(const void* data, size_t len);
  uint64_t digest() const;

 private:
  uint64_t acc_[4];
  unsigned char buf_[32];
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

uint64_t xxh64(const void* data, size_t len);
// 16 lower-case hex digits.
std::string hex64(uint64_t x);

// XXH64 of a file's bytes, streamed. Throws std::runtime_error when it cannot be read.
uint64_t file_xxh64(const std::string& path);

inline constexpr const char* kManifestFile = "MANIFEST.json";

// Writes dir/MANIFEST.json for every regular file below dir (paths relative to dir, with '/'),
// leaving out the manifest itself and the names in `exclude` (files written after it).
void write_manifest(const std::string& dir, const std::vector<std::string>& exclude);

struct Integrity {
  enum class Status { kIntact, kUnverified, kDamaged };
  Status status = Status::kUnverified;
  // kDamaged: "<file>: <what is wrong>" for the first damaged file found; kUnverified: why there
  // is nothing to check; kIntact: "<n> files, <bytes> bytes verified".
  std::string detail;
};

// Checks dir against its manifest: every listed file present with its size (all sizes first,
// so a truncated file is found without hashing the others), then every checksum.
Integrity verify_manifest(const std::string& dir);

}  // namespace tandem
