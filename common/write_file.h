// Small files the engine writes (recipes, states, markers, manifests, JSON sidecars) with every
// write checked: an unchecked stream on a full disk leaves a short file behind and no error, and a
// run that reads it back later (a resume, an export) fails far from the cause. Header-only so every
// layer can use it.
#pragma once

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "common/error.h"

namespace tandem {

// Writes `bytes` to `path` (created or truncated). Throws UserError "cannot write <path> (disk
// full? out of quota?)" when any part of the write, the flush or the close fails.
inline void write_file_checked(const std::string& path, const std::string& bytes) {
  const auto fail = [&] { throw UserError("cannot write " + path + " (disk full? out of quota?)"); };
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw UserError("cannot write " + path + ": " + std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.flush();
  if (!out) fail();
  out.close();
  if (out.fail()) fail();
}

// write_file_checked to `path`.tmp, then renamed over `path`: a reader sees the old file or the
// whole new one. Throws UserError naming the file when either step fails.
inline void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  write_file_checked(tmp, bytes);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw UserError("cannot move " + tmp + " to " + path + ": " + ec.message());
}

}  // namespace tandem
